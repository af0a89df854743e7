"""Reachability rules, sans-IO: is this node publicly reachable, where to reserve relay slots,
when to try a hole punch, and how fast a relayed circuit may go.

The node's driver (``node/replication/reachability.py``) feeds evidence in and carries out the
actions; nothing here does I/O or reads a clock (``now`` comes in, in seconds).

* **Verdict from evidence.** A node asks connected peers to dial it back at the IP they see it
  on and its listen port (``/syncnode/dialback/1.0.0``). Only answers about a *global* address
  count (a neighbour on the same LAN dialling our private address proves nothing about the
  internet), one vote per *network* of the answering peer (peer ids are free), lies refused:
  :class:`ReachabilityCore` says how. Evidence expires after ``evidence_ttl_s``.
* **Relays.** A node that is not public keeps reservations at ``relays_wanted`` relays, tried
  among its direct peers; a refusal backs that peer off for ``relay_retry_s``.
* **Hole punching.** Only the side that *accepted* a relayed connection initiates (two
  initiators cross and fail, DESIGN §11; if both accepted one, the smaller peer id, and the
  other after ``punch_follow_s`` if the pair is still relayed), ``punch_delay_s`` after it
  appeared, then retries with doubling back-off (at most ``punch_backoff_max_s``) up to
  ``punch_attempts`` tries, then rests ``punch_rest_s`` before a new series; a direct
  connection (or the peer leaving) ends it.
* **Circuit rate.** :class:`RateGate` paces a relayed circuit to ``circuit_rate_bytes_s``
  (libp2p's relay never enforces a rate).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from enum import StrEnum

from sync.networks import network_of

__all__ = [
    "PRIVATE",
    "PUBLIC",
    "UNKNOWN",
    "PunchPlanner",
    "RateGate",
    "Reachability",
    "ReachabilityConfig",
    "ReachabilityCore",
    "RelayPlanner",
    "address_scope",
]


class Reachability(StrEnum):
    PUBLIC = "public"
    PRIVATE = "private"
    UNKNOWN = "unknown"


PUBLIC, PRIVATE, UNKNOWN = Reachability.PUBLIC, Reachability.PRIVATE, Reachability.UNKNOWN

# Not reachable from the internet: RFC 1918, carrier-grade NAT (RFC 6598), link-local, ULA.
# 198.18.0.0/15 (benchmarking) counts as global on purpose: tests/net uses it as the internet,
# and it never appears on the real one.
_LOCAL_NETS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16",
    "fc00::/7", "fe80::/10",
))


def address_scope(ip: str) -> str:
    """``"loopback"``, ``"unspecified"``, ``"local"`` (a LAN or CGNAT address), ``"global"``,
    or ``"invalid"``."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return "invalid"
    if address.is_loopback:
        return "loopback"
    if address.is_unspecified:
        return "unspecified"
    if any(address in net for net in _LOCAL_NETS if net.version == address.version):
        return "local"
    return "global"


@dataclass(frozen=True)
class ReachabilityConfig:
    """The ``[reachability]`` section. Durations in seconds, sizes in bytes."""

    serve_relay: str = "auto"  # "auto": when public; "on"; "off"
    relays_wanted: int = 2
    relay_retry_s: float = 10.0
    reservation_refresh_s: float = 300.0
    confirmations: int = 2
    evidence_ttl_s: float = 600.0
    probe_interval_s: float = 120.0  # between two dial-back requests to the same peer
    max_evidence: int = 32
    # What one network is (sync.networks) when dial-back answers are counted, and how many
    # answers one network may have on record.
    network_prefix_v4: int = 16
    network_prefix_v6: int = 32
    evidence_per_network: int = 2
    hole_punch: bool = True
    punch_delay_s: float = 1.0
    punch_attempts: int = 8
    punch_backoff_s: float = 3.0
    punch_backoff_max_s: float = 15.0
    # After punch_attempts failures in a row, rest this long, then try a new series (a NAT's
    # behaviour or the machines' load may have changed; the relayed path works meanwhile).
    punch_rest_s: float = 300.0
    # The side that should not punch (it dialled too and has the larger peer id) takes over
    # when the pair is still relayed this long after it first saw it relayed.
    punch_follow_s: float = 15.0
    # What a relay we serve grants (config keys; libp2p's defaults are 1 h and 1 GiB).
    max_reservations: int = 32
    max_circuits: int = 64
    circuit_duration_s: int = 600
    circuit_bytes: int = 64 * 1024 * 1024
    circuit_rate_bytes_s: int = 1024 * 1024
    reservation_ttl_s: int = 900
    # A relay's share per source network (sync.networks): reservations and open circuits.
    relay_share_prefix_v4: int = 24
    relay_share_prefix_v6: int = 48
    relay_reservations_per_network: int = 4
    relay_circuits_per_network: int = 16

    def __post_init__(self) -> None:
        if self.serve_relay not in ("auto", "on", "off"):
            raise ValueError(f"serve_relay: expected auto, on or off, got {self.serve_relay!r}")
        for name in ("relays_wanted", "confirmations", "max_evidence", "punch_attempts",
                     "max_reservations", "max_circuits", "circuit_duration_s", "circuit_bytes",
                     "circuit_rate_bytes_s", "reservation_ttl_s", "evidence_per_network",
                     "relay_reservations_per_network", "relay_circuits_per_network"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)!r}")
        for name, most in (("network_prefix_v4", 32), ("network_prefix_v6", 128),
                           ("relay_share_prefix_v4", 32), ("relay_share_prefix_v6", 128)):
            if not 0 <= getattr(self, name) <= most:
                raise ValueError(f"{name}: must be 0 to {most}, got {getattr(self, name)!r}")
        for name in ("relay_retry_s", "reservation_refresh_s", "evidence_ttl_s",
                     "probe_interval_s", "punch_delay_s", "punch_backoff_s",
                     "punch_backoff_max_s", "punch_rest_s", "punch_follow_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must not be negative, got {getattr(self, name)!r}")


