"""Liveness of connections, sans-IO: close a connection whose pings keep failing, and tell the
address book when a failed dial says more about our own network than about the peer.

A TCP connection that crosses a network outage survives it, but after a minute without answers
TCP retransmits only every 30-60 s or more: when the network returns, the first segment waits
for the next retransmission, and peers stay cut off long after they could talk again. So the
node pings each connected peer now and then (libp2p ping, for the RTT anyway); after
``max_failures`` failed or timed-out pings in a row the connection is dead for us: we close it,
and the connection manager redials (address book, relays) as soon as a dial can succeed.

Closing by liveness also marks an *outage*: until an outbound dial succeeds again, failed dials
are probably ours (our uplink is down), so the address book should neither count them against
the peers (an entry is dropped after enough failures) nor back them off for minutes; the node
retries them every ``outage_retry_s`` instead. The first successful dial ends the outage and
makes every backed-off entry due at once (:meth:`dialled_ok` returns True).

Time is the caller's ``now`` in seconds.
"""

from __future__ import annotations

__all__ = ["Liveness"]


class Liveness:
    def __init__(self, max_failures: int = 3, outage_retry_s: float = 5.0) -> None:
        if max_failures < 1 or outage_retry_s <= 0:
            raise ValueError("need max_failures >= 1 and outage_retry_s > 0")
        self.max_failures = max_failures
        self.outage_retry_s = outage_retry_s
        self.failures: dict[str, int] = {}
        self.outage_since: float | None = None

    def ping_ok(self, peer: str) -> None:
        self.failures.pop(peer, None)

    def ping_failed(self, peer: str, now: float) -> bool:
        """A ping to ``peer`` failed or timed out: True when its connection should close."""
        count = self.failures.get(peer, 0) + 1
        if count < self.max_failures:
            self.failures[peer] = count
            return False
        self.failures.pop(peer, None)
        if self.outage_since is None:
            self.outage_since = now
        return True

    def closed(self, peer: str) -> None:
        """The connection to ``peer`` is gone (whoever closed it): forget its count."""
        self.failures.pop(peer, None)

    def dial_failed_retry_at(self, now: float) -> float | None:
        """During an outage, when to retry a peer whose dial just failed (its failure not
        counted); None outside an outage (the book's own back-off applies)."""
        return None if self.outage_since is None else now + self.outage_retry_s

    def dialled_ok(self) -> bool:
        """An outbound dial succeeded: True when it ended an outage (make backed-off entries
        due now: the network is back)."""
        ended = self.outage_since is not None
        self.outage_since = None
        return ended
