"""Signed peer records (libp2p's envelope, domain ``libp2p-peer-record``): ours, re-signed
whenever our addresses change, and others', verified before anything else looks at them.

A record is evidence only about its signer: :func:`open_record` checks the envelope's
signature *and* that the signing key is the record's peer id (libp2p's ``consume_envelope``
checks only the signature).
"""

from __future__ import annotations

from dataclasses import dataclass

import multiaddr
from libp2p.crypto.keys import PrivateKey
from libp2p.peer.envelope import consume_envelope, seal_record
from libp2p.peer.id import ID
from libp2p.peer.peer_record import PEER_RECORD_ENVELOPE_DOMAIN, PeerRecord, timestamp_seq

from node.p2p.frames import P2PError

__all__ = ["LocalRecord", "OpenedRecord", "RecordError", "open_record"]


class RecordError(P2PError):
    """A peer record that is not well formed, not validly signed, or signed by another key."""


@dataclass(frozen=True)
class OpenedRecord:
    peer_id: str
    addrs: tuple[str, ...]
    seq: int
    envelope: bytes


def open_record(data: bytes, max_bytes: int) -> OpenedRecord:
    """Verify and decode a signed peer record.

    :raises RecordError: too large, malformed, bad signature, or key and peer id differ.
    """
    if len(data) > max_bytes:
        raise RecordError(f"record of {len(data)} bytes (limit {max_bytes})")
    try:
        envelope, record = consume_envelope(data, PEER_RECORD_ENVELOPE_DOMAIN)
        signer = ID.from_pubkey(envelope.public_key)
        addrs = tuple(str(a) for a in record.addrs)
        seq = int(record.seq)
    except Exception as exc:
        raise RecordError(f"not a valid signed peer record: {exc}") from None
    if signer != record.peer_id:
        raise RecordError(f"record for {record.peer_id} signed by {signer}")
    return OpenedRecord(signer.to_base58(), addrs, seq, data)


class LocalRecord:
    """Our own signed record. :meth:`advertise` re-signs it with a higher sequence number;
    reachability (e.g. relayed addresses) calls it when our dialable addresses change."""

    def __init__(self, peer_id: ID, private_key: PrivateKey, addrs: list[str]) -> None:
        self._peer_id = peer_id
        self._key = private_key
        self.addrs: tuple[str, ...] = ()
        self.envelope = b""
        self.seq = 0
        self.advertise(addrs)

    def advertise(self, addrs: list[str]) -> bool:
        """Sign a record listing ``addrs`` (transport addresses, ``/p2p/<us>`` suffix
        dropped); returns False when they are the ones already advertised."""
        suffix = f"/p2p/{self._peer_id.to_base58()}"
        clean = tuple(dict.fromkeys(a.removesuffix(suffix) for a in addrs))
        if clean == self.addrs and self.envelope:
            return False
        self.seq = max(self.seq + 1, timestamp_seq())
        record = PeerRecord(self._peer_id, [multiaddr.Multiaddr(a) for a in clean], self.seq)
        self.envelope = seal_record(record, self._key).marshal_envelope()
        self.addrs = clean
        return True
