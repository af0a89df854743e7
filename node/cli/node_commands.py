"""Client commands about the node itself: status, id, join, peers; publish and log
(``node.cli.events``) are registered here too.

Stdlib and ``node.cli.common`` only: these are the commands people script in loops.
"""

from __future__ import annotations

import argparse
import time
from typing import Any
from urllib.parse import quote

from node.cli.common import (
    EXIT_USAGE,
    CliError,
    add_client_options,
    client_for,
    config_from,
    lazy_command,
    print_json,
)
from node.cli.events import cmd_log, cmd_publish
from node.cli.human import human_duration, human_size, iso_s

__all__ = ["register"]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value

# -- status and id -----------------------------------------------------------------------------


def _cmd_status(args: argparse.Namespace) -> int:
    status = _wait_synced(args) if args.wait_synced else client_for(args).get("/v1/status")
    if args.json:
        print_json(status)
        return 0
    rows = status_rows(status)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


# A wait asks the node for at most this long at a time (then asks again, until --timeout).
_WAIT_STEP_S = 60


def _wait_synced(args: argparse.Namespace) -> dict[str, Any]:
    """``/v1/status`` once the node is in sync with its peers (``?wait_synced``); a
    ``CliError`` naming what it is still waiting for after ``--timeout``."""
    if args.timeout <= 0:
        raise CliError("--timeout must be > 0", code=EXIT_USAGE)
    client = client_for(args)
    deadline = time.monotonic() + args.timeout
    while True:
        step = max(1, min(_WAIT_STEP_S, round(deadline - time.monotonic())))
        status: dict[str, Any] = client.get("/v1/status", params={"wait_synced": step},
                                            timeout=step + client.timeout)
        sync = status.get("sync") or {}
        if sync.get("state") == "in_sync":
            return status
        if time.monotonic() >= deadline:
            raise CliError(f"not in sync after {args.timeout:g} s: "
                           f"{sync.get('text', 'the node reports no sync status')}")


def status_rows(status: dict[str, Any]) -> list[tuple[str, str]]:
    """``/v1/status`` for people: durations, sizes and times in human form, the raw numbers
    stay in ``--json``."""
    status = dict(status)
    rows: list[tuple[str, str]] = []
    database = str(status.pop("database", "?"))
    size = status.pop("database_bytes", None)
    snapshots = status.pop("snapshot_bytes", None)
    for key, value in status.items():
        if key == "sync":
            rows += sync_rows(value)
        elif key == "uptime_s":
            since = iso_s(time.time() - float(value))
            rows.append(("uptime", f"{human_duration(float(value))} (since {since})"))
        elif key == "events":
            rows.append(("events", f"{value:,}"))
        elif isinstance(value, list):
            rows.append((key.replace("_", " "), ", ".join(map(str, value))))
        elif isinstance(value, dict):  # e.g. "network": reachability, relays, hole punches
            rows.append((key, ", ".join(_named(k, v) for k, v in value.items())))
        else:
            rows.append((key.replace("_", " "), str(value)))
        if key == "network_id":  # the database right after the network
            rows.append(("database", database + (f" ({human_size(size)})" if size is not None
                                                  else "")))
    rows.append(("snapshots", human_size(snapshots) if snapshots is not None else "none"))
    return rows


def sync_rows(sync: dict[str, Any]) -> list[tuple[str, str]]:
    """``sync  behind ~N events, catching up at R/s (about 12 s left)``, then one row per
    peer reconciled with."""
    text = str(sync.get("text", "unknown"))
    if sync.get("eta_s") is not None:
        text += f" (about {human_duration(float(sync['eta_s']))} left)"
    rows = [("sync", text)]
    for peer, state in sorted(sync.get("peers", {}).items()):
        rows.append((f"  {peer[-12:]}", f"{peer_sync(state)}, reconciled "
                                        f"{human_duration(state['reconciled_ago_s'])} ago"))
    return rows


def peer_sync(state: dict[str, Any] | None) -> str:
    """``in sync``, ``behind ~N`` or ``sync unknown`` (not reconciled with yet)."""
    if state is None:
        return "sync unknown"
    return "in sync" if not state["behind"] else f"behind ~{state['behind']}"


