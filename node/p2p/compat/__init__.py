"""Every patch, override and private access of py-libp2p 0.8.1, in one place.

Nothing else in the project touches a private name of libp2p (``tests/node/test_libp2p_compat.py``
scans for it; docs/upstream.md states the rule). :func:`apply` installs every module-level
replacement once per process, after the version check, and is idempotent. The rest is per
host, set when a host is built: our subclasses (``GuardedPubsub``, ``relay.SharedRelay``,
``relay.ResponderDCUtR``), the host's TCP transport (:func:`share_port`), its identify
observations and its router's peer exchange (``scope``). Settings stay per host: a module-level
replacement asks the host it serves (``GuardedPubsub.peer_queue_size``, the clock given to
:func:`use_clock`, the flags given to :func:`share_port`), never a process global. The one
process-wide setting is the ``libp2p`` logger level (:func:`set_libp2p_log_level`).

The table (``node.p2p.compat.table.ENTRIES``; docs/upstream.md has a reproduction and the fix
of each, ready to send upstream). Kind: *replaced* = a libp2p name we set (by :func:`apply`,
or on one host's own object), *overridden* = a method of our subclass, *read* = a private
attribute we read.

==== ========== =========================================================== ========================
key  kind       libp2p name (0.8.1)                                         contract test
==== ========== =========================================================== ========================
S1   replaced   ``Swarm._do_handle_inbound_connection``                     test_conn_slots
S2   replaced   ``PeerStore.maybe_delete_peer_record``                      test_peerstore_expiry
R1   replaced   ``pubsub/gossipsub.maybe_consume_signed_record``            test_libp2p_compat
R2   replaced   ``pubsub/gossipsub.env_to_send_in_RPC``                     test_record_once
R3   replaced   the record on every RPC (in ``Pubsub.write_msg``)           test_gossip_receive_path
V1   replaced   ``Pubsub.validation_cache`` (``ValidationCache``, per host) test_gossip_receive_path
V2   replaced   ``pubsub.signature_validator``                              test_gossip_receive_path
P1   overridden ``Pubsub.stream_handler``                                   test_libp2p_compat
P2   overridden ``Pubsub.write_msg``                                        test_pubsub_framing
P3   overridden ``Pubsub._handle_dead_peer`` (reads ``_peer_is_connected``,  test_pubsub_framing
                ``_peer_subscription_count``, ``_replayed_recent_topics``)
P4   overridden ``Pubsub._handle_new_peer``                                 test_pubsub_framing
P5   overridden ``Pubsub.counter`` (set at start)                           test_gossip_seqno
P6   replaced   ``pubsub.RpcQueue``, ``pubsub.SUBSCRIPTION_CHANNEL_SIZE``   test_libp2p_compat
P7   read       ``Pubsub._is_msg_seen`` (in ``push_msg``; a metric)         test_gossip_degree
B1   replaced   ``pubsub.read_varint_prefixed_bytes_limited`` (buffered)    test_libp2p_compat
P8   overridden ``Pubsub.continuously_read_stream`` (no task per message)   test_gossip_receive_path
G1   replaced   ``GossipSub.recent_message_deliveries`` (per router)        test_gossip_receive_path
G2   replaced   ``PeerScorer`` gates (no score for ``-inf``; per scorer)    test_gossip_send_path
G3   replaced   ``GossipSub.send_rpc`` (no split of a fitting publish)      test_gossip_send_path
G4   replaced   ``GossipSub._emit_idontwant_for_message``,                  test_gossip_send_path
                ``_notify_observers`` (skipped without v1.2+; per router)
G5   replaced   ``GossipSub.equivocation_detection`` (per router)           test_gossip_receive_path
G6   replaced   ``GossipSub._emit_idontwant_for_message``, ``send_rpc``     test_gossip_idontwant
                (opt-in: IDONTWANT on receipt, before validation, on the next
                queued RPC; per router, ``gossip_idontwant``)
Y1   replaced   ``YamuxStream._auto_tune_and_send_window_update``           test_yamux_tuning
Y2   replaced   ``Yamux._write_frame``                                      test_libp2p_compat
W1   replaced   ``Yamux._write_frame`` (queued frames sent as one write)     test_libp2p_compat
Y3   replaced   ``Yamux._cleanup_on_error``, ``close``, ``YamuxStream.read``,  test_yamux_end
                ``SwarmConn._cleanup`` (bytes readable after the end)
Y4   replaced   ``Yamux._read_data_body``, the module's ``read_exactly``       test_yamux_window
                (a frame beyond the receive window ends the session)
L1   replaced   ``swarm_connection.logging``                                test_libp2p_compat
T1   read       ``secured_conn.conn.read_writer.read_write_closer.stream``   test_p2p
T2   replaced   ``tcp._set_reuse_flags``                                    test_libp2p_compat
T3   replaced   ``TCPListener.get_addrs`` (closed sockets skipped)           test_libp2p_compat
N1   replaced   ``NoiseTransportReadWriter.read_msg`` (buffered)            test_libp2p_compat
K1   replaced   the locks of ``TrioTCPStream``, ``Yamux``, ``YamuxStream``      test_libp2p_compat
                (``__init__`` wrapped: no yield when free)
C1   overridden ``CircuitV2Protocol._read_stream_with_retry`` (pacing)       test_relay_layer
C2   overridden ``CircuitV2Protocol._relay_data``, ``_active_relays``        test_relay_layer
C3   overridden ``CircuitV2Protocol._handle_reserve``, ``_handle_connect``   test_hostile_reach
C4   read       ``CircuitV2Protocol._handle_hop_stream``                     test_relay_layer
D1   overridden ``DCUtRProtocol._auto_drive_loop``                           test_libp2p_compat
D2   overridden ``DCUtRProtocol._try_unilateral_upgrade``                    test_relay_layer
D3   overridden ``DCUtRProtocol._have_direct_connection``                    test_relay_layer
D4   overridden ``DCUtRProtocol._get_observed_addrs``                        test_relay_layer
D5   overridden ``DCUtRProtocol._dial_peer``                                 test_scope_guard
D6   read       ``DCUtRProtocol._direct_connections``, ``_hole_punch_attempts`` test_libp2p_compat
D7   overridden ``DCUtRProtocol._perform_hole_punch`` (wrapped), ``_dial_peer`` test_relay_layer
                (one dial per address for the whole attempt)
A1   replaced   ``BasicHost._observed_addr_manager.record_observation``      test_scope_guard
A2   replaced   ``GossipSub._do_px`` (per router)                            test_scope_guard
==== ========== =========================================================== ========================

All checked against py-libp2p 0.8.1 (:data:`SUPPORTED_LIBP2P_VERSION`).
"""

