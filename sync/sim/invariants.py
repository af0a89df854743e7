"""The invariants of a simulation run (docs/sim.md "Invariants"): the per-step checks the
runner calls after every member step (bounds, acknowledgements, repair budgets, honest
clocks), whether the group is quiet, and the convergence check at the end. Each raises the
run's :class:`~sync.sim.runner.SimFailure` (``sim.fail``), whose text carries the replay
command."""

from __future__ import annotations

from collections import deque

from sync.sim.world import Member, World

__all__ = ["check_ack", "check_bounds", "check_converged", "check_repair_budget", "full",
           "quiet"]


def check_ack(sim: World, m: Member, mid: str) -> None:
    """Nothing acknowledged is lost: another *honest* member holds it (delivered or
    waiting: ids enter filters on reception), whatever hostile members claimed."""
    no = sim.msg_no.get(mid)
    if no is not None and sim.honest_holders[no] >= 2:
        return  # the sender and at least one other honest member delivered it
    if not any(o is not m and o.honest and o.channel.layers.incoming.holds(mid)
               for o in sim.members):
        raise sim.fail(f"member {m.index} saw {mid[:12]} acknowledged while no other "
                        "honest member holds it")

def check_repair_budget(sim: World, m: Member, size: int) -> None:
    """A member's repair rebroadcasts stay within ``repair_total_bytes`` per window."""
    cfg = sim.sc.sds
    window = sim.repair_windows.setdefault(m.index, deque())
    window.append((sim.now, size))
    while window[0][0] <= sim.now - cfg.repair_window:
        window.popleft()
    spent = sum(b for _, b in window)
    if spent > cfg.repair_total_bytes:
        raise sim.fail(f"member {m.index} rebroadcast {spent} bytes of repairs within "
                        f"{cfg.repair_window:g} s (budget {cfg.repair_total_bytes})")

def check_bounds(sim: World, m: Member) -> None:
    cfg = sim.sc.sds
    sizes = m.channel.layers.sizes()
    bounds = {"heads": cfg.max_heads, "waiting": cfg.max_waiting,
              "missing": cfg.max_missing, "repair_cache": cfg.repair_cache_size,
              "members": cfg.max_members_tracked}
    for name, bound in bounds.items():
        if sizes[name] > bound:
            raise sim.fail(f"member {m.index}: {name} {sizes[name]} over its bound {bound}")
    sim.stats.heads_peak = max(sim.stats.heads_peak, sizes["heads"])
    if m.honest:
        ceiling = int((sim.now + m.clock) * 1000) + cfg.max_lamport_ahead_ms + 1
        lamport = m.channel.layers.incoming.lamport
        if lamport > ceiling:
            raise sim.fail(f"member {m.index}: Lamport clock {lamport} beyond "
                            f"wall clock + max_lamport_ahead_ms ({ceiling})")

def full(sim: World) -> list[Member]:
    return [m for m in sim.members if m.honest and not m.gone and m.joined_at == 0.0]

def quiet(sim: World, *, answers: bool = True) -> bool:
    """Every honest member is up, holds every message (if there from the start), and has
    nothing waiting, missing or requested; with ``answers``, no repair answer scheduled
    either (nothing more will be sent: the run may end). Without: the group has caught up."""
    total = len(sim.published_at)
    for m in sim.members:
        if m.gone or not m.honest:
            continue
        if not m.online:
            return False
        s = m.channel.layers.sizes()
        if s["waiting"] or s["missing"] or s["repair_requests"] \
                or (answers and s["repair_responses"]):
            return False
        if m.joined_at == 0.0 and m.held != total:
            return False
        # A joiner must hold what was published after it joined (``check_converged``): until
        # it does, the run goes on (the next sync names the heads it lacks; seed 31 of the
        # churn scenario ended at the first quiet moment with a joiner's gap still silent).
        if m.joined_at and late_for(sim, m):
            return False
    return True


def late_for(sim: World, m: Member) -> list[int]:
    """Messages published after joiner ``m`` joined (plus a second) that it lacks."""
    return [i for i, t in enumerate(sim.published_at)
            if t > m.joined_at + 1.0 and (i >= len(m.log) or not m.log[i])]

def check_converged(sim: World) -> None:
    members = full(sim)
    total = len(sim.published_at)
    ids = sorted(sim.msg_no, key=sim.msg_no.__getitem__)
    # A message whose every copy left with members that left for good (its sender among
    # them, before anyone else got it) is gone from the group: no protocol can bring it
    # back, and nobody may even know it existed. Counted, not required.
    kept = {i for m in sim.members if not m.gone
            for i in range(min(total, len(m.log))) if m.log[i]}
    sim.stats.vanished = total - len(kept)
    for m in members:
        missing = [i for i in range(total)
                   if i in kept and (i >= len(m.log) or not m.log[i])]
        silent = [i for i in missing if ids[i] not in m.declared_lost]
        if silent or (missing and not sim.sc.allow_lost):
            first = (silent or missing)[0]
            how = "declared lost" if ids[first] in m.declared_lost else "silent"
            raise sim.fail(f"member {m.index} holds {total - len(missing)} of {total} "
                            f"messages after settling; {len(silent)} gap(s) it never "
                            f"declared lost (first missing: message #{first}, {how})")
    for m in sim.members:
        if m.gone or not m.honest or m.joined_at == 0.0:
            continue
        late = late_for(sim, m)
        if late:
            raise sim.fail(f"joiner {m.index} lacks {len(late)} messages published after "
                            "it joined")
    sim.stats.members = len(members)
    sim.stats.messages = total
