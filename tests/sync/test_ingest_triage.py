"""What becomes of each verified fetched event (sync.ingest.triage), on a fixed clock: refused
(unknown channel, closed group, channel writers, clock rule), SDS's bulk path, or the full
protocol step."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sync.gossip import REASON_NOT_MEMBER, REASON_NOT_WRITER, SenderPolicy
from sync.ingest import VerifiedBatch, triage
from sync.sds.clock import LAMPORT_MAX, REASON_AHEAD, REASON_RANGE

NOW = 1_700_000_000.0  # wall seconds
NOW_MS = int(NOW * 1000)
AHEAD_MS = 600_000


def batch(*rows: tuple[str, str, int, bool]) -> VerifiedBatch:
    """Rows of (channel, sender, lamport, has_content)."""
    out = VerifiedBatch()
    for n, (channel, sender, lamport, content) in enumerate(rows):
        out.message_ids.append(f"m{n}")
        out.channels.append(channel)
        out.senders.append(sender)
        out.lamports.append(lamport)
        out.keys.append(bytes([n]))
        out.lanes.append((0,) * 8)
        out.histories.append(())
        out.has_content.append(content)
    return out


def test_content_from_others_goes_to_the_bulk_path_by_channel_in_order() -> None:
    b = batch(("a", "bob", NOW_MS, True), ("b", "bob", NOW_MS - 5, True),
              ("a", "carol", 7, True))
    out = triage(b, [2, 1, 0], {"a", "b"}, SenderPolicy("me"), NOW, AHEAD_MS)
    assert out.settled == {"a": [2, 0], "b": [1]}
    assert out.full == [] and out.refused == []


def test_own_echoes_and_sync_messages_take_the_full_step() -> None:
    b = batch(("a", "me", 10, True), ("a", "bob", 11, False), ("a", "bob", 12, True))
    out = triage(b, [0, 1, 2], {"a"}, SenderPolicy("me"), NOW, AHEAD_MS)
    assert out.full == [0, 1] and out.settled == {"a": [2]} and out.refused == []


def test_refusals_say_why() -> None:
    b = batch(("x", "bob", 1, True),                         # not replicated here
              ("a", "mallory", 1, True),                     # outside the closed group
              ("w", "carol", 1, True),                       # not a writer of w
              ("w", "carol", 1, False),                      # a sync message: not content
              ("a", "bob", NOW_MS + AHEAD_MS + 1, True),     # too far ahead of our clock
              ("a", "bob", NOW_MS + AHEAD_MS, True),         # just within it
              ("a", "bob", LAMPORT_MAX + 1, True))           # out of range
    policy = SenderPolicy("me", frozenset({"me", "bob", "carol"}), {"w": frozenset({"bob"})})
    out = triage(b, range(7), {"a", "w"}, policy, NOW, AHEAD_MS)
    reasons = {i: exc.reason for i, exc in out.refused}
    assert sorted(reasons) == [0, 1, 2, 4, 6]
    assert "do not replicate" in reasons[0]
    assert reasons[1] == REASON_NOT_MEMBER
    assert reasons[2].startswith(REASON_NOT_WRITER)
    assert reasons[4].startswith(REASON_AHEAD) and reasons[6].startswith(REASON_RANGE)
    assert out.full == [3] and out.settled == {"a": [5]}


def test_the_clock_rule_moves_with_now() -> None:
    b = batch(("a", "bob", NOW_MS + AHEAD_MS + 1000, True))
    assert triage(b, [0], {"a"}, SenderPolicy("me"), NOW, AHEAD_MS).refused
    assert triage(b, [0], {"a"}, SenderPolicy("me"), NOW + 1.0, AHEAD_MS).settled == {"a": [0]}


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "x"]), st.sampled_from(["me", "bob", "eve"]),
                          st.integers(-1, NOW_MS + 2 * AHEAD_MS), st.booleans()), max_size=30),
       st.randoms(use_true_random=False))
def test_every_position_is_sorted_exactly_once(rows: list[tuple[str, str, int, bool]],
                                                rng: object) -> None:
    order = list(range(len(rows)))
    rng.shuffle(order)  # type: ignore[attr-defined]
    out = triage(batch(*rows), order, {"a", "b"}, SenderPolicy("me", frozenset({"me", "bob"})),
                 NOW, AHEAD_MS)
    taken = [i for i, _ in out.refused] + out.full + [i for v in out.settled.values() for i in v]
    assert sorted(taken) == sorted(order)  # each position once, none lost
    rank = {i: r for r, i in enumerate(order)}
    for positions in [out.full, *out.settled.values()]:
        assert positions == sorted(positions, key=rank.__getitem__)