from __future__ import annotations

import logging
import os

from node.p2p.compat.locks import patch_quick_locks
from node.p2p.compat.logs import patch_root_logging, set_libp2p_log_level
from node.p2p.compat.noise import patch_noise_reads
from node.p2p.compat.pubsub import GuardedPubsub, patch_gossip_queues
from node.p2p.compat.records import patch_record_sending, patch_record_verification, use_clock
from node.p2p.compat.rpc_reads import patch_rpc_reads
from node.p2p.compat.sockets import (
    patch_closing_listener,
    patch_reuse_flags,
    share_port,
    tcp_socket_of,
)
from node.p2p.compat.swarm import patch_expired_peer_records, patch_inbound_slots
from node.p2p.compat.validation import patch_signature_check
from node.p2p.compat.version import SUPPORTED_LIBP2P_VERSION, check_libp2p_version
from node.p2p.compat.yamux import patch_yamux
from node.p2p.compat.yamux_end import patch_yamux_end
from node.p2p.compat.yamux_window import WindowOverrun, patch_yamux_window, window_overrun

__all__ = [
    "MEASURED_STEPS",
    "SUPPORTED_LIBP2P_VERSION",
    "WITHOUT_ENV",
    "GuardedPubsub",
    "WindowOverrun",
    "applied",
    "apply",
    "check_libp2p_version",
    "set_libp2p_log_level",
    "share_port",
    "steps_left_out",
    "tcp_socket_of",
    "use_clock",
    "window_overrun",
]

_applied = False
#: The per-message cost steps a benchmark may leave out, to measure each one alone (issue 40:
#: each step tried and measured). The other entries fix defects and are never left out.
MEASURED_STEPS = frozenset({"B1", "W1", "N1", "K1"})
#: The environment variable that names them (comma-separated) for a process: read by
#: :func:`apply` so that a benchmark's node processes can run without a step. Benchmarks only.
WITHOUT_ENV = "SYNCNODE_COMPAT_WITHOUT"


def apply() -> None:
    """Check the libp2p version, then install every replacement of the table; once per process
    (later calls return at once). Raises ``P2PError`` on another version or a missing name.
    ``$SYNCNODE_COMPAT_WITHOUT`` leaves steps of :data:`MEASURED_STEPS` out (benchmarks)."""
    global _applied
    if _applied:
        return
    without = steps_left_out(os.environ.get(WITHOUT_ENV, ""))
    check_libp2p_version()
    patch_inbound_slots()  # S1
    patch_expired_peer_records()  # S2
    patch_record_verification()  # R1
    patch_record_sending()  # R2
    patch_gossip_queues()  # P6
    if "B1" not in without:
        patch_rpc_reads()  # B1
    patch_signature_check()  # V2
    patch_yamux(coalesce="W1" not in without)  # Y1, Y2, W1
    patch_yamux_end()  # Y3
    patch_yamux_window()  # Y4
    patch_root_logging()  # L1
    patch_reuse_flags()  # T2
    patch_closing_listener()  # T3
    if "N1" not in without:
        patch_noise_reads()  # N1
    if "K1" not in without:
        patch_quick_locks()  # K1
    if without:
        logging.getLogger(__name__).warning(
            "py-libp2p compat steps left out for a benchmark: %s", ", ".join(sorted(without)))
    _applied = True


def steps_left_out(value: str) -> frozenset[str]:
    """The steps named in ``value`` (``"W1,B1"``); ``ValueError`` for anything else."""
    names = frozenset(v.strip().upper() for v in value.split(",") if v.strip())
    if unknown := names - MEASURED_STEPS:
        raise ValueError(f"{WITHOUT_ENV}: {', '.join(sorted(unknown))} cannot be left out "
                         f"(only the measured steps {', '.join(sorted(MEASURED_STEPS))})")
    return names


def applied() -> bool:
    return _applied
