"""Spark snapshots: the scheduler that runs the jobs, bootstrap/pull from a snapshot, and its
API routes.
"""

from __future__ import annotations

from node.snapshots.bootstrap import (
    BootstrapError,
    BootstrapResult,
    PullResult,
    bootstrap,
    pull,
    verify_snapshot,
)
from node.snapshots.routes import (
    SNAPSHOT_ROUTES,
)
from node.snapshots.scheduler import (
    JobCommand,
    SnapshotJobConfig,
    SnapshotScheduler,
    job_commands,
    scheduler_from_config,
)

__all__ = [
    "SNAPSHOT_ROUTES",
    "BootstrapError",
    "BootstrapResult",
    "JobCommand",
    "PullResult",
    "SnapshotJobConfig",
    "SnapshotScheduler",
    "bootstrap",
    "job_commands",
    "pull",
    "scheduler_from_config",
    "verify_snapshot",
]
