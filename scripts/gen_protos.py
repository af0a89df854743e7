#!/usr/bin/env python3
"""Regenerate the checked-in protobuf modules (``*_pb2.py`` and ``*_pb2.pyi``).

Every ``.proto`` under ``sync/`` is compiled next to itself. ``--check`` compiles into a temporary
directory and exits 1 when a checked-in file differs, which is what the test suite runs.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent


def protos() -> list[Path]:
    return sorted((ROOT / "sync").rglob("*.proto"))


def generate(out_dir: Path) -> None:
    for proto in protos():
        rel = proto.relative_to(ROOT)
        args = [
            "protoc",
            f"-I{ROOT}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            str(rel),
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {rel}")


def stale() -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        out = []
        for produced in sorted(Path(tmp).rglob("*_pb2.py*")):
            rel = produced.relative_to(tmp)
            current = ROOT / rel
            if not current.exists() or not filecmp.cmp(produced, current, shallow=False):
                out.append(str(rel))
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if checked-in code is stale")
    args = parser.parse_args()
    if args.check:
        bad = stale()
        for name in bad:
            print(f"stale generated file: {name}", file=sys.stderr)
        return 1 if bad else 0
    generate(ROOT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
