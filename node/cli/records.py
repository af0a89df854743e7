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

from sync.errors import LocalProtocolError, RemoteProtocolError
from sync.recordstream import (
    DEFAULT_LIMITS,
    SIGNATURE_FIELDS,
    SIGNATURE_SUFFIX,
    FileReport,
    PublicKey,
    VerifyReport,
    decode_record_file,
    decode_sidecar_file,
    decode_signature_file,
    decode_syncnode_record,
    file_hash,
    format_instant,
    item_hash,
    load_public_keys_pem,
    metadata_hash,
    record_consensus_ns,
    sidecar_file_name,
    sidecar_type_of,
    split_stream_name,
    verify_tree,
)
from sync.recordstream import record_stream_pb2 as pb

__all__ = ["main", "run_show", "run_verify"]

_MAX_KEY_FILE = 64 << 10
_MAX_FILES = 100_000


class _Failure(Exception):
    """A one-line error for the user; ``code`` is the exit status."""

    def __init__(self, message: str, code: int) -> None:
        self.code = code
        super().__init__(message)


def _read(path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes, so that the decoder reports an oversized file by itself."""
    try:
        with path.open("rb") as handle:
            return handle.read(limit + 1)
    except OSError as exc:
        raise _Failure(f"{path}: cannot read ({exc.strerror or exc})", 2) from None


def _collect(root: Path) -> dict[str, bytes]:
    """Every record, sidecar and signature file under ``root``, keyed by a path that starts
    with ``root``'s own name, so that a ``record<node>`` directory names its node."""
    if not root.is_dir():
        raise _Failure(f"{root}: not a directory", 2)
    files: dict[str, bytes] = {}
    try:
        paths = sorted(root.rglob("*"))
    except OSError as exc:
        raise _Failure(f"{root}: cannot list ({exc.strerror or exc})", 2) from None
    for path in paths:
        name = path.name
        # Hedera's bucket names (.rcd.gz) and HIP-435's example names (<instant>.gz) alike.
        if not path.is_file() or (
            split_stream_name(name) is None and not name.endswith(SIGNATURE_SUFFIX)
        ):
            continue
        if len(files) >= _MAX_FILES:
            raise _Failure(f"{root}: more than {_MAX_FILES} files", 2)
        limit = (
            DEFAULT_LIMITS.max_signature_file
            if name.endswith(SIGNATURE_SUFFIX)
            else DEFAULT_LIMITS.max_compressed
        )
        files[path.relative_to(root.parent).as_posix()] = _read(path, limit)
    return files


def _load_keys(directory: Path) -> dict[str, list[PublicKey]]:
    """``KEYDIR/<node>.pem`` -> that node's public keys (RSA and/or Ed25519)."""
    if not directory.is_dir():
        raise _Failure(f"{directory}: not a directory", 2)
    keys: dict[str, list[PublicKey]] = {}
    for path in sorted(directory.glob("*.pem")):
        try:
            keys[path.stem] = load_public_keys_pem(_read(path, _MAX_KEY_FILE), path.name)
        except RemoteProtocolError as exc:
            raise _Failure(f"{path}: {exc.reason}", 2) from None
    if not keys:
        raise _Failure(f"{directory}: no .pem keys", 2)
    return keys


def _report_json(report: VerifyReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
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


def _report_line(report: FileReport) -> str:
    hashes = " ".join(f"{label}={value}" for label, value in report.hashes)
    checks = " ".join(f"{c.name}={c.status}" for c in report.checks)
    line = f"{'OK  ' if report.ok else 'FAIL'} {report.kind:<9} {report.path}"
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
    if args.json:
        print(json.dumps(_report_json(report), indent=2, sort_keys=True))
    else:
        for file_report in report.files:
            print(_report_line(file_report))
        if not report.files:
            print(f"FAIL no record stream files under {root}")
        else:
            verdict = "all checks passed" if report.ok else f"{failed} failed"
            skipped = sum(c.status == "skip" for f in report.files for c in f.checks)
            findings = sum(len(f.findings) for f in report.files)
            print(f"{len(report.files)} files, {verdict}, {skipped} checks skipped, "
                  f"{findings} findings")
    return 0 if report.ok else 1


def _instant(ns: int) -> str:
    try:
        return format_instant(ns).replace("_", ":")
    except LocalProtocolError:
        return f"{ns} ns (not a representable instant)"


def _show_record(path: Path, data: bytes) -> dict[str, Any]:
    parsed = decode_record_file(data, str(path))
    msg = parsed.message
    hapi = msg.hapi_proto_version
    start, end = msg.start_object_running_hash.hash, msg.end_object_running_hash.hash
    items = []
    for index, item in enumerate(msg.record_stream_items):
        entry: dict[str, Any] = {
            "index": index,
            "record_bytes": len(item.record),
            "transaction_bytes": len(item.transaction),
            "item_hash": item_hash(item.record, item.transaction).hex(),
        }
        try:
            ns = record_consensus_ns(item.record, str(path))
            ours = decode_syncnode_record(item.record, str(path))
        except RemoteProtocolError as exc:
            entry["record_error"] = exc.reason
        else:
            entry["consensus_ns"] = ns
            entry["consensus"] = _instant(ns)
            if ours is not None:
                entry["event"] = {
                    "message_id": ours.event.message_id,
                    "channel": ours.event.channel,
                    "sender": ours.event.sender,
                    "lamport": ours.event.lamport,
                }
        items.append(entry)
    sidecars = [_show_sidecar_meta(path, meta) for meta in msg.sidecars]
    return {
        "kind": "record",
        "path": str(path),
        "version": 6,
        "hapi_proto_version": f"{hapi.major}.{hapi.minor}.{hapi.patch}",
        "block_number": msg.block_number,
        "file_hash": file_hash(parsed.uncompressed).hex(),
        "metadata_hash": metadata_hash(hapi, start, end, msg.block_number).hex(),
        "start_running_hash": start.hex(),
        "end_running_hash": end.hex(),
        "items": items,
        "sidecars": sidecars,
    }


def _show_sidecar_meta(record_path: Path, meta: pb.SidecarMetadata) -> dict[str, Any]:
    side_path = record_path.parent / "sidecar" / sidecar_file_name(record_path.name, meta.id)
    entry: dict[str, Any] = {
        "id": meta.id,
        "types": [_enum_name(pb.SidecarType, t) for t in meta.types],
        "hash": meta.hash.hash.hex(),
        "file": str(side_path),
    }
    if side_path.is_file():
        try:
            data = _read(side_path, DEFAULT_LIMITS.max_compressed)
            entry["records"] = _show_sidecar(side_path, data)["records"]
        except RemoteProtocolError as exc:
            entry["error"] = exc.reason
    else:
        entry["error"] = "sidecar file not found"
    return entry


def _show_sidecar(path: Path, data: bytes) -> dict[str, Any]:
    side = decode_sidecar_file(data, str(path))
    records = []
    for record in side.message.sidecar_records:
        ts = record.consensus_timestamp
        kind = sidecar_type_of(record)
        entry: dict[str, Any] = {
            "consensus": _instant(ts.seconds * 1_000_000_000 + ts.nanos),
            "type": _enum_name(pb.SidecarType, kind) if kind is not None else "unknown",
            "bytes": record.ByteSize(),
        }
        if record.HasField("syncnode_delivery"):
            d = record.syncnode_delivery
            entry["delivery"] = {
                "message_id": d.message_id,
                "seq": d.seq,
                "received_at_ms": d.received_at_ms,
            }
        records.append(entry)
    return {"kind": "sidecar", "path": str(path), "records": records}


def _show_signature(path: Path, data: bytes) -> dict[str, Any]:
    sig = decode_signature_file(data, str(path))
    out: dict[str, Any] = {"kind": "signature", "path": str(path), "version": 6}
    for field, _signed in SIGNATURE_FIELDS:
        if sig.HasField(field):
            obj: pb.SignatureObject = getattr(sig, field)
            out[field] = {
                "type": _enum_name(pb.SignatureType, obj.type),
                "length": obj.length,
                "checksum": obj.checksum,
                "signed_hash": obj.hash_object.hash.hex(),
                "signature": obj.signature.hex(),
            }
    return out


def _enum_name(enum: Any, value: int) -> str:
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)


def _print_show(info: dict[str, Any], indent: str = "") -> None:
    for key, value in info.items():
        if isinstance(value, list) and all(isinstance(entry, dict) for entry in value):
            print(f"{indent}{key}: {len(value)}")
            for number, entry in enumerate(value):
                print(f"{indent}  [{number}]")
                _print_show(entry, indent + "    ")
        elif isinstance(value, list):
            print(f"{indent}{key}: {', '.join(map(str, value))}")
        elif isinstance(value, dict):
            print(f"{indent}{key}:")
            _print_show(value, indent + "  ")
        else:
            print(f"{indent}{key}: {value}")


def _cmd_show(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise _Failure(f"{path}: not a file", 2)
    name = path.name
    try:
        if name.endswith(SIGNATURE_SUFFIX):
            info = _show_signature(path, _read(path, DEFAULT_LIMITS.max_signature_file))
        elif path.parent.name == "sidecar":
            info = _show_sidecar(path, _read(path, DEFAULT_LIMITS.max_compressed))
        else:
            info = _show_record(path, _read(path, DEFAULT_LIMITS.max_compressed))
    except RemoteProtocolError as exc:
        raise _Failure(f"{exc.peer or path}: {exc.reason}", 1) from None
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        _print_show(info)
    return 0


def _guarded(command: Any) -> Any:
    """Turn a ``_Failure`` into an ``error:`` line and its exit status: never a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            code: int = command(args)
        except _Failure as exc:
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
