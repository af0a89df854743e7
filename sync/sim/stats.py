"""What a simulation run measured, per member and per published message."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Stats"]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Stats:
    published: int = 0
    messages: int = 0
    members: int = 0
    receptions: int = 0
    deliveries_own: int = 0
    #: Content messages dropped at a member (delivery loss) / not reached by a flood.
    lost: int = 0
    unreached: int = 0
    repair_requests: int = 0
    repair_responses: int = 0
    repair_refused: int = 0
    restarts: int = 0
    #: Events fetched by id (``Scenario.fetch``), counting every holder asked.
    fetched: int = 0
    #: DependencyLost events (SDS gave up on a message; Recon's job in the node).
    declared_lost: int = 0
    #: Messages whose every copy left with members that left for good (not required of
    #: the others: ``invariants.check_converged``).
    vanished: int = 0
    heads_peak: int = 0
    #: Inputs refused (RemoteProtocolError), by reason: only ever hostile ones.
    rejected: dict[str, int] = field(default_factory=dict)
    hostile_bytes: int = 0
    hostile_messages: int = 0
    #: When every honest member was first seen quiet (converged), simulated seconds.
    quiet_at: float = 0.0
    #: When every honest member first held every message after the last disruption and the
    #: end of publishing (repair answers may still be due: ``quiet_at`` waits for those too).
    caught_up_at: float = 0.0
    #: When the last disruption (partition healed, restart, join) happened.
    disrupted_at: float = 0.0
    #: Recon / transfer / fetch-by-id counters (``sync.sim.replication.ReplStats``).
    replication: dict[str, int] = field(default_factory=dict)
    cpu_seconds: float = 0.0
    published_until: float = 0.0
    member_cpu: float = 0.0
    sim_seconds: float = 0.0
    bytes_sent: dict[int, int] = field(default_factory=dict)
    bytes_received: dict[int, int] = field(default_factory=dict)
    msgs_sent: dict[int, int] = field(default_factory=dict)
    msgs_received: dict[int, int] = field(default_factory=dict)
    latency: list[float] = field(default_factory=list)
    #: Broadcasts by kind: content, resend, repair (a rebroadcast answer), sync, sync_request.
    #: Unicast kinds (``unicast``): fetch_request, fetch_answer, recon, transfer.
    floods: dict[str, int] = field(default_factory=dict)
    flood_bytes: dict[str, int] = field(default_factory=dict)
    #: Bytes received (every copy, all members) by broadcast kind, and the repair request
    #: entries the broadcasts carried (which kind grows with N: docs/sim.md).
    recv_bytes: dict[str, int] = field(default_factory=dict)
    request_entries: int = 0

    def sent(self, member: int, copies: int, size: int) -> None:
        self.msgs_sent[member] = self.msgs_sent.get(member, 0) + copies
        self.bytes_sent[member] = self.bytes_sent.get(member, 0) + copies * size

    def got(self, member: int, copies: int, size: int) -> None:
        self.msgs_received[member] = self.msgs_received.get(member, 0) + copies
        self.bytes_received[member] = self.bytes_received.get(member, 0) + copies * size

    def unicast(self, sender: int, receiver: int, kind: str, frames: int, size: int) -> None:
        """``frames`` of ``size`` bytes in all from one member to another (fetch-by-id, Recon,
        transfer), counted at both ends and by kind."""
        self.msgs_sent[sender] = self.msgs_sent.get(sender, 0) + frames
        self.bytes_sent[sender] = self.bytes_sent.get(sender, 0) + size
        self.msgs_received[receiver] = self.msgs_received.get(receiver, 0) + frames
        self.bytes_received[receiver] = self.bytes_received.get(receiver, 0) + size
        self.recv_bytes[kind] = self.recv_bytes.get(kind, 0) + size

    def by_kind(self, kind: str, received: int, entries: int) -> None:
        self.recv_bytes[kind] = self.recv_bytes.get(kind, 0) + received
        self.request_entries += entries

    def per_member_event(self, table: dict[int, int]) -> float:
        """Mean over members of the total in ``table``, per published message."""
        if not self.published or not self.members:
            return 0.0
        return sum(table.values()) / max(1, len(self.bytes_received) or self.members) \
            / self.published

    def summary(self) -> dict[str, object]:
        losses = self.lost + self.unreached
        per = self.published * max(1, self.members)
        return {
            "published": self.published,
            "bytes_recv_per_member_event": round(self.per_member_event(self.bytes_received), 1),
            "bytes_sent_per_member_event": round(self.per_member_event(self.bytes_sent), 1),
            "msgs_recv_per_member_event": round(self.per_member_event(self.msgs_received), 3),
            "msgs_sent_per_member_event": round(self.per_member_event(self.msgs_sent), 3),
            "cpu_us_per_event_member": round(1e6 * self.member_cpu / per, 2) if per else 0.0,
            "losses": losses,
            "requests_per_loss": round(self.repair_requests / losses, 3) if losses else 0.0,
            "responses_per_loss": round(self.repair_responses / losses, 3) if losses else 0.0,
            "repair_refused": self.repair_refused,
            "declared_lost": self.declared_lost,
            "vanished": self.vanished,
            "fetched": self.fetched,
            "delivery_p50_s": round(_percentile(self.latency, 0.50), 3),
            "delivery_p99_s": round(_percentile(self.latency, 0.99), 3),
            "heads_peak": self.heads_peak,
            "floods": dict(sorted(self.floods.items())),
            "flood_mean_bytes": {k: self.flood_bytes[k] // v
                                 for k, v in sorted(self.floods.items())},
            # Bytes received per member per published event, by broadcast kind.
            "recv_by_kind_per_member_event": {
                k: round(v / max(1, len(self.bytes_received) or self.members)
                         / self.published, 1)
                for k, v in sorted(self.recv_bytes.items())} if self.published else {},
            "request_entries": self.request_entries,
            "rejected": dict(sorted(self.rejected.items())),
            "hostile_bytes": self.hostile_bytes,
            # Bytes honest members rebroadcast as repairs per byte hostile members sent.
            "repair_bytes_per_hostile_byte": round(self.flood_bytes.get("repair", 0)
                                                   / self.hostile_bytes, 3)
            if self.hostile_bytes else 0.0,
            # Simulated seconds from the last disruption (or the end of publishing) until
            # every honest member held every message.
            "catchup_s": round(self.caught_up_at
                               - max(self.disrupted_at, self.published_until), 1)
            if self.caught_up_at else None,
            "replication": dict(self.replication),
            "sim_seconds": round(self.sim_seconds, 1),
            "cpu_seconds": round(self.cpu_seconds, 1),
        }
