"""The table of every py-libp2p 0.8.1 name we patch, override or read privately.

One row per entry: ``tests/node/test_libp2p_compat.py`` checks that every ``target`` still
exists in the installed library, that every named ``test`` exists, and that docs/upstream.md
describes every entry; the scan there fails when a private libp2p name is used outside
``node/p2p/compat``. Read the rows before changing the libp2p pin.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHECKED_VERSION", "ENTRIES", "Entry"]

CHECKED_VERSION = "0.8.1"


@dataclass(frozen=True)
class Entry:
    key: str  #: the entry's id (docs/upstream.md has a section per key)
    module: str  #: the ``node.p2p.compat`` module holding it
    kind: str  #: "replaced" (setattr), "overridden" (a subclass method), "read" (private access)
    targets: tuple[str, ...]  #: the libp2p names, dotted from the module ("mod:Class.attr")
    why: str
    test: str  #: the contract test: "path::function"
    checked: str = CHECKED_VERSION


_T = "tests/node/test_libp2p_compat.py::"

ENTRIES: tuple[Entry, ...] = (
    Entry("S1", "swarm", "replaced",
          ("libp2p.network.swarm:Swarm._do_handle_inbound_connection",),
          "an inbound slot is held until the swarm stops, not until the connection closes: "
          "after 250 inbound connections in a process's life every new one is refused",
          "tests/node/test_conn_slots.py::test_every_closed_inbound_connection_gives_its_slot_back"),
    Entry("S2", "swarm", "replaced",
          ("libp2p.peer.peerstore:PeerStore.maybe_delete_peer_record",),
          "it calls addrs(), which raises PeerStoreError once the entry's TTL passed, out of "
          "clear_addrs/add_addrs: a redial 2 minutes after a connect ended the daemon",
          "tests/node/test_peerstore_expiry.py::test_redial_after_the_peerstore_entry_expired"),
    Entry("R1", "records", "replaced",
          ("libp2p.pubsub.pubsub:maybe_consume_signed_record",
           "libp2p.pubsub.gossipsub:maybe_consume_signed_record"),
          "the sender's signed peer record is verified on every RPC (7-10% of a busy node's "
          "CPU); verified once per (receiving host, peer, record bytes)",
          _T + "test_r1_record_checked_once_per_receiving_host"),
    Entry("R2", "records", "replaced",
          ("libp2p.pubsub.pubsub:env_to_send_in_RPC", "libp2p.pubsub.gossipsub:env_to_send_in_RPC"),
          "our signed record is rebuilt and marshalled for every RPC sent; kept per host for "
          "REFRESH_S of the host's clock",
          "tests/node/test_record_once.py::test_the_sent_record_is_built_once_per_refresh"),
    Entry("R3", "records", "replaced",
          ("libp2p.pubsub.pubsub:Pubsub.write_msg", "libp2p.pubsub.gossipsub:env_to_send_in_RPC"),
          "the signed record rides on every RPC sent (publish, forward, control): a few hundred "
          "bytes encrypted, sent and compared per RPC; sent once per stream and when it changes",
          "tests/node/test_gossip_receive_path.py::test_r3_the_signed_record_goes_once_per_stream"),
    Entry("V1", "validation", "replaced",
          ("libp2p.pubsub.pubsub:Pubsub.validation_cache",
           "libp2p.pubsub.pubsub:ValidationCache.put", "libp2p.pubsub.pubsub:ValidationCache.get"),
          "the cache's LRU order is a list scanned on every put (~50 µs per message at its "
          "1,000 entries); an OrderedDict per host, same bound and TTL",
          "tests/node/test_gossip_receive_path.py::"
          "test_v1_validation_cache_is_constant_time_and_bounded"),
    Entry("V2", "validation", "replaced", ("libp2p.pubsub.pubsub:signature_validator",),
          "strict signing verifies the messages this host has just signed (an Ed25519 check "
          "per publish) and rebuilds the sender's key per message",
          "tests/node/test_gossip_receive_path.py::"
          "test_v2_each_message_is_verified_once_by_its_receiver"),
    Entry("P8", "receive", "overridden",
          ("libp2p.pubsub.pubsub:Pubsub.continuously_read_stream",
           "libp2p.pubsub.pubsub:read_varint_prefixed_bytes_limited",
           "libp2p.pubsub.pubsub:Pubsub._is_subscribed_to_msg",
           "libp2p.pubsub.pubsub:GossipsubEvent"),
          "a task spawned per received message (unbounded when a peer outpaces them) and a "
          "metrics event with a base58 peer id per RPC, metrics channel or not",
          "tests/node/test_gossip_receive_path.py::"
          "test_p8_no_task_and_no_base58_work_per_received_message"),
    Entry("P1", "pubsub", "overridden", ("libp2p.pubsub.pubsub:Pubsub.stream_handler",),
          "bytes that are not an RPC protobuf raise DecodeError out of the reader and stop the "
          "network service (the node)",
          _T + "test_p1_a_malformed_rpc_costs_one_stream_not_the_host"),
    Entry("P2", "pubsub", "overridden", ("libp2p.pubsub.pubsub:Pubsub.write_msg",),
          "Yamux locks per frame, several tasks write one peer's pubsub stream: RPCs "
          "interleave when the window runs out, honest peers drop each other",
          "tests/node/test_pubsub_framing.py::"
          "test_concurrent_rpc_writes_to_one_peer_arrive_whole"),
    Entry("P3", "pubsub", "overridden",
          ("libp2p.pubsub.pubsub:Pubsub._handle_dead_peer",
           "libp2p.pubsub.pubsub:Pubsub._peer_is_connected",
           "libp2p.pubsub.pubsub:Pubsub.peer_topics",
           "libp2p.pubsub.pubsub:Pubsub._peer_subscription_count",
           "libp2p.pubsub.pubsub:Pubsub._replayed_recent_topics"),
          "a dead stream of a still-connected peer forgets its subscriptions, which it will "
          "not repeat: that peer is never sent gossip again",
          "tests/node/test_pubsub_framing.py::"
          "test_gossip_to_a_live_peer_goes_on_after_its_stream_died"),
    Entry("P4", "pubsub", "overridden", ("libp2p.pubsub.pubsub:Pubsub._handle_new_peer",
                                         "libp2p.pubsub.pubsub:Pubsub.get_hello_packet",
                                         "libp2p.pubsub.pubsub:Pubsub.topic_ids"),
          "the registration retry catches only SwarmException/StreamClosed: a reset or broken "
          "socket during the hello ends it, and the peer is never registered; a topic "
          "subscribed while the hello is written is never told to that peer",
          "tests/node/test_pubsub_framing.py::"
          "test_a_pubsub_hello_cut_by_a_dying_connection_does_not_stop_the_host"),
    Entry("P5", "pubsub", "overridden", ("libp2p.pubsub.pubsub:Pubsub.counter",),
          "the seqno counter starts at int(time.time()): a restart after a burst reuses "
          "message ids peers still hold as seen",
          "tests/node/test_gossip_seqno.py::test_a_restarted_sender_never_reuses_a_seqno"),
    Entry("P6", "pubsub", "replaced",
          ("libp2p.pubsub.pubsub:RpcQueue", "libp2p.pubsub.pubsub:SUBSCRIPTION_CHANNEL_SIZE"),
          "32-RPC per-peer queues and 32-slot subscription channels drop silently; sized per "
          "host (gossip_peer_queue_size)",
          _T + "test_p6_two_hosts_keep_their_own_peer_queue_size"),
    Entry("P7", "pubsub", "read", ("libp2p.pubsub.pubsub:Pubsub._is_msg_seen",
                                   "libp2p.pubsub.pubsub:Pubsub.push_msg"),
          "not a defect: counts every copy received and the duplicates (the mesh degree's cost)",
          "tests/node/test_gossip_degree.py::"
          "test_every_copy_read_is_counted_and_every_message_delivered_once"),
    Entry("B1", "rpc_reads", "replaced",
          ("libp2p.pubsub.pubsub:read_varint_prefixed_bytes_limited",
           "libp2p.pubsub.pubsub:Pubsub.continuously_read_stream"),
          "each RPC's varint length is read one stream.read(1) per byte, then the body: three "
          "or four reads (each three locks) per RPC; read in chunks into a per-stream buffer",
          _T + "test_b1_pubsub_reads_rpcs_in_chunks_not_bytes"),
    Entry("G1", "pubsub", "replaced",
          ("libp2p.pubsub.gossipsub:GossipSub.recent_message_deliveries",
           "libp2p.pubsub.gossipsub:GossipSub.adaptive_gossip_enabled"),
          "every message's time is appended to a list only adaptive gossip's health check "
          "prunes: with adaptive gossip off it grows for the process's life",
          "tests/node/test_gossip_receive_path.py::test_g1_no_list_grows_with_every_message"),
    Entry("G2", "router", "replaced",
          ("libp2p.pubsub.score:PeerScorer.allow_publish",
           "libp2p.pubsub.score:PeerScorer.allow_gossip",
           "libp2p.pubsub.score:PeerScorer.is_graylisted",
           "libp2p.pubsub.score:PeerScorer.params"),
          "every message computes each peer's score about seven times to compare it with "
          "thresholds of -inf, which admit every score; answered without it (per scorer)",
          "tests/node/test_gossip_send_path.py::"
          "test_g2_no_score_is_computed_for_gates_that_admit_every_score"),
    Entry("G3", "router", "replaced",
          ("libp2p.pubsub.gossipsub:GossipSub.send_rpc",
           "libp2p.pubsub.gossipsub:GossipSub._pending_control",
           "libp2p.pubsub.gossipsub:GossipSub._handle_dropped_rpc",
           "libp2p.pubsub.rpc_queue:RpcQueue.split_rpc",
           "libp2p.pubsub.rpc_queue:RpcQueue.max_message_size"),
          "each RPC sent is split to the queue's limit, four or more serializations of a "
          "message that fits; a fitting publish-only RPC is queued unsplit (per router)",
          "tests/node/test_gossip_send_path.py::"
          "test_g3_publish_rpcs_are_queued_unsplit_and_others_still_split"),
    Entry("G4", "router", "replaced",
          ("libp2p.pubsub.gossipsub:GossipSub._emit_idontwant_for_message",
           "libp2p.pubsub.gossipsub:GossipSub._notify_observers",
           "libp2p.pubsub.gossipsub:GossipSub.protocols"),
          "IDONTWANT and topic-observer peer scans per message on a router offering no v1.2+ "
          "protocol, where both find no peer; skipped while it offers none (per router)",
          "tests/node/test_gossip_send_path.py::test_g4_no_idontwant_or_observer_work_without_v12"),
    Entry("G6", "idontwant", "replaced",
          ("libp2p.pubsub.gossipsub:GossipSub._emit_idontwant_for_message",
           "libp2p.pubsub.gossipsub:GossipSub.send_rpc",
           "libp2p.pubsub.gossipsub:GossipSub.max_idontwant_messages",
           "libp2p.pubsub.gossipsub:GossipSub.dont_send_message_ids",
           "libp2p.pubsub.gossipsub:GossipSub.peer_protocol",
           "libp2p.pubsub.gossipsub:GossipSub._pending_control",
           "libp2p.pubsub.rpc_queue:RpcQueue._queue",
           "libp2p.pubsub.rpc_queue:RpcQueue.max_message_size",
           "libp2p.pubsub.rpc_queue:PriorityQueue._priority",
           "libp2p.pubsub.rpc_queue:PriorityQueue._non_priority",
           "libp2p.pubsub.pubsub:Pubsub.push_msg",
           "libp2p.pubsub.pubsub:Pubsub._is_msg_seen"),
          "IDONTWANT is sent after validation, in a control RPC of its own per v1.2 mesh peer "
          "(the sender included): it arrives with the copies it should stop and doubles the "
          "CPU per message; opt-in, sent on receipt before validation on the next queued RPC "
          "(per router, gossip_idontwant)",
          "tests/node/test_gossip_idontwant.py::"
          "test_g6_idontwant_goes_before_validation_and_rides_with_the_forward"),
    Entry("G5", "equivocation", "replaced",
          ("libp2p.pubsub.gossipsub:GossipSub.equivocation_detection",
           "libp2p.pubsub.gossipsub:GossipSub._check_equivocation",
           "libp2p.pubsub.gossipsub:GossipSub._periodic_security_cleanup"),
          "the first message of every id is kept (up to 1,000, with the received RPC frame "
          "its upb arena holds) only to compare data and topics: tens of MiB under load, "
          "~1 GB of 1 MB frames",
          "tests/node/test_gossip_receive_path.py::"
          "test_g5_equivocation_check_keeps_no_message"),
    Entry("Y1", "yamux", "replaced",
          ("libp2p.stream_muxer.yamux.yamux:YamuxStream._auto_tune_and_send_window_update",
           "libp2p.stream_muxer.yamux.yamux:YamuxStream._grow_to_delta",
           "libp2p.stream_muxer.yamux.yamux:YamuxStream._apply_autotune_epoch",
           "libp2p.stream_muxer.yamux.yamux:YamuxStream._pending_recv_release"),
          "a WINDOW_UPDATE frame (a Noise message, a socket send) after every read; go-yamux "
          "sends one once half the window is consumed",
          "tests/node/test_yamux_tuning.py::"
          "test_small_messages_cost_no_window_update_each_and_bulk_still_flows"),
    Entry("Y2", "yamux", "replaced",
          ("libp2p.stream_muxer.yamux.yamux:Yamux._write_frame",
           "libp2p.stream_muxer.yamux.yamux:Yamux._write_lock"),
          "each frame's header is unpacked and a debug f-string built before every write, "
          "debug logging on or off",
          _T + "test_y2_frames_are_written_whole_without_debug_text"),
    Entry("W1", "yamux", "replaced",
          ("libp2p.stream_muxer.yamux.yamux:Yamux._write_frame",
           "libp2p.stream_muxer.yamux.yamux:Yamux._write_lock",
           "libp2p.stream_muxer.yamux.yamux:Yamux.secured_conn"),
          "every frame is its own Noise message and socket send, also when other writers "
          "wait for the connection; the lock holder sends the frames queued behind it as one",
          _T + "test_w1_frames_written_together_share_one_socket_write"),
    Entry("K1", "locks", "replaced",
          ("libp2p.io.trio:TrioTCPStream.read_lock", "libp2p.io.trio:TrioTCPStream.write_lock",
           "libp2p.stream_muxer.yamux.yamux:Yamux.streams_lock",
           "libp2p.stream_muxer.yamux.yamux:Yamux._write_lock",
           "libp2p.stream_muxer.yamux.yamux:YamuxStream.window_lock"),
          "a free trio.Lock still yields to the scheduler: ~9 locks per message, each a "
          "scheduler pass; these five (each followed by a checkpoint of its own) do not yield "
          "when free",
          _T + "test_k1_a_connections_free_locks_are_taken_without_a_yield"),
    Entry("Y3", "yamux_end", "replaced",
          ("libp2p.stream_muxer.yamux.yamux:Yamux._cleanup_on_error",
           "libp2p.stream_muxer.yamux.yamux:Yamux.close",
           "libp2p.stream_muxer.yamux.yamux:Yamux.stream_buffers",
           "libp2p.stream_muxer.yamux.yamux:Yamux.streams",
           "libp2p.stream_muxer.yamux.yamux:Yamux.event_shutting_down",
           "libp2p.stream_muxer.yamux.yamux:YamuxStream.read",
           "libp2p.stream_muxer.yamux.yamux:YamuxStream.recv_closed",
           "libp2p.stream_muxer.yamux.yamux:YamuxStream.reset_received",
           "libp2p.network.stream.net_stream:NetStream.reset",
           "libp2p.network.connection.swarm_connection:SwarmConn._cleanup"),
          "when the connection ends (the peer's GO_AWAY or close) every stream's unread "
          "received bytes are dropped and the stream reset: a peer's last frame before it "
          "left is lost; a stream its peer closed keeps them, then EOF (go-yamux's rule)",
          "tests/node/test_yamux_end.py::"
          "test_frames_written_before_the_peer_left_are_read_after_it_left"),
    Entry("Y4", "yamux_window", "replaced",
          ("libp2p.stream_muxer.yamux.yamux:Yamux._read_data_body",
           "libp2p.stream_muxer.yamux.yamux:read_exactly",
           "libp2p.stream_muxer.yamux.yamux:Yamux.handle_incoming",
           "libp2p.stream_muxer.yamux.yamux:YamuxStream.recv_window",
           "libp2p.stream_muxer.yamux.yamux:DEFAULT_WINDOW_SIZE"),
          "a DATA frame beyond the stream's receive window is buffered with a warning: a peer "
          "ignoring flow control makes us hold any amount on a stream we do not read (8 MiB "
          "past a 256 KiB window); the frame is refused unread and the session ended with a "
          "GO_AWAY (protocol error), as go-yamux does",
          "tests/node/test_yamux_window.py::"
          "test_y4_every_data_frame_body_is_read_through_the_checked_method"),
    Entry("N1", "noise", "replaced",
          ("libp2p.security.noise.io:NoiseTransportReadWriter.read_msg",
           "libp2p.security.noise.io:NoiseTransportReadWriter.decrypt",
           "libp2p.security.noise.io:SIZE_NOISE_MESSAGE_LEN"),
          "each Noise message is read with two exact socket reads (length, then body): two "
          "recv calls, locks and scheduler passes per message; cut from 64 KiB reads instead",
          _T + "test_n1_noise_messages_are_cut_from_buffered_socket_reads"),
    Entry("L1", "logs", "replaced", ("libp2p.network.connection.swarm_connection:logging",),
          "that module logs on the root logger: logging.basicConfig() runs on its first "
          "record, installing a stderr handler and voiding the daemon's logging setup",
          _T + "test_l1_libp2p_never_configures_the_root_logger"),
    Entry("T1", "sockets", "read",
          ("libp2p.stream_muxer.yamux.yamux:Yamux.secured_conn",
           "libp2p.security.secure_session:SecureSession.conn",
           "libp2p.security.noise.io:BaseNoiseMsgReadWriter.read_writer",
           "libp2p.io.msgio:BaseMsgReadWriter.read_write_closer",
           "libp2p.network.connection.raw_connection:RawConnection.stream",
           "libp2p.io.trio:TrioTCPStream.stream"),
          "a polite close writes GO_AWAY and resets first: over a dead link they block forever "
          "and the peer stays connected; we shut the TCP socket down first",
          "tests/node/test_p2p.py::test_drop_closes_a_connection_whose_writes_block"),
    Entry("T2", "sockets", "replaced", ("libp2p.transport.tcp.tcp:_set_reuse_flags",),
          "SO_REUSEPORT on every listener: a second node binds a busy port and the kernel "
          "splits connections; set per host (only hosts that punch holes share their port)",
          _T + "test_t2_two_hosts_keep_their_own_reuse_flags"),
    Entry("T3", "sockets", "replaced", ("libp2p.transport.tcp.tcp:TCPListener.get_addrs",),
          "a closing listener closes its sockets before it forgets them: an identify answered "
          "meanwhile raised EBADF out of getsockname and ended the host's nursery at shutdown",
          _T + "test_t3_a_closing_listener_has_no_addresses_rather_than_an_error"),
    Entry("C1", "relay", "overridden",
          ("libp2p.relay.circuit_v2.protocol:CircuitV2Protocol._read_stream_with_retry",
           "libp2p.relay.circuit_v2.protocol:CircuitV2Protocol.limits"),
          "a circuit's duration and bytes are enforced but not the rate the config names: "
          "each forwarded read is paced",
          "tests/node/test_relay_layer.py::"
          "test_relayed_connection_carries_streams_at_the_promised_rate"),
    Entry("C2", "relay", "overridden",
          ("libp2p.relay.circuit_v2.protocol:CircuitV2Protocol._relay_data",
           "libp2p.relay.circuit_v2.protocol:CircuitV2Protocol._active_relays",
           "libp2p.relay.circuit_v2.protocol:CircuitV2Protocol._close_stream"),
          "circuit streams are filed under each end's peer id: the end of one circuit closed "
          "the newest other circuit to or from the same peer",
          "tests/node/test_relay_layer.py::"
          "test_one_circuit_ending_leaves_another_circuit_to_the_same_peer_open"),
    Entry("C3", "relay", "overridden",
          ("libp2p.relay.circuit_v2.protocol:CircuitV2Protocol._handle_reserve",
           "libp2p.relay.circuit_v2.protocol:CircuitV2Protocol._handle_connect",
           "libp2p.relay.circuit_v2.protocol:CircuitV2Protocol._send_status",
           "libp2p.relay.circuit_v2.resources:RelayResourceManager._reservations"),
          "not a defect: no hook to admit a reservation or circuit per source network "
          "(identities are free: one machine took 32 of 34 reservations)",
          "tests/node/test_hostile_reach.py::test_a_source_network_gets_only_its_share_of_circuits"),
    Entry("C4", "relay", "read",
          ("libp2p.relay.circuit_v2.protocol:CircuitV2Protocol._handle_hop_stream",),
          "the HOP handler is registered by the protocol for its life; we register it only "
          "while serving as a relay (PacedRelay.serve_hop)",
          "tests/node/test_relay_layer.py::"
          "test_relayed_connection_carries_streams_at_the_promised_rate"),
    Entry("D1", "relay", "overridden",
          ("libp2p.relay.circuit_v2.dcutr:DCUtRProtocol._auto_drive_loop",),
          "the auto-drive loop starts punches from both ends of a relayed connection, and "
          "crossing punches fail: we drive punches from one side",
          _T + "test_d1_d6_the_dcutr_names_we_drive_are_still_used_by_the_library"),
    Entry("D2", "relay", "overridden",
          ("libp2p.relay.circuit_v2.dcutr:DCUtRProtocol._try_unilateral_upgrade",),
          "before each exchange every peerstore address is dialled for up to the dial "
          "timeout, including stale NAT addresses: each re-punch hung 10 s",
          "tests/node/test_relay_layer.py::"
          "test_a_punch_dials_no_peerstore_address_before_the_exchange"),
    Entry("D3", "relay", "overridden",
          ("libp2p.relay.circuit_v2.dcutr:DCUtRProtocol._have_direct_connection",
           "libp2p.relay.circuit_v2.dcutr:DCUtRProtocol._verify_direct_connection"),
          "the answering side trusts its cache of punched peers, stale after a direct "
          "connection closed without notification: every later punch refused",
          "tests/node/test_relay_layer.py::"
          "test_a_stale_direct_entry_on_the_answering_side_does_not_refuse_a_punch"),
    Entry("D4", "relay", "overridden",
          ("libp2p.relay.circuit_v2.dcutr:DCUtRProtocol._get_observed_addrs",),
          "the addresses offered to the other side: only LAN observations after an outage, "
          "or a wildcard listen address (the peer dials itself)",
          "tests/node/test_relay_layer.py::"
          "test_a_wildcard_listener_tells_a_punch_no_wildcard_address"),
    Entry("D5", "relay", "overridden", ("libp2p.relay.circuit_v2.dcutr:DCUtRProtocol._dial_peer",),
          "every punch dial goes to whatever address the peer names (our loopback, our LAN): "
          "checked against the peer's scope first",
          "tests/node/test_scope_guard.py::"
          "test_a_remote_peer_cannot_aim_punches_observations_or_gossip_px_inward"),
    Entry("D6", "relay", "read",
          ("libp2p.relay.circuit_v2.dcutr:DCUtRProtocol._direct_connections",
           "libp2p.relay.circuit_v2.dcutr:DCUtRProtocol._hole_punch_attempts"),
          "a stale 'directly connected' entry makes our punch 'succeed' at once; attempts "
          "stop at 5 per peer for the process's life: both reset before/after our punches",
          _T + "test_d1_d6_the_dcutr_names_we_drive_are_still_used_by_the_library"),
    Entry("D7", "relay", "overridden",
          ("libp2p.relay.circuit_v2.dcutr:DCUtRProtocol._perform_hole_punch",
           "libp2p.relay.circuit_v2.dcutr:DCUtRProtocol._dial_peer",
           "libp2p.relay.circuit_v2.dcutr:DCUtRProtocol._verify_direct_connection"),
          "each punch dial ends with its round (5 s) and the next round dials again 2 s later: "
          "the other side's SYN arriving in between reaches our listener through the NAT, "
          "whose answer the NAT drops, and the pair stays relayed; one dial per address now "
          "lasts the whole attempt",
          "tests/node/test_relay_layer.py::test_a_punch_dial_lasts_the_whole_attempt"),
    Entry("A1", "scope", "replaced",
          ("libp2p.host.basic_host:BasicHost._observed_addr_manager",
           "libp2p.host.observed_addr_manager:ObservedAddrManager.record_observation"),
          "identify's observed address is recorded whoever says it (an outsider names our "
          "private address): filtered per host by the observer's scope",
          "tests/node/test_scope_guard.py::"
          "test_a_remote_peer_cannot_aim_punches_observations_or_gossip_px_inward"),
    Entry("A2", "scope", "replaced", ("libp2p.pubsub.gossipsub:GossipSub._do_px",),
          "peer exchange in a PRUNE dials every address listed, whoever sent it: ignored and "
          "counted per router",
          "tests/node/test_scope_guard.py::"
          "test_a_remote_peer_cannot_aim_punches_observations_or_gossip_px_inward"),
)
