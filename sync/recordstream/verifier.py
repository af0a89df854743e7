"""Verify a tree of v6 files: record files, their sidecars and every node's signature files.

Pure: the caller reads the files and passes ``{relative path: bytes}`` (POSIX separators) plus the
nodes' public keys; the result is a report naming, per file, each check and whether it passed.
Layout (Hedera's): ``.../record<node>/<instant>.rcd.gz``,
``.../record<node>/sidecar/<instant>_NN.rcd.gz`` and ``.../record<node>/<instant>.rcd_sig``;
HIP-435's example names (``<instant>.gz``, ``sidecar/<instant>_NN.gz``) are read as well.
What the mirror node reads is read here: a block number out of range (negative, as in files
written during the v5 to v6 upgrade) is a finding, not a failure, and absent sidecar files are
"not checked" (HIP-435 lets a mirror node skip them) unless ``require_sidecars``.
A signature file in ``record<node>`` is checked against the keys of ``<node>`` and against the
record file of the same name, in its own directory or, as in Hedera's buckets where only one
node's record files are kept, in a sibling ``record*`` directory.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sync.errors import LocalProtocolError, RemoteProtocolError
from sync.identity import public_key_from_peer_id
from sync.recordstream import record_stream_pb2 as pb
from sync.recordstream.codec import (
    DEFAULT_LIMITS,
    Limits,
    RecordFile,
    decode_record_file,
    decode_sidecar_file,
    decode_signature_file,
    record_consensus_ns,
    sidecar_type_of,
)
from sync.recordstream.hashing import file_hash, metadata_hash, running_hash, sha384
from sync.recordstream.naming import (
    HIP_SUFFIX,
    RECORD_SUFFIX,
    SIGNATURE_SUFFIX,
    format_instant,
    sidecar_file_name,
    split_stream_name,
)
from sync.recordstream.signatures import (
    SIGNATURE_FIELDS,
    PublicKey,
    key_fits,
    signature_object_problem,
    verify_signature_object,
)

__all__ = [
    "Check",
    "FileReport",
    "Finding",
    "Status",
    "VerifyReport",
    "node_of_dir",
    "verify_tree",
]

Status = Literal["ok", "fail", "skip"]
_SIDECAR_DIR = "sidecar"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str = ""


@dataclass(frozen=True)
class Finding:
    """Something worth reporting that is not a failure, e.g. an out-of-range block number;
    ``fields`` are machine-readable values (None: unknown)."""

    name: str
    detail: str
    fields: tuple[tuple[str, int | None], ...] = ()


@dataclass(frozen=True)
class FileReport:
    path: str
    kind: Literal["record", "sidecar", "signature"]
    checks: tuple[Check, ...]
    hashes: tuple[tuple[str, str], ...] = ()
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return all(check.status != "fail" for check in self.checks)

    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.status == "fail"]


@dataclass(frozen=True)
class VerifyReport:
    files: tuple[FileReport, ...]

    @property
    def ok(self) -> bool:
        return bool(self.files) and all(report.ok for report in self.files)


def _split(path: str) -> tuple[str, str]:
    head, _, tail = path.rpartition("/")
    return head, tail


def node_of_dir(directory: str) -> str:
    """``a/b/record0.0.3`` -> ``0.0.3``: the node whose files a directory holds."""
    base = directory.rpartition("/")[2]
    return base[len("record") :] if base.startswith("record") else base


@dataclass
class _Record:
    path: str
    parsed: RecordFile | None
    checks: list[Check] = field(default_factory=list)
    hashes: list[tuple[str, str]] = field(default_factory=list)
    consensus: set[int] = field(default_factory=set)
    file_hash: bytes = b""
    metadata_hash: bytes = b""
    findings: list[Finding] = field(default_factory=list)


class _Verifier:
    def __init__(
        self,
        files: Mapping[str, bytes],
        keys: Mapping[str, Sequence[PublicKey]] | None,
        limits: Limits,
        require_sidecars: bool = False,
    ) -> None:
        self.files = files
        self.keys = keys
        self.limits = limits
        self.require_sidecars = require_sidecars
        self.records: dict[str, _Record] = {}
        self.sidecar_reports: dict[str, FileReport] = {}

    def run(self) -> VerifyReport:
        record_paths = sorted(p for p in self.files if self._is_record(p))
        for path in record_paths:
            self.records[path] = self._check_record(path)
        self._check_chains(record_paths)
        reports: list[FileReport] = []
        for path in record_paths:
            rec = self.records[path]
            reports.append(
                FileReport(
                    path, "record", tuple(rec.checks), tuple(rec.hashes), tuple(rec.findings)
                )
            )
        for path in sorted(p for p in self.files if self._is_sidecar(p)):
            reports.append(self.sidecar_reports.get(path) or self._orphan_sidecar(path))
        for path in sorted(p for p in self.files if p.endswith(SIGNATURE_SUFFIX)):
            reports.append(self._check_signature(path))
        return VerifyReport(tuple(reports))

    @staticmethod
    def _is_sidecar(path: str) -> bool:
        directory, name = _split(path)
        return split_stream_name(name) is not None and directory.rpartition("/")[2] == _SIDECAR_DIR

    @classmethod
    def _is_record(cls, path: str) -> bool:
        return split_stream_name(_split(path)[1]) is not None and not cls._is_sidecar(path)

    def _check_record(self, path: str) -> _Record:
        try:
            parsed = decode_record_file(self.files[path], path, self.limits)
        except RemoteProtocolError as exc:
            return _Record(path, None, [Check("decode", "fail", exc.reason)])
        msg = parsed.message
        rec = _Record(path, parsed)
        hapi = msg.hapi_proto_version
        rec.checks.append(
            Check(
                "decode",
                "ok",
                f"v6 hapi {hapi.major}.{hapi.minor}.{hapi.patch} block {msg.block_number} "
                f"items {len(msg.record_stream_items)} sidecars {len(msg.sidecars)}",
            )
        )
        start = msg.start_object_running_hash.hash
        end = msg.end_object_running_hash.hash
        rec.file_hash = file_hash(parsed.uncompressed)
        rec.metadata_hash = metadata_hash(hapi, start, end, msg.block_number)
        rec.hashes = [
            ("file", rec.file_hash.hex()),
            ("metadata", rec.metadata_hash.hex()),
            ("start", start.hex()),
            ("end", end.hex()),
        ]
        rec.checks.append(self._check_items(rec))
        items = ((item.record, item.transaction) for item in msg.record_stream_items)
        computed = running_hash(start, items)
        rec.checks.append(
            Check("running_hash", "ok", "end hash recomputed from items")
            if computed == end
            else Check(
                "running_hash",
                "fail",
                f"items fold to {computed.hex()[:16]}..., file says {end.hex()[:16]}...",
            )
        )
        for sidecar in msg.sidecars:
            rec.checks.append(self._check_sidecar(rec, sidecar))
        return rec

    def _check_items(self, rec: _Record) -> Check:
        assert rec.parsed is not None
        times: list[int] = []
        try:
            for item in rec.parsed.message.record_stream_items:
                times.append(record_consensus_ns(item.record, rec.path))
        except RemoteProtocolError as exc:
            return Check("items", "fail", f"item {len(times)}: {exc.reason}")
        rec.consensus = set(times)
        if any(b <= a for a, b in itertools.pairwise(times)):
            return Check("items", "fail", "consensus timestamps not strictly increasing")
        try:
            expected = format_instant(times[0])
        except LocalProtocolError:
            return Check("items", "fail", f"first consensus time {times[0]} is not a valid instant")
        stem, suffix = split_stream_name(_split(rec.path)[1]) or ("", RECORD_SUFFIX)
        if stem != expected:
            return Check(
                "items", "fail", f"file name should be {expected}{suffix} (first item's time)"
            )
        return Check("items", "ok", "timestamps increase, name matches first item")

    def _check_sidecar(self, rec: _Record, meta: pb.SidecarMetadata) -> Check:
        directory, name = _split(rec.path)
        prefix = f"{directory}/{_SIDECAR_DIR}/" if directory else f"{_SIDECAR_DIR}/"
        own = sidecar_file_name(name, meta.id)
        stem = (split_stream_name(own) or (own, ""))[0]
        candidates = [own, *(stem + s for s in (RECORD_SUFFIX, HIP_SUFFIX) if stem + s != own)]
        side_path = prefix + own
        label = f"sidecar_{meta.id:02d}"
        data = None
        for candidate in candidates:
            data = self.files.get(prefix + candidate)
            if data is not None:
                side_path = prefix + candidate
                break
        if data is None:
            if self.require_sidecars:
                return Check(label, "fail", f"missing sidecar file {side_path}")
            return Check(
                label, "skip", f"not checked: {side_path} absent (--require-sidecars to fail)"
            )
        checks: list[Check] = []
        hashes: list[tuple[str, str]] = []
        try:
            side = decode_sidecar_file(data, side_path, self.limits)
        except RemoteProtocolError as exc:
            checks.append(Check("decode", "fail", exc.reason))
            result = Check(label, "fail", f"{side_path}: {exc.reason}")
        else:
            actual = sha384(side.uncompressed)
            hashes.append(("hash", actual.hex()))
            records = side.message.sidecar_records
            checks.append(Check("decode", "ok", f"{len(records)} sidecar records"))
            if actual == meta.hash.hash:
                checks.append(Check("hash", "ok", f"matches {name}"))
                result = Check(label, "ok", "present, hash matches")
            else:
                checks.append(Check("hash", "fail", f"differs from the hash in {name}"))
                result = Check(label, "fail", f"{side_path}: hash mismatch")
            checks.append(_check_sidecar_records(records, set(meta.types), rec.consensus))
        self.sidecar_reports[side_path] = FileReport(
            side_path, "sidecar", tuple(checks), tuple(hashes)
        )
        return result

    def _orphan_sidecar(self, path: str) -> FileReport:
        directory, name = _split(path)
        stem = (split_stream_name(name) or (name, ""))[0][: -len("_NN")]
        record_path = f"{directory.rpartition('/')[0]}/{stem}".lstrip("/")
        owner = self.records.get(record_path + RECORD_SUFFIX) or self.records.get(
            record_path + HIP_SUFFIX
        )
        if owner is not None and owner.parsed is None:
            why = f"its record file {owner.path} is unreadable"
        else:
            why = "no record file lists this sidecar"
        return FileReport(path, "sidecar", (Check("referenced", "fail", why),))

    def _check_chains(self, record_paths: list[str]) -> None:
        previous: dict[str, _Record] = {}
        # The block number each file has, or is derived from the chain (None: unknown).
        derived: dict[str, int | None] = {}
        for path in record_paths:
            directory = _split(path)[0]
            rec = self.records[path]
            prev = previous.get(directory)
            previous[directory] = rec
            if rec.parsed is None:
                derived[path] = None
                continue
            number = rec.parsed.message.block_number
            if prev is None:
                rec.checks.append(Check("chain", "skip", "first file in its directory"))
            elif prev.parsed is None:
                rec.checks.append(Check("chain", "skip", "previous file unreadable"))
            else:
                rec.checks.append(_chain_check(prev, rec))
            linked = rec.checks[-1].status == "ok"
            before = derived.get(prev.path) if prev is not None and linked else None
            derived[path] = number if number >= 0 else (None if before is None else before + 1)
            if number < 0:
                rec.findings.append(_block_number_finding(number, derived[path]))

    def _find_record(self, sig_path: str) -> _Record | None:
        directory, name = _split(sig_path)
        stem = name[: -len(SIGNATURE_SUFFIX)]
        parent = directory.rpartition("/")[0]
        for record_name in (stem + RECORD_SUFFIX, stem + HIP_SUFFIX):
            own = f"{directory}/{record_name}" if directory else record_name
            if own in self.records:
                return self.records[own]
            for path in sorted(self.records):
                other_dir, other_name = _split(path)
                if other_name == record_name and other_dir.rpartition("/")[0] == parent:
                    return self.records[path]
        return None

    def _node_keys(self, node: str) -> list[PublicKey]:
        found: list[PublicKey] = []
        if self.keys is not None:
            found.extend(self.keys.get(node, ()))
        with contextlib.suppress(RemoteProtocolError, ValueError):
            found.append(public_key_from_peer_id(node))
        return found

    def _check_signature(self, path: str) -> FileReport:
        try:
            sig = decode_signature_file(self.files[path], path, self.limits)
        except RemoteProtocolError as exc:
            return FileReport(path, "signature", (Check("decode", "fail", exc.reason),))
        checks = [Check("decode", "ok", "v6 signature file")]
        rec = self._find_record(path)
        if rec is None or rec.parsed is None:
            why = "record file missing" if rec is None else f"record file {rec.path} unreadable"
            checks.append(Check("record_file", "fail", why))
            return FileReport(path, "signature", tuple(checks))
        checks.append(Check("record_file", "ok", rec.path))
        node = node_of_dir(_split(path)[0])
        keys = self._node_keys(node)
        expected = {"file": rec.file_hash, "metadata": rec.metadata_hash}
        for field_name, target in SIGNATURE_FIELDS:
            if not sig.HasField(field_name):
                continue
            obj: pb.SignatureObject = getattr(sig, field_name)
            if self.keys is None and not any(key_fits(key, obj.type) for key in keys):
                # Without a key only the form can be checked; a skip is not a pass.
                problem = signature_object_problem(obj, expected[target])
                checks.append(
                    Check(field_name, "skip", f"no key given for node {node}; form ok")
                    if problem is None
                    else Check(field_name, "fail", f"{problem} (node {node}, {target} hash)")
                )
                continue
            problem = verify_signature_object(obj, expected[target], keys)
            kind = pb.SignatureType.Name(obj.type) if obj.type in (1, 1000) else str(obj.type)
            checks.append(
                Check(field_name, "ok", f"{kind} by node {node} over the {target} hash")
                if problem is None
                else Check(field_name, "fail", f"{problem} (node {node}, {target} hash)")
            )
        signed = sig.file_signature.hash_object.hash.hex()
        return FileReport(path, "signature", tuple(checks), (("signed_file_hash", signed),))


def _check_sidecar_records(
    records: Sequence[pb.TransactionSidecarRecord], declared: set[int], consensus: set[int]
) -> Check:
    for index, record in enumerate(records):
        type_of = sidecar_type_of(record)
        if type_of is not None and type_of not in declared:
            undeclared = pb.SidecarType.Name(type_of)
            return Check("records", "fail", f"record {index} has undeclared type {undeclared}")
        ts = record.consensus_timestamp
        if ts.seconds * 1_000_000_000 + ts.nanos not in consensus:
            return Check("records", "fail", f"record {index} matches no item's consensus time")
    return Check("records", "ok", "types declared, timestamps match items")


def _block_number_finding(number: int, derived: int | None) -> Finding:
    where = (
        f"derived from the chain: {derived}"
        if derived is not None
        else "not derivable (no earlier file of this directory has one in range)"
    )
    return Finding(
        "block_number",
        f"block_number {number} is out of range (negative, as in files written during the "
        f"v5 to v6 upgrade); {where}",
        (("block_number", number), ("derived_block_number", derived)),
    )


def _chain_check(prev: _Record, rec: _Record) -> Check:
    assert prev.parsed is not None and rec.parsed is not None
    before, now = prev.parsed.message, rec.parsed.message
    if now.start_object_running_hash.hash != before.end_object_running_hash.hash:
        return Check("chain", "fail", f"start hash is not the end hash of {prev.path}")
    if now.block_number < 0 or before.block_number < 0:
        # The mirror node derives such numbers from the chain; the finding says so.
        return Check(
            "chain", "ok", f"continues {_split(prev.path)[1]} (block number out of range)"
        )
    if now.block_number != before.block_number + 1:
        return Check(
            "chain", "fail", f"block {now.block_number} does not follow {before.block_number}"
        )
    return Check("chain", "ok", f"continues {_split(prev.path)[1]}")


def verify_tree(
    files: Mapping[str, bytes],
    keys: Mapping[str, Sequence[PublicKey]] | None = None,
    limits: Limits = DEFAULT_LIMITS,
    *,
    require_sidecars: bool = False,
) -> VerifyReport:
    """Check every record, sidecar and signature file in ``files``.

    ``keys`` maps a node name (the directory name without ``record``) to its public keys; with
    ``keys=None`` signatures are reported as skipped unless the node name is a libp2p peer id,
    from which the Ed25519 key is taken. A record file's sidecar files that are absent are
    reported as not checked, or as a failure with ``require_sidecars``.
    """
    return _Verifier(files, keys, limits, require_sidecars).run()
