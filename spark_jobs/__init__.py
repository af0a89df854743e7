"""PySpark jobs over the node's log: ``rehash`` and ``snapshot`` (see docs/spark.md).

Run them as ``python -m spark_jobs.rehash ...`` / ``python -m spark_jobs.snapshot ...``. Importing
this package never starts a Spark session nor imports pyspark; the job modules themselves are not
imported here, so that ``python -m`` runs them exactly once.
"""

from __future__ import annotations

from spark_jobs.source import (
    PROGRESS_PREFIX,
    RESULT_PREFIX,
    JdbcSource,
    build_session,
    emit_progress,
    jdbc_source,
    read_events,
)
from storage.snapshot_files import iter_leaf_entries, load_manifest, read_object
from sync.snapshot_manifest import (
    FORMAT,
    MANIFEST_NAME,
    Chain,
    FileEntry,
    Manifest,
    TreeEntry,
    build_tree,
)

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "PROGRESS_PREFIX",
    "RESULT_PREFIX",
    "Chain",
    "FileEntry",
    "JdbcSource",
    "Manifest",
    "TreeEntry",
    "build_session",
    "build_tree",
    "emit_progress",
    "iter_leaf_entries",
    "jdbc_source",
    "load_manifest",
    "read_events",
    "read_object",
]
