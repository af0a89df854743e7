"""``syncnode records``: verify and inspect record stream v6 files (HIP-435) on disk.

This module does the file I/O and printing; the checks themselves are ``sync.recordstream``'s.
``node.cli.records_args`` declares its arguments (without importing this module); ``python -m
node.cli.records`` runs it on its own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from node.cli.records_show import (
    Failure,
    abbreviate_hex,
    describe_record,
    describe_sidecar,
    describe_signature,
    print_description,
    read_limited,
    short_hashes,
)
from sync.errors import RemoteProtocolError
from sync.recordstream import (
    DEFAULT_LIMITS,
    SIGNATURE_FIELDS,
    SIGNATURE_SUFFIX,
    FileReport,
    PublicKey,
    VerifyReport,
    load_public_keys_pem,
    node_of_dir,
    split_stream_name,
    verify_tree,
)

__all__ = ["main", "run_show", "run_verify"]

_MAX_KEY_FILE = 64 << 10
_MAX_FILES = 100_000
_SIGNATURE_CHECKS = frozenset(name for name, _target in SIGNATURE_FIELDS)


def _collect(root: Path) -> dict[str, bytes]:
    """Every record, sidecar and signature file under ``root``, keyed by a path that starts
    with ``root``'s own name, so that a ``record<node>`` directory names its node."""
    if not root.is_dir():
        raise Failure(f"{root}: not a directory", 2)
    files: dict[str, bytes] = {}
    try:
        paths = sorted(root.rglob("*"))
    except OSError as exc:
        raise Failure(f"{root}: cannot list ({exc.strerror or exc})", 2) from None
    for path in paths:
        name = path.name
        # Hedera's bucket names (.rcd.gz) and HIP-435's example names (<instant>.gz) alike.
        if not path.is_file() or (
            split_stream_name(name) is None and not name.endswith(SIGNATURE_SUFFIX)
        ):
            continue
        if len(files) >= _MAX_FILES:
            raise Failure(f"{root}: more than {_MAX_FILES} files", 2)
        limit = (
            DEFAULT_LIMITS.max_signature_file
            if name.endswith(SIGNATURE_SUFFIX)
            else DEFAULT_LIMITS.max_compressed
        )
        files[path.relative_to(root.parent).as_posix()] = read_limited(path, limit)
    return files


def _load_keys(directory: Path) -> dict[str, list[PublicKey]]:
    """``KEYDIR/<node>.pem`` -> that node's public keys (RSA and/or Ed25519)."""
    if not directory.is_dir():
        raise Failure(f"{directory}: not a directory", 2)
    keys: dict[str, list[PublicKey]] = {}
    for path in sorted(directory.glob("*.pem")):
        try:
            keys[path.stem] = load_public_keys_pem(read_limited(path, _MAX_KEY_FILE), path.name)
        except RemoteProtocolError as exc:
            raise Failure(f"{path}: {exc.reason}", 2) from None
    if not keys:
        raise Failure(f"{directory}: no .pem keys", 2)
    return keys


def _report_json(report: VerifyReport) -> dict[str, Any]:
    unchecked = sum(map(_unchecked_signatures, report.files))
    return {
        "ok": report.ok,
        "verified": report.ok and not unchecked and bool(report.files),
        "signatures_unchecked": unchecked,
        "files": [
            {
                "path": f.path,
                "kind": f.kind,
                "ok": f.ok,
                "hashes": dict(f.hashes),
                "checks": [
                    {"name": c.name, "status": c.status, "detail": c.detail} for c in f.checks
                ],
                "findings": [
                    {"name": x.name, "detail": x.detail, **dict(x.fields)} for x in f.findings
                ],
            }
            for f in report.files
        ],
    }


def _unchecked_signatures(report: FileReport) -> int:
    """Signatures of ``report`` left unchecked for want of a key: a skip is not a pass."""
    return sum(c.status == "skip" and c.name in _SIGNATURE_CHECKS for c in report.checks)


def _nodes_without_keys(report: VerifyReport) -> list[str]:
    return sorted({node_of_dir(f.path.rpartition("/")[0]) for f in report.files
                   if _unchecked_signatures(f)})


def _report_line(report: FileReport) -> str:
    hashes = " ".join(f"{label}={value}" for label, value in report.hashes)
    checks = " ".join(f"{c.name}={c.status}" for c in report.checks)
    verdict = "FAIL" if not report.ok else "SKIP" if _unchecked_signatures(report) else "OK  "
    line = f"{verdict} {report.kind:<9} {report.path}"
    line += f" {hashes}" if hashes else ""
    line += f" [{checks}]"
    failures = "; ".join(f"{c.name}: {c.detail}" for c in report.failures())
    line = f"{line} -- {failures}" if failures else line
    for finding in report.findings:
        line += f"\n     finding {finding.name}: {finding.detail}"
    return line


def _cmd_verify(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    keys = _load_keys(Path(args.keys)) if args.keys else None
    report = verify_tree(_collect(root), keys, require_sidecars=args.require_sidecars)
    failed = sum(not f.ok for f in report.files)
    unchecked = sum(map(_unchecked_signatures, report.files))
    if args.json:
        print(json.dumps(_report_json(report), indent=2, sort_keys=True))
    else:
        short = short_hashes(args)
        for file_report in report.files:
            line = _report_line(file_report)
            print(abbreviate_hex(line) if short else line)
        if not report.files:
            print(f"FAIL no record stream files under {root}")
        else:
            skipped = sum(c.status == "skip" for f in report.files for c in f.checks)
            findings = sum(len(f.findings) for f in report.files)
            if not report.ok:
                verdict = f"{failed} failed"
            elif unchecked:
                # Hashes and chain hold, but nothing says who wrote the files: no pass.
                nodes = ", ".join(_nodes_without_keys(report))
                verdict = (f"NOT VERIFIED: {unchecked} signatures unchecked (no public key for "
                           f"node {nodes}: give --keys KEYDIR); no check failed")
            else:
                verdict = "all checks passed"
            print(f"{len(report.files)} files, {verdict}, {skipped} checks skipped, "
                  f"{findings} findings")
    return 0 if report.ok and not unchecked else 1


def _cmd_show(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise Failure(f"{path}: not a file", 2)
    name = path.name
    try:
        if name.endswith(SIGNATURE_SUFFIX):
            info = describe_signature(path, read_limited(path, DEFAULT_LIMITS.max_signature_file))
        elif path.parent.name == "sidecar":
            info = describe_sidecar(path, read_limited(path, DEFAULT_LIMITS.max_compressed))
        else:
            info = describe_record(path, read_limited(path, DEFAULT_LIMITS.max_compressed))
    except RemoteProtocolError as exc:
        raise Failure(f"{exc.peer or path}: {exc.reason}", 1) from None
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        print_description(info, short=short_hashes(args))
    return 0


def _guarded(command: Any) -> Any:
    """Turn a ``Failure`` into an ``error:`` line and its exit status: never a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            code: int = command(args)
        except Failure as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.code
        except BrokenPipeError:
            # The reader (e.g. `| head`) went away: stop quietly, as Unix tools do.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        return code

    return run


run_verify = _guarded(_cmd_verify)
run_show = _guarded(_cmd_show)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m node.cli.records verify|show ...``, the same as ``syncnode records ...``."""
    from node.cli.records_args import add_subcommands

    parser = argparse.ArgumentParser(prog="syncnode records")
    add_subcommands(parser)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
