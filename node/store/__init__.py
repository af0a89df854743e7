"""The daemon's database access: the event store and its writer (``events``), what it reports to
the replication driver (``reports``), the commit signal its observers feed (``signal``), batched
commits (``commits``) on one long-lived thread (``thread``), and the ingest worker process
(``worker``)."""