@dataclass
class _Evidence:
    ok: bool
    at: float
    ip: str  # the global IP the peer says it saw (and dialled) us on
    network: str  # the peer's own network (sync.networks), not the one it names
    outbound: bool  # we dialled this peer: not a stranger who chose to come to us


class ReachabilityCore:
    """The verdict, from dial-back answers; and whom to ask next.

    Peer ids cost nothing, so answers are counted by the *network* of the answering peer
    (``network_prefix_v4``/``_v6``): each network casts one vote, that of its latest answer
    from a peer we dialled ourselves if it has one (an inbound stranger chose to come to us),
    else its latest answer. ``confirmations`` networks voting success and more successes than
    failures -> public (honest failures veto); ``confirmations`` failing networks and no
    success -> private. At most ``evidence_per_network`` answers are kept per network.

    Two answers are lies, refused and returned as such for the driver to charge the peer:
    a global address named by a peer we reach on a loopback or LAN address (it sees us on one
    of those: ``"mismatch"``), and a success whose dial-back connection never reached us
    (``"unverified"``: the driver watches its own listener)."""

    def __init__(self, config: ReachabilityConfig) -> None:
        self.config = config
        self._evidence: dict[str, _Evidence] = {}
        self._asked: dict[str, float] = {}
        self.ignored = 0  # answers about non-global addresses (same LAN): no evidence
        self.lies: dict[str, int] = {"mismatch": 0, "unverified": 0}

    def network(self, ip: str | None) -> str | None:
        return network_of(ip, self.config.network_prefix_v4, self.config.network_prefix_v6)

    def observe(self, peer: str, dialed_ip: str, ok: bool, now: float, *, peer_ip: str | None,
                outbound: bool = False, arrived: bool = True) -> str:
        """``peer`` (which we reach at ``peer_ip``) says it dialled us back at ``dialed_ip``
        (the IP it sees us on), successfully or not; ``arrived``: our listener saw its
        dial-back connection. Returns ``"counted"``, ``"ignored"`` or the lie's reason."""
        network = self.network(peer_ip)
        if address_scope(dialed_ip) != "global" or network is None:
            self.ignored += 1
            return "ignored"
        lie = None
        if address_scope(peer_ip or "") in ("loopback", "local"):
            lie = "mismatch"
        elif ok and not arrived:
            lie = "unverified"
        if lie is not None:
            self.lies[lie] += 1
            self._evidence.pop(peer, None)
            return lie
        self._evidence.pop(peer, None)
        self._evidence[peer] = _Evidence(ok, now, dialed_ip, network, outbound)
        same = [p for p, e in self._evidence.items() if e.network == network]
        if len(same) > self.config.evidence_per_network:
            # Strangers' answers go first, then the oldest (the dict keeps arrival order).
            self._drop(same)
        if len(self._evidence) > self.config.max_evidence:
            self._drop(list(self._evidence))
        return "counted"

    def _drop(self, peers: list[str]) -> None:
        inbound = [p for p in peers if not self._evidence[p].outbound]
        del self._evidence[(inbound or peers)[0]]

    def _votes(self, now: float) -> dict[str, _Evidence]:
        """Each network's vote among fresh evidence (arrival order: later wins)."""
        votes: dict[str, _Evidence] = {}
        for e in self._evidence.values():
            if now - e.at > self.config.evidence_ttl_s:
                continue
            held = votes.get(e.network)
            if held is None or e.outbound or not held.outbound:
                votes[e.network] = e
        return votes

    def verdict(self, now: float) -> Reachability:
        votes = self._votes(now).values()
        successes = sum(1 for e in votes if e.ok)
        failures = len(votes) - successes
        if successes >= self.config.confirmations and successes > failures:
            return PUBLIC
        if failures >= self.config.confirmations and successes == 0:
            return PRIVATE
        return UNKNOWN

    def to_ask(self, direct_peers: list[str], now: float, limit: int = 3) -> list[str]:
        """Peers to send a dial-back request now (each at most once per probe interval)."""
        out: list[str] = []
        for peer in direct_peers:
            last = self._asked.get(peer)
            if last is None or now - last >= self.config.probe_interval_s:
                out.append(peer)
                self._asked[peer] = now
                if len(out) >= limit:
                    break
        if len(self._asked) > 4 * self.config.max_evidence:
            for peer in sorted(self._asked, key=self._asked.__getitem__)[: len(self._asked) // 2]:
                del self._asked[peer]
        return out

    def punch_addrs(self, listen_port: int, now: float, limit: int = 4) -> list[str]:
        """The addresses a hole punch should tell the other side to dial: each global IP a
        peer saw us on within ``evidence_ttl_s`` (ranked below) with our listen port (the punch
        dial leaves from it and masquerading NATs keep the port).

        libp2p's own prediction rests on identify's observed addresses, which it drops with
        the connection they came on and does not learn again when the peer reconnects (identify
        is skipped for a peer whose protocols it has cached): after an outage closed every
        remote connection, a node behind NAT only knew the address its LAN neighbours see, so
        it told the other side to dial its private address and every punch failed. The
        evidence here outlives connections."""
        if not 0 < listen_port < 65536:
            return []
        # An IP named from more networks goes first, then one a peer we dialled named, then
        # the newest: one network cannot put its choice ahead of what others saw.
        named: dict[str, tuple[set[str], bool, float]] = {}
        for e in self._evidence.values():
            if now - e.at <= self.config.evidence_ttl_s:
                networks, outbound, at = named.get(e.ip, (set(), False, e.at))
                named[e.ip] = (networks | {e.network}, outbound or e.outbound, max(at, e.at))
        ranked = sorted(named, key=lambda ip: (len(named[ip][0]), named[ip][1], named[ip][2]),
                        reverse=True)
        return [f"/{'ip6' if ':' in ip else 'ip4'}/{ip}/tcp/{listen_port}"
                for ip in ranked[:limit]]

    def confirmed_addrs(self, listen_port: int, now: float, limit: int = 2) -> list[str]:
        """Our addresses a dial-back reached within ``evidence_ttl_s`` (a global IP with our
        listen port), each confirmed from ``confirmations`` distinct networks (peer ids cost
        nothing: Sybils of one network must not make our record point peers at an address of
        their choosing): dialable from the internet, so worth advertising (a wildcard listen
        address says nothing of them, ``sync.own_addrs``). Most confirmed first."""
        if not 0 < listen_port < 65536:
            return []
        networks: dict[str, set[str]] = {}
        for e in self._evidence.values():
            if e.ok and e.ip and now - e.at <= self.config.evidence_ttl_s:
                networks.setdefault(e.ip, set()).add(e.network)
        votes = {ip: len(nets) for ip, nets in networks.items()}
        confirmed = sorted((ip for ip, n in votes.items() if n >= self.config.confirmations),
                           key=lambda ip: (-votes[ip], ip))
        return [f"/{'ip6' if ':' in ip else 'ip4'}/{ip}/tcp/{listen_port}"
                for ip in confirmed[:limit]]

    def counts(self, now: float) -> dict[str, int]:
        votes = self._votes(now).values()
        return {"success": sum(e.ok for e in votes), "failure": sum(not e.ok for e in votes),
                "lies": sum(self.lies.values())}


@dataclass
class RelayPlanner:
    """Which relays to hold reservations at."""

    config: ReachabilityConfig
    reserved: dict[str, float] = field(default_factory=dict)  # relay peer -> reserved at
    _refused_until: dict[str, float] = field(default_factory=dict)

    def to_reserve(self, verdict: Reachability, direct_peers: list[str],
                   now: float) -> list[str]:
        """Relays to (re)reserve at now: new ones up to ``relays_wanted``, and old ones whose
        reservation is due for a refresh. A public node needs none."""
        if verdict is PUBLIC:
            return []
        due = [r for r, at in self.reserved.items()
               if now - at >= self.config.reservation_refresh_s]
        missing = self.config.relays_wanted - len(self.reserved)
        fresh: list[str] = []
        for peer in direct_peers:
            if missing <= 0:
                break
            if peer in self.reserved or self._refused_until.get(peer, 0.0) > now:
                continue
            fresh.append(peer)
            missing -= 1
        return due + fresh

    def reserved_ok(self, relay: str, now: float) -> None:
        self.reserved[relay] = now
        self._refused_until.pop(relay, None)

    def refused(self, relay: str, now: float) -> None:
        self.reserved.pop(relay, None)
        self._refused_until[relay] = now + self.config.relay_retry_s
        if len(self._refused_until) > 1024:
            for peer in [p for p, t in self._refused_until.items() if t <= now]:
                del self._refused_until[peer]

    def lost(self, relay: str) -> None:
        """The connection to ``relay`` closed: its reservation is gone with it."""
        self.reserved.pop(relay, None)

    def relays(self) -> list[str]:
        return sorted(self.reserved)


@dataclass
class _Punch:
    due: float
    attempts: int = 0


@dataclass
class PunchPlanner:
    """When to try to turn a relayed connection into a direct one."""

    config: ReachabilityConfig
    _plans: dict[str, _Punch] = field(default_factory=dict)
    _following: dict[str, float] = field(default_factory=dict)  # peer -> relayed since
    succeeded: int = 0
    failed: int = 0
    gave_up: int = 0

    def relayed(self, peer: str, *, accepted: bool, dialed: bool, us: str, now: float,
                dialable: bool = False) -> None:
        """Relayed connections to ``peer`` exist (``accepted``: one came in, ``dialed``: we
        opened one). We punch only if we accepted; when both sides dialled each other through
        relays at once, the side with the smaller peer id punches (two punches cross). The
        two sides may not see the same connections (a relay keeps one circuit per pair and a
        second overwrites the first; one side's connection may not have been set up yet): the
        accepting side that waits for the other takes over after ``punch_follow_s`` still
        relayed, else (seen after an outage, when both sides redial at once) both could wait
        for each other for good.

        ``dialable``: the peer advertises a global direct address (a public node). Then we
        move to the direct path whoever opened the circuit: a plain dial crosses nothing, and
        a node behind NAT must hold direct connections to the public nodes it knows (a
        public node that reached it through a circuit at another public node would otherwise
        be lost with that relay)."""
        leads = dialable or (accepted and (not dialed or us < peer))
        if accepted and not leads:
            since = self._following.setdefault(peer, now)
            leads = now - since >= self.config.punch_follow_s
        if leads and self.config.hole_punch and peer not in self._plans:
            self._plans[peer] = _Punch(now + self.config.punch_delay_s)

    def direct(self, peer: str) -> None:
        """A direct connection to ``peer`` exists (punched or dialled): nothing to do."""
        self._plans.pop(peer, None)
        self._following.pop(peer, None)

    def gone(self, peer: str) -> None:
        self._plans.pop(peer, None)
        self._following.pop(peer, None)

    def due(self, now: float) -> list[str]:
        """Peers to punch now; each is then not due again until :meth:`result` is called."""
        out = [p for p, plan in self._plans.items() if plan.due <= now]
        for peer in out:
            self._plans[peer].due = float("inf")
        return out

    def result(self, peer: str, ok: bool, now: float) -> None:
        plan = self._plans.get(peer)
        if ok:
            self.succeeded += 1
            self._plans.pop(peer, None)
            return
        self.failed += 1
        if plan is None:
            return
        plan.attempts += 1
        if plan.attempts >= self.config.punch_attempts:
            self.gave_up += 1
            plan.attempts = 0
            plan.due = now + self.config.punch_rest_s
            return
        plan.due = now + min(self.config.punch_backoff_max_s,
                             self.config.punch_backoff_s * 2 ** (plan.attempts - 1))

    def get_timer(self) -> float | None:
        times = [p.due for p in self._plans.values() if p.due != float("inf")]
        return min(times) if times else None

    def pending(self) -> int:
        return len(self._plans)

    def planned(self) -> list[str]:
        return list(self._plans.keys() | self._following.keys())


class RateGate:
    """A token bucket for one relayed circuit: how long to wait before forwarding n bytes."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("rate and burst must be positive")
        self.rate, self.burst = rate, burst
        self._tokens = burst
        self._at = now

    def delay(self, n: int, now: float) -> float:
        """Seconds to wait before sending ``n`` bytes (the bytes are then accounted for)."""
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= n
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate
