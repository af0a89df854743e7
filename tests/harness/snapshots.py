"""Signed snapshots made on the spot, for the tests and benchmarks of snapshot loading."""

from __future__ import annotations

import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from spark_jobs.plain_snapshot import run_plain
from storage import append_events, make_engine, upgrade, write_transaction
from sync.identity import peer_id_of
from sync.sds import encode_event
from sync.stored_event import record_of_event

__all__ = ["signed_snapshot"]


def signed_snapshot(tmp: Path, name: str, signer: Ed25519PrivateKey, lamports: list[int]) -> Path:
    """A snapshot signed by ``signer`` of events on ``general`` by a fresh member key."""
    url = f"sqlite:///{tmp / (name + '.db')}"
    engine = make_engine(url)
    upgrade(engine)
    member = Ed25519PrivateKey.generate()
    sender = peer_id_of(member)
    records = [record_of_event(1, encode_event("general", sender, lamport, (),
                                               f"{name} {i}".encode(), member))
               for i, lamport in enumerate(lamports)]
    with write_transaction(engine) as conn:
        append_events(conn, records, int(time.time() * 1000))
    engine.dispose()
    out = tmp / name
    run_plain(url, out, signer, 1, include_open=True, settle_ms=0)
    return out
