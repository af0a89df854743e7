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

* **Loaded, not dead.** A ping that times out proves nothing when the peer spoke to us on the
  connection meanwhile (:meth:`heard`: it opened a stream, or accepted ours), nor when our own
  process was starved while the ping waited (:meth:`stalled`: our timer woke ``stall_s`` or
  more late, so the answer may be sitting unread in our socket). Such a failure is *excused*:
  it does not count. A peer heard from is alive, whatever its pings do; stalls excuse at most
  ``max_failures`` failures in a row (a dead peer on a node that is always starved is still
  closed, later).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Liveness", "NetworkBack"]

_MAX_HEARD = 4096  # peers remembered as heard from (connected peers are far fewer)


@dataclass(frozen=True)
class NetworkBack:
    """Our network works again after an outage that began at ``since``."""

    since: float
    close: tuple[str, ...]  # connections with a failed ping since their last answer


class Liveness:
    def __init__(self, max_failures: int = 3, outage_retry_s: float = 1.0,
                 probe_s: float = 1.0, stall_s: float = 2.0) -> None:
        if max_failures < 1 or outage_retry_s <= 0 or probe_s <= 0 or stall_s <= 0:
            raise ValueError("need max_failures >= 1, and outage_retry_s, probe_s and "
                             "stall_s > 0")
        self.max_failures = max_failures
        self.outage_retry_s = outage_retry_s
        self.probe_s = probe_s
        self.stall_s = stall_s
        self.failures: dict[str, int] = {}
        self.excused = 0  # failed pings not counted (heard from, or we were stalled)
        self.last_excuse: str | None = None  # why the last failed ping was not counted
        self._failing_since: dict[str, float] = {}
        self._heard: dict[str, float] = {}
        self._stall_excuses: dict[str, int] = {}
        self._stalled_at = float("-inf")
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
        self._stall_excuses.pop(peer, None)
        if not remote:
            return None
        self.last_remote_ok = now
        return self._end_outage()

    def heard(self, peer: str, now: float) -> None:
        """``peer`` spoke to us on its connection (a stream it opened, or one it accepted)."""
        if peer not in self._heard and len(self._heard) >= _MAX_HEARD:
            del self._heard[min(self._heard, key=self._heard.__getitem__)]
        self._heard[peer] = now

    def stalled(self, now: float, late_s: float) -> None:
        """Our own timer woke ``late_s`` seconds late at ``now`` (the process was starved)."""
        if late_s >= self.stall_s:
            self._stalled_at = now

    def ping_failed(self, peer: str, now: float, remote: bool = True,
                    sent_at: float | None = None) -> bool:
        """A ping to ``peer`` sent at ``sent_at`` failed or timed out: True when its connection
        should close."""
        self.last_excuse = None
        if sent_at is not None and self._heard.get(peer, float("-inf")) >= sent_at:
            self.last_excuse = "heard"
            self.excused += 1
            self.failures.pop(peer, None)
            self._failing_since.pop(peer, None)
            self._stall_excuses.pop(peer, None)
            return False
        if sent_at is not None and self._stalled_at >= sent_at and \
                self._stall_excuses.get(peer, 0) < self.max_failures:
            self.last_excuse = "stalled"
            self.excused += 1
            self._stall_excuses[peer] = self._stall_excuses.get(peer, 0) + 1
            return False
        count = self.failures.get(peer, 0) + 1
        since = self._failing_since.setdefault(peer, now)
        if count < self.max_failures:
            self.failures[peer] = count
            return False
        self.failures.pop(peer, None)
        self._failing_since.pop(peer, None)
        self._stall_excuses.pop(peer, None)
        quiet = self.last_remote_ok is None or self.last_remote_ok < since
        if remote and quiet and self.outage_since is None:
            self.outage_since = now
            self._next_probe = now
        return True

    def closed(self, peer: str) -> None:
        """The connection to ``peer`` is gone (whoever closed it): forget its count."""
        self.failures.pop(peer, None)
        self._failing_since.pop(peer, None)
        self._heard.pop(peer, None)
        self._stall_excuses.pop(peer, None)

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