def _flat(value: object) -> str:
    """A nested status value in words: ``relay serving no``, ``punch ok 2 / failed 0``,
    ``relayed 1.5 KiB`` (never Python's ``False`` or ``{...}``)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return " / ".join(_named(k, v) for k, v in value.items())
    if isinstance(value, list):
        return str(len(value))
    return "-" if value is None else str(value)


def _named(key: str, value: object) -> str:
    if key.endswith("_bytes") and isinstance(value, int | float) and not isinstance(value, bool):
        return f"{key.removesuffix('_bytes').replace('_', ' ')} {human_size(value)}"
    return f"{key.replace('_', ' ')} {_flat(value)}"


def _cmd_id(args: argparse.Namespace) -> int:
    if args.offline:
        peer_id, addrs = _offline_id(args.data_dir or config_from(args).node.data_dir), []
    else:
        status = client_for(args).get("/v1/status")
        peer_id, addrs = status["peer_id"], status.get("listen_addrs", [])
    if args.json:
        print_json({"peer_id": peer_id, "addresses": addrs})
        return 0
    print(peer_id)
    for addr in addrs:
        print(addr)
    return 0


def _offline_id(data_dir: str) -> str:
    from pathlib import Path

    from node.p2p.identity import KEY_FILE, load_identity
    from sync.identity import peer_id_of

    path = Path(data_dir).expanduser() / KEY_FILE
    if not path.is_file():
        raise CliError(f"no identity in {data_dir} ({path} missing): a node creates it on "
                       "its first `syncnode run`")
    try:
        return peer_id_of(load_identity(path))
    except (OSError, ValueError) as exc:
        raise CliError(f"{path}: unreadable identity key ({exc})") from None


# -- peers -------------------------------------------------------------------------------------


def _cmd_join(args: argparse.Namespace) -> int:
    from node.config.checks import multiaddr_problem

    if problem := multiaddr_problem(args.multiaddr, need_peer=True, allow_dns=True):
        raise CliError(problem, code=EXIT_USAGE)
    answer = client_for(args).post("/v1/peers", json={"multiaddr": args.multiaddr})
    print(f"joined {answer['peer_id']}")
    return 0


def _cmd_peers(args: argparse.Namespace) -> int:
    answer = client_for(args).get("/v1/peers")
    if args.json:
        print_json(answer)
        return 0
    for line in peer_lines(answer, time.time()):
        print(line)
    return 0


PEER_HEADER = ("PEER ID", "DIRECTION", "PATH", "RTT", "LAST RECON", "CONNECTED", "ADDRESS")


def _ago(seconds: float) -> str:
    return f"{human_duration(max(seconds, 0.0))} ago"


def _rtt(peer: dict[str, Any]) -> str:
    return f"{peer['rtt_ms']:.1f} ms" if peer.get("rtt_ms") is not None else "-"


def _last_recon(peer: dict[str, Any], now: float) -> str:
    last = peer.get("last_recon")
    if not last:
        return "-"
    return f"{_ago(now - last['at'])} {last['outcome']} +{last['fetched']}/-{last['served']}"


def peer_lines(answer: dict[str, Any], now: float) -> list[str]:
    """``/v1/peers`` as a table under a header, every age in the same form (``3.0 s ago``,
    ``2 min 05 s ago``), then the address book's size."""
    # A SYNC column when the node reports how far behind each peer it is (every node that
    # runs Recon does).
    sync = any("sync" in p for p in answer["connected"])
    header = (*PEER_HEADER[:-1], "SYNC", PEER_HEADER[-1]) if sync else PEER_HEADER
    rows = [(p["peer_id"], p["direction"], p.get("path", "direct"), _rtt(p), _last_recon(p, now),
             _ago(now - p["connected_since"]) if p.get("connected_since") else "-",
             *((peer_sync(p.get("sync")),) if sync else ()),
             p["address"] or "-") for p in answer["connected"]]
    connected = {p["peer_id"] for p in answer["connected"]}
    rows += [(peer_id, "-", "offline", "-", "-", "-", *(("-",) if sync else ()),
              "(known, redialling)")
             for peer_id in answer["known"] if peer_id not in connected]
    lines = ["no peers"]
    if rows:
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                 .rstrip() for row in (header, *rows)]
    if "address_book" in answer:
        lines.append(f"address book: {answer['address_book']} peers")
    return lines


def peer_summary(peer: dict[str, Any]) -> str:
    """``direct   rtt 1.2 ms  recon 3.0 s ago ok +5/-0``: path, round trip, last Recon
    session (``status --watch``'s peer lines)."""
    text = f"{peer.get('path', 'direct'):<7}  rtt {_rtt(peer):>9}"
    if peer.get("last_recon"):
        text += f"  recon {_last_recon(peer, time.time())}"
    if "sync" in peer:
        text += f"  {peer_sync(peer['sync'])}"
    return text


def _cmd_forget(args: argparse.Namespace) -> int:
    from node.config.checks import peer_id_problem

    if problem := peer_id_problem(args.peer_id):
        raise CliError(problem, code=EXIT_USAGE)
    client_for(args).delete(f"/v1/peers/{quote(args.peer_id, safe='')}")
    print(f"forgot {args.peer_id}: no more redials; it may still connect to us")
    return 0


