"""py-libp2p 0.8.1 attaches the sender's signed peer record to every pubsub RPC and verifies it
on every receipt; ``node.p2p.compat.records.patch_record_verification`` verifies each record
once per peer (issue 31): the same bytes again cost no Ed25519 check, a new or forged record
still goes through libp2p's full check. Real libp2p hosts and envelopes; the only wrapper
counts calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import libp2p.pubsub.pubsub as pubsub_module
import libp2p.pubsub.utils as utils_module
import pytest
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerstore import issue_and_cache_local_record
from libp2p.pubsub.pb.rpc_pb2 import RPC
from multiaddr import Multiaddr

from node.p2p.compat import SUPPORTED_LIBP2P_VERSION
from node.p2p.compat.records import patch_record_verification
from tests.harness.clocks import ManualClock


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times libp2p opened (and verified) an envelope."""
    calls = [0]
    original = utils_module.consume_envelope

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(utils_module, "consume_envelope", counted)
    patch_record_verification()
    yield calls


def _sender(port: int) -> Any:
    return new_host(key_pair=create_new_key_pair(),
                    listen_addrs=[Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")])


def _rpc(record: bytes) -> RPC:
    rpc = RPC()
    rpc.senderRecord = record
    return rpc


def test_each_record_is_verified_once_per_peer(checks: list[int]) -> None:
    import importlib.metadata

    assert importlib.metadata.version("libp2p") == SUPPORTED_LIBP2P_VERSION
    consume = pubsub_module.maybe_consume_signed_record  # what libp2p's pubsub now calls
    receiver, sender, other = _sender(4101), _sender(4102), _sender(4103)
    record = issue_and_cache_local_record(sender)
    assert consume(_rpc(record), receiver, sender.get_id())
    for _ in range(100):  # the same record on the next 100 RPCs
        assert consume(_rpc(record), receiver, sender.get_id())
    assert checks[0] == 1
    # The same bytes claimed by another peer id: checked, and refused (the record names sender).
    assert not consume(_rpc(record), receiver, other.get_id())
    assert checks[0] == 2
    # A new record of the sender (libp2p issues one when its addresses change): checked again.
    fresh = issue_and_cache_local_record(sender)
    assert fresh != record
    assert consume(_rpc(fresh), receiver, sender.get_id())
    assert checks[0] == 3
    # A forged record (one signature byte flipped) is refused every time, never cached.
    forged = bytearray(fresh)
    forged[-1] ^= 1
    for _ in range(3):
        assert not consume(_rpc(bytes(forged)), receiver, sender.get_id())
    assert checks[0] == 6
    # An RPC without a record needs no check.
    assert consume(RPC(), receiver, sender.get_id())
    assert checks[0] == 6


def test_the_sent_record_is_built_once_per_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sending side: the host's record bytes are reused for ``REFRESH_S`` (the clock is
    the only thing replaced), then asked of libp2p again, so a changed address goes out."""
    import libp2p.pubsub.gossipsub as gossipsub_module

    from node.p2p.compat import records as record_send

    clock = ManualClock()
    built = [0]
    original = record_send._original_env_to_send

    def counted(host: Any) -> tuple[bytes, bool]:
        built[0] += 1
        return original(host)

    monkeypatch.setattr(record_send, "_original_env_to_send", counted)
    record_send.patch_record_sending()
    send = gossipsub_module.env_to_send_in_RPC
    host, other = _sender(4111), _sender(4112)
    assert send(host)[0] == send(host)[0] and built[0] == 2  # no clock given: never kept
    built[0] = 0
    record_send.use_clock(host, clock)
    record_send.use_clock(other, clock)
    first = send(host)[0]
    assert all(send(host)[0] == first for _ in range(100))
    assert built[0] == 1
    assert send(other)[0] != first and built[0] == 2  # per host
    clock.advance(record_send.REFRESH_S + 0.01)
    send(host)  # asked libp2p again: a changed address would be in a new record from here
    assert built[0] == 3
    assert pubsub_module.env_to_send_in_RPC is send
