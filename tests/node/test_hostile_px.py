"""Hostile peer exchange against real nodes in the test process (issue 38, findings 2 and 3): a
stranger's records cannot aim the victim's dials at its own host, and one source's share of the
address book holds after the victim dialled its entries."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.harness.cluster import metric, start_inproc
from tests.harness.hostile_px import book_share_of_one_source, px_internal_dials

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# The victim asks a random connected peer each round, the attacker being one of ~9 once it
# dialled the records: at 0.5 s apart, its four rounds of asking the attacker took ~20 s.
FAST_PX = {"SYNCNODE_MEMBERSHIP_PX_INTERVAL_S": "0.1"}


def test_records_from_a_remote_peer_cannot_make_the_node_dial_its_own_host(
        tmp_path: Path) -> None:
    victim = start_inproc(tmp_path, "victim", env=FAST_PX)
    try:
        hits, _ = trio.run(px_internal_dials, victim, 8)
        # Before: 8 of 8 canaries (and the node's own API port) got connections.
        assert hits == 0, f"the node opened {hits} connections to loopback canaries"
        # The 8 canaries and the API port, each counted (on every exchange).
        assert metric(victim, 'peer_addrs_refused_total{reason="loopback",via="px"}') >= 9
    finally:
        victim.kill()


@pytest.mark.parametrize("per_source", [4, None], ids=["fast", "default"])
def test_one_source_share_of_the_book_holds_after_its_entries_are_dialled(
        tmp_path: Path, per_source: int | None) -> None:
    """Default bound (32) too: the attacker then brings 40 identities."""
    env = dict(FAST_PX)
    if per_source is not None:
        env["SYNCNODE_MEMBERSHIP_ADDRESS_BOOK_PER_SOURCE"] = str(per_source)
    bound = per_source or 32
    victim = start_inproc(tmp_path, "victim", env=env)
    try:
        kept = trio.run(book_share_of_one_source, victim, bound + 8, bound)
        # Before: entries the victim reached moved off the source's account (38 kept of 39,
        # bound 32).
        assert kept <= bound, f"{kept} records of one source kept (bound {bound})"
    finally:
        victim.kill()
