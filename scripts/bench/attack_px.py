"""Issue 38's peer-exchange attacks for the attack benchmark (attack_bench.py), each against a
fresh victim node (peer exchange every 0.5 s) and real hostile libp2p hosts:

12. Internal dials: a peer at this machine's LAN address hands the victim signed records of 8
    loopback canary listeners and of the victim's own API port (``px_internal_dials``: the
    connections the canaries got; target 0).
13. One source's share of the address book: a peer hands the victim the records of bound + 8
    identities that really listen, the victim dials and reaches them
    (``addrbook_per_source_max``: the records of that one source the book holds; target <=
    ``membership.address_book_per_source``, the default 32; 4 at smoke size).

The full and quick sizes run them in turn, each on a node process. The smoke size runs both
side by side on nodes in this process (tests.harness.inproc), started at once, and has the
victim ask the source once more after its dials instead of four times: its 12 records fit in
one answer (16), so each ask hands it all of them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import trio

from tests.harness.cluster import FAST_ENV, start_node
from tests.harness.hostile_px import book_share_of_one_source, px_internal_dials
from tests.harness.inproc import InProcessNode, start_all
from tests.harness.procs import NodeApi

__all__ = ["px_attacks"]

_FAST_PX = {"SYNCNODE_MEMBERSHIP_PX_INTERVAL_S": "0.5"}


def px_attacks(base: Path, size: str) -> tuple[dict[str, object], list[tuple[str, str, str]]]:
    """The results (``px_internal_dials``, ``addrbook_per_source_max`` and the bound) and
    the table rows."""
    bound, rounds = (4, 1) if size == "smoke" else (32, 4)
    env = {**_FAST_PX, "SYNCNODE_MEMBERSHIP_ADDRESS_BOOK_PER_SOURCE": str(bound)}

    def dials(victim: NodeApi) -> tuple[int, float]:
        return trio.run(px_internal_dials, victim, 8)

    def share(victim: NodeApi) -> int:
        return trio.run(book_share_of_one_source, victim, bound + 8, bound, rounds)

    if size == "smoke":
        # start_node's configuration, in this process.
        victims = [InProcessNode(base / "px-victim", env={**FAST_ENV, **_FAST_PX}),
                   InProcessNode(base / "book-victim", env={**FAST_ENV, **env})]
        try:
            start_all(victims)
            with ThreadPoolExecutor(2) as pool:
                first, second = pool.submit(dials, victims[0]), pool.submit(share, victims[1])
                (hits, refused), kept = first.result(), second.result()
        finally:
            for node in victims:
                node.kill()
    else:
        victim = start_node(base, "px-victim", env=_FAST_PX)
        try:
            hits, refused = dials(victim)
        finally:
            victim.kill()
        victim = start_node(base, "book-victim", env=env)
        try:
            kept = share(victim)
        finally:
            victim.kill()
    rows = [("12 px: dial my own host", "8 loopback canaries + own API port",
             f"connections {hits}, addresses refused {refused:.0f}"),
            ("13 px: one source's share", f"{bound + 8} live identities, bound {bound}",
             f"kept {kept}")]
    return {"px_internal_dials": hits, "addrbook_per_source_max": kept,
            "addrbook_per_source_bound": bound}, rows
