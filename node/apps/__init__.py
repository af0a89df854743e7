"""Applications on the event log (replicated database, block streams) and the runner that
applies committed batches to them.
"""

from __future__ import annotations

from node.apps.blocks_app import (
    BlocksApplication,
    router_of,
)
from node.apps.blocks_plugin import (
    BlocksBundle,
    BlocksPlugin,
    change_json,
)
from node.apps.db_app import (
    DbApplication,
    book_of,
)
from node.apps.db_json import (
    history_json,
    row_json,
    schema_json,
    typed_values,
)
from node.apps.db_log import (
    LEGACY_KEY,
    channel_max_seq,
    has_legacy_writes,
)
from node.apps.db_metrics import (
    METRICS,
    metric_of,
)
from node.apps.db_plugin import (
    DbBundle,
    DbPlugin,
)
from node.apps.db_publish import (
    WRITE_WAIT_S,
    SchemaSeeder,
    publish_and_wait,
)
from node.apps.plugins import (
    PLUGINS,
)
from node.apps.runner import (
    AppBundle,
    AppPlugin,
    AppRunner,
    LogApplication,
)

__all__ = [
    "LEGACY_KEY",
    "METRICS",
    "PLUGINS",
    "WRITE_WAIT_S",
    "AppBundle",
    "AppPlugin",
    "AppRunner",
    "BlocksApplication",
    "BlocksBundle",
    "BlocksPlugin",
    "DbApplication",
    "DbBundle",
    "DbPlugin",
    "LogApplication",
    "SchemaSeeder",
    "book_of",
    "change_json",
    "channel_max_seq",
    "has_legacy_writes",
    "history_json",
    "metric_of",
    "publish_and_wait",
    "router_of",
    "row_json",
    "schema_json",
    "typed_values",
]
