"""Liveness of connections and of our own network, sans-IO: close a connection whose pings keep
failing, notice when our own uplink is down, and say what to do the moment it is back.

A TCP connection that crosses a network outage survives it, but after a minute without answers
TCP retransmits only every 30-60 s or more: when the network returns, the first segment waits
for the next retransmission, and peers stay cut off long after they could talk again. So:

* **Dead connections.** The node pings each connected peer every ``ping_interval_s`` (libp2p
  ping; it also gives the RTT ``peers`` shows). After ``max_failures`` failed or timed-out
  pings in a row :meth:`ping_failed` answers True: the connection is dead for us, the node
  closes it (a fresh connection later does not inherit its retransmission back-off).
* **Our own outage.** A *remote* peer is one reached across the internet (a global address or
  a relay), not one on our own LAN. When a remote connection is closed this way and no remote
  peer answered a ping since that connection started failing, the fault is probably ours (our
  uplink is down, not that one peer): an *outage* begins. During it a failed dial is not held
  against the peer (the address book would back it off for minutes, then drop it): it is
  retried after ``outage_retry_s`` (:meth:`dial_failed_retry_at`), and every ``probe_s``
  :meth:`probe_due` asks the node to dial one known peer, whatever its connection count (a
  node that still holds its LAN neighbours would otherwise dial nobody and never notice).
* **Network back.** The first outbound dial that succeeds (:meth:`dialled_ok`), or a remote
  ping that is answered (:meth:`ping_ok`), ends the outage and returns a :class:`NetworkBack`:
  close the connections still suspect (a failed ping since their last answer: stuck in back-off),
  make every address-book entry due and dial now, rather than at the next housekeeping.

A peer that merely died is not an outage: our other remote peers keep answering. Time is the
caller's ``now`` in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Liveness", "NetworkBack"]


@dataclass(frozen=True)
class NetworkBack:
    """Our network works again after an outage that began at ``since``."""

    since: float
    close: tuple[str, ...]  # connections with a failed ping since their last answer


class Liveness:
    def __init__(self, max_failures: int = 3, outage_retry_s: float = 1.0,
                 probe_s: float = 1.0) -> None:
        if max_failures < 1 or outage_retry_s <= 0 or probe_s <= 0:
            raise ValueError("need max_failures >= 1, outage_retry_s > 0 and probe_s > 0")
        self.max_failures = max_failures
        self.outage_retry_s = outage_retry_s
        self.probe_s = probe_s
        self.failures: dict[str, int] = {}
        self._failing_since: dict[str, float] = {}
        self.last_remote_ok: float | None = None
        self.outage_since: float | None = None
        self._next_probe = 0.0

    @property
    def in_outage(self) -> bool:
        return self.outage_since is not None

    def ping_ok(self, peer: str, now: float, remote: bool = True) -> NetworkBack | None:
        """``peer`` answered a ping: its count restarts; a remote answer ends an outage."""
        self.failures.pop(peer, None)
        self._failing_since.pop(peer, None)
        if not remote:
            return None
        self.last_remote_ok = now
        return self._end_outage()

    def ping_failed(self, peer: str, now: float, remote: bool = True) -> bool:
        """A ping to ``peer`` failed or timed out: True when its connection should close."""
        count = self.failures.get(peer, 0) + 1
        since = self._failing_since.setdefault(peer, now)
        if count < self.max_failures:
            self.failures[peer] = count
            return False
        self.failures.pop(peer, None)
        self._failing_since.pop(peer, None)
        quiet = self.last_remote_ok is None or self.last_remote_ok < since
        if remote and quiet and self.outage_since is None:
            self.outage_since = now
            self._next_probe = now
        return True

    def closed(self, peer: str) -> None:
        """The connection to ``peer`` is gone (whoever closed it): forget its count."""
        self.failures.pop(peer, None)
        self._failing_since.pop(peer, None)

    def dial_failed_retry_at(self, now: float) -> float | None:
        """During an outage, when to retry a peer whose dial just failed (its failure not
        counted); None outside an outage (the book's own back-off applies)."""
        return None if self.outage_since is None else now + self.outage_retry_s

    def probe_due(self, now: float) -> bool:
        """During an outage, True every ``probe_s``: dial one known peer now."""
        if self.outage_since is None or now < self._next_probe:
            return False
        self._next_probe = now + self.probe_s
        return True

    def dialled_ok(self) -> NetworkBack | None:
        """An outbound dial succeeded: the network works (a :class:`NetworkBack` when that
        ends an outage)."""
        return self._end_outage()

    def _end_outage(self) -> NetworkBack | None:
        if self.outage_since is None:
            return None
        back = NetworkBack(self.outage_since, tuple(sorted(self.failures)))
        self.outage_since = None
        for peer in back.close:
            self.closed(peer)
        return back
