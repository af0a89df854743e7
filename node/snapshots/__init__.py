"""Spark snapshots: the scheduler that runs the jobs (``scheduler``, ``job_process``), bootstrap
and pull from a snapshot (``bootstrap``), and its API routes (``routes``).

Nothing is imported here: a command that needs one light module (``precheck``) does not pay for
the others (libp2p, the database layer).
"""