# -- parser ------------------------------------------------------------------------------------


def register(sub: Any) -> None:
    status = sub.add_parser("status", help="show a running node's status")
    add_client_options(status)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument("--watch", action="store_true",
                        help="redraw rates (events in/out, Recon sessions, peers, lag) like top")
    status.add_argument("--interval", type=float, default=None, metavar="S",
                        help="--watch refresh interval in seconds (default 2)")
    status.add_argument("--count", type=int, metavar="N",
                        help="--watch: stop after N refreshes (default: until Ctrl-C)")
    status.add_argument("--wait-synced", action="store_true",
                        help="wait until the node is in sync with its peers, then print the "
                             "status (exit 1 with what it still lacks after --timeout)")
    status.add_argument("--timeout", type=float, default=300.0, metavar="S",
                        help="--wait-synced: give up after S seconds (default 300)")
    status.set_defaults(func=_dispatch_status)

    id_cmd = sub.add_parser("id", help="print the node's peer id and full listen multiaddrs")
    add_client_options(id_cmd)
    id_cmd.add_argument("--offline", action="store_true",
                        help="read the identity key from the data dir (--data-dir, or "
                             "node.data_dir of --config) instead of asking the running node")
    id_cmd.add_argument("--json", action="store_true", help="print JSON")
    id_cmd.set_defaults(func=_cmd_id)

    join = sub.add_parser("join", help="dial a peer at an address, check its peer id, "
                                       "and remember the address")
    join.add_argument("multiaddr", metavar="MULTIADDR",
                      help="/ip4|ip6|dns4|dns6/HOST/tcp/PORT/p2p/PEER_ID")
    add_client_options(join)
    join.set_defaults(func=_cmd_join)

    peers = sub.add_parser("peers", help="list connected and known peers; `peers forget`")
    add_client_options(peers)
    peers.add_argument("--json", action="store_true", help="print JSON")
    peers.set_defaults(func=_cmd_peers)
    peers_sub = peers.add_subparsers(dest="peers_command", metavar="ACTION")
    forget = peers_sub.add_parser("forget", help="stop redialling a known peer, drop its "
                                                 "stored address and disconnect it")
    forget.add_argument("peer_id", metavar="PEER_ID")
    add_client_options(forget)
    forget.set_defaults(func=_cmd_forget)

    publish = sub.add_parser("publish", help="publish an event (or one per line of --lines); "
                                             "prints the message ids")
    publish.add_argument("channel", metavar="CHANNEL")
    publish.add_argument("message", metavar="MESSAGE", nargs="?",
                         help="the content, or - to read it from stdin (one trailing newline is "
                              "stripped; bytes that are not UTF-8 are sent as binary)")
    publish.add_argument("--lines", metavar="FILE",
                         help="publish one event per line of FILE (- for stdin), in batch "
                              "requests; every line is checked before any is sent")
    publish.add_argument("--batch", metavar="N", type=_positive, default=1000,
                         help="events per batch request with --lines (default 1000; at most "
                              "the node's api.publish_batch_max_events)")
    add_client_options(publish)
    publish.set_defaults(func=cmd_publish)

    log_cmd = sub.add_parser("log", help="print a channel's events in log order")
    log_cmd.add_argument("channel", metavar="CHANNEL")
    log_cmd.add_argument("--json", action="store_true",
                         help="one JSON object per line: message_id, sender, lamport, content "
                         "(null if not UTF-8, with content_b64 holding the bytes)")
    log_cmd.add_argument("--limit", type=int, metavar="N", help="only the newest N events")
    log_cmd.add_argument("--since", metavar="WHEN",
                         help="only events from WHEN on: 10m, 2h, 1d, an ISO time or epoch ms")
    log_cmd.add_argument("--follow", action="store_true", help="keep printing new events")
    add_client_options(log_cmd)
    log_cmd.set_defaults(func=cmd_log)


_watch = lazy_command("node.cli.watch", "watch_status")


def _dispatch_status(args: argparse.Namespace) -> int:
    if not args.watch and (args.count is not None or args.interval is not None):
        # Silently showing one status for `--count 3` would look like a hang-free success.
        flag = "--count" if args.count is not None else "--interval"
        raise CliError(f"{flag} needs --watch (status --watch {flag} ...)", code=EXIT_USAGE)
    if args.watch and args.wait_synced:
        raise CliError("--wait-synced and --watch do not go together", code=EXIT_USAGE)
    if args.interval is None:
        args.interval = 2.0
    return _watch(args) if args.watch else _cmd_status(args)
