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
from node.snapshots.job_process import (
    JobCommand,
    JobProgress,
    run_job,
)
from node.snapshots.routes import (
    SNAPSHOT_ROUTES,
)
from node.snapshots.scheduler import (
    RunState,
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
    "JobProgress",
    "PullResult",
    "RunState",
    "SnapshotJobConfig",
    "SnapshotScheduler",
    "bootstrap",
    "job_commands",
    "pull",
    "run_job",
    "scheduler_from_config",
    "verify_snapshot",
]
