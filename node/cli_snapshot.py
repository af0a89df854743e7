"""``syncnode snapshot rebuild|status|pull`` and ``syncnode bootstrap --from-snapshot DIR``.

``rebuild`` and ``status`` talk to a running node's API; ``bootstrap`` and ``pull`` work on the
node's database directly (the node must not be running: the database is loaded in bulk).
``register(subparsers)`` adds the commands to the ``syncnode`` parser.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from node.cli_common import CliError, add_client_options, client_for, config_from

__all__ = ["progress_bar", "register"]

_BAR = 30


def progress_bar(progress: dict[str, Any] | None, width: int = _BAR) -> str:
    """``[#########.............]  45%  snapshot:write 9/20`` (or ``idle``)."""
    if not progress:
        return "idle"
    fraction = float(progress.get("fraction") or 0.0)
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    bar = "#" * filled + "." * (width - filled)
    return (f"[{bar}] {fraction * 100:3.0f}%  {progress.get('phase', '?')} "
            f"{progress.get('done', 0)}/{progress.get('total', 0)}")


def _describe_last(last: dict[str, Any] | None) -> str:
    if not last:
        return "last run: none yet"
    verdict = "ok" if last["ok"] else "FAILED"
    parts = [f"last run: {verdict} ({last.get('reason')}, {last.get('seconds')} s)"]
    for job in last.get("jobs", []):
        line = f"  {job['job']}: exit {job.get('exit_code')}"
        if job.get("result"):
            line += f"  {json.dumps(job['result'], sort_keys=True)}"
        if job.get("error"):
            line += f"  error: {job['error']}"
        parts.append(line)
        parts.extend(f"    {s}" for s in job.get("stderr", [])[-5:])
    return "\n".join(parts)


def _show(status: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return
    print(f"state: {'running' if status['running'] else 'idle'}  "
          f"runs: {status['runs']}  failures: {status['failures']}")
    if status["running"]:
        print(progress_bar(status.get("progress")))
    print(_describe_last(status.get("last")))


def _watch(client: Any, poll_s: float = 1.0) -> dict[str, Any]:
    """Redraw the progress bar until the run finishes; returns the final status."""
    tty = sys.stdout.isatty()
    status: dict[str, Any] = client.get("/v1/snapshots/status")
    while status["running"]:
        line = progress_bar(status.get("progress"))
        print(("\r" + line.ljust(72)) if tty else line, end="" if tty else "\n", flush=True)
        time.sleep(poll_s)
        status = client.get("/v1/snapshots/status")
    if tty:
        print()
    return status


def _cmd_rebuild(args: argparse.Namespace) -> int:

    client = client_for(args)
    answer = client.post("/v1/snapshots")
    print("rebuild queued after the current run" if answer.get("queued_after_current")
          else "rebuild started")
    if not args.wait:
        return 0
    time.sleep(0.5)
    status = _watch(client)
    print(_describe_last(status.get("last")))
    return 0 if status.get("last") and status["last"]["ok"] else 1


def _cmd_status(args: argparse.Namespace) -> int:

    client = client_for(args)
    status = _watch(client) if args.watch else client.get("/v1/snapshots/status")
    _show(status, args.json)
    return 0


def _open_database(args: argparse.Namespace) -> tuple[Any, int, str, dict[str, str]]:
    from storage import make_engine, upgrade

    overrides = {"node.data_dir": args.data_dir} if args.data_dir else {}
    config = config_from(args, overrides)
    engine = make_engine(config.database_url, sqlite_synchronous=config.storage.sqlite_synchronous)
    if config.database_url.startswith("sqlite"):
        config.data_path.mkdir(parents=True, exist_ok=True)
    upgrade(engine)
    from node.services import channel_profiles

    return engine, config.node.network_id, config.recon.event_id_layout, channel_profiles(config)


def _cmd_bootstrap(args: argparse.Namespace) -> int:
    from node.bootstrap import BootstrapError, bootstrap

    engine, network_id, layout, profiles = _open_database(args)
    try:
        result = bootstrap(engine, Path(args.from_snapshot), network_id, layout, profiles)
    except BootstrapError as exc:
        raise CliError(str(exc)) from None
    finally:
        engine.dispose()
    print(f"loaded {result.events} events from {result.files} record files "
          f"in {result.seconds} s; chain ends at {result.running_hash[:16]}...")
    print("start the node (`syncnode run`): Recon fetches everything newer than the snapshot")
    return 0


def _cmd_pull(args: argparse.Namespace) -> int:
    from node.bootstrap import BootstrapError, pull

    engine, network_id, layout, profiles = _open_database(args)
    try:
        result = pull(engine, Path(args.directory), network_id, layout, profiles)
    except BootstrapError as exc:
        raise CliError(str(exc)) from None
    finally:
        engine.dispose()
    print(f"fetched {result.fetched} events from {len(result.files_read)} record files; "
          f"{result.nodes_read} tree nodes read, {result.subtrees_skipped} subtrees already equal")
    return 0


def _add_local_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", metavar="DIR", help="override node.data_dir")
    parser.add_argument("--config", metavar="FILE", help="TOML config (database, network id)")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``snapshot`` and ``bootstrap`` to a ``syncnode`` parser."""

    snap = subparsers.add_parser("snapshot", help="snapshot builds (record stream files)")
    sub = snap.add_subparsers(dest="snapshot_command", required=True, metavar="ACTION")

    rebuild = sub.add_parser("rebuild", help="start a snapshot build on the running node")
    rebuild.add_argument("--wait", action="store_true", help="show progress until it finishes")
    add_client_options(rebuild)
    rebuild.set_defaults(func=_cmd_rebuild)

    status = sub.add_parser("status", help="progress of the running build and the last result")
    status.add_argument("--watch", action="store_true", help="progress bar until idle")
    status.add_argument("--json", action="store_true", help="print JSON")
    add_client_options(status)
    status.set_defaults(func=_cmd_status)

    pull_cmd = sub.add_parser(
        "pull", help="sync the (stopped) node's log against a snapshot directory's range tree")
    pull_cmd.add_argument("directory", metavar="DIR")
    _add_local_options(pull_cmd)
    pull_cmd.set_defaults(func=_cmd_pull)

    boot = subparsers.add_parser(
        "bootstrap", help="verify a snapshot and load it into an empty node database")
    boot.add_argument("--from-snapshot", metavar="DIR", required=True)
    _add_local_options(boot)
    boot.set_defaults(func=_cmd_bootstrap)


def main(argv: list[str] | None = None) -> int:
    """``python -m node.cli_snapshot ...``: these commands on their own, until cli.py has them."""

    parser = argparse.ArgumentParser(prog="syncnode")
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    return code


if __name__ == "__main__":
    raise SystemExit(main())
