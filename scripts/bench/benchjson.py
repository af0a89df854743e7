"""The smoke contract of every ``scripts/bench/*_bench.py`` (docs/bench/README.md "Smoke size").

A benchmark declares ``KEYS``, the keys its JSON result always has (the test reads them with
``ast``, without importing the script), and ends with ``sys.exit(finish(result, KEYS, out))``:
``finish`` writes the JSON to ``out``, prints it as the last line of stdout, and returns 1 when a
documented key is missing or has no figure (``None``): that step failed. With ``--smoke`` the
script runs in seconds at a tiny size and ``out`` is :func:`smoke_path`, a temporary file, never
``docs/bench/*.json``. Targets are never asserted here.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["finish", "smoke_path"]


def smoke_path(name: str) -> Path:
    """Where a smoke run writes its JSON: a fresh temporary file."""
    fd, path = tempfile.mkstemp(prefix=f"syncnode-smoke-{name}-", suffix=".json")
    os.close(fd)
    return Path(path)


def finish(result: Mapping[str, Any], keys: Sequence[str], out: Path | None,
           optional: Sequence[str] = ()) -> int:
    """Write and print ``result``; 0 when every key of ``keys`` has a figure, else 1.
    ``optional``: keys of ``keys`` that this size does not measure (present, ``None``)."""
    text = json.dumps(result)
    if out is not None:
        out.write_text(json.dumps(result, indent=2) + "\n")
    missing = [k for k in keys if k not in result]
    empty = [k for k in keys if k in result and result[k] is None and k not in optional]
    if missing or empty:
        print(f"failed step: keys missing {missing}, keys without a figure {empty}",
              file=sys.stderr)
    print(text, flush=True)
    return 1 if missing or empty else 0
