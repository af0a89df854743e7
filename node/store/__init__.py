"""The daemon's database access: the event store and its writer (``events``), batched commits
(``commits``) on one long-lived thread (``thread``), and the ingest worker process (``worker``)."""
