"""``syncnode snapshot rebuild|status|pull`` and ``syncnode bootstrap --from-snapshot DIR``.

``rebuild`` and ``status`` talk to a running node's API; ``bootstrap`` and ``pull`` work on the
node's database directly (the node must not be running: the database is loaded in bulk).
``register(subparsers)`` adds the commands to the ``syncnode`` parser.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from node.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    CliError,
    add_client_options,
    client_for,
    config_from,
)
from node.cli.human import human_duration

__all__ = ["explain_snapshot", "progress_bar", "register"]

_BAR = 30


def progress_bar(progress: dict[str, Any] | None, width: int = _BAR) -> str:
    """``[#########.............]  45%  snapshot:write 9/20`` (or ``idle``); a job that numbers
    its phases adds ``(step 4 of 6)``, and the fraction is then of the whole job."""
    if not progress:
        return "idle"
    fraction = float(progress.get("fraction") or 0.0)
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    bar = "#" * filled + "." * (width - filled)
    line = f"[{bar}] {fraction * 100:3.0f}%  {_phase(progress)}"
    if progress.get("total"):
        line += f" {progress.get('done', 0)}/{progress['total']}"
    return line


def _phase(progress: dict[str, Any]) -> str:
    phase = str(progress.get("phase", "?"))
    if progress.get("steps"):
        phase += f" (step {progress.get('step')} of {progress['steps']})"
    return phase


def _describe_last(last: dict[str, Any] | None) -> str:
    if not last:
        return "last run: none yet"
    if last.get("unchanged"):
        built = last.get("built_at")
        when = f" (built {_utc(int(built * 1000))})" if built else ""
        parts = [f"last run: up to date{when}: nothing new since, so Spark was not started"]
    else:
        verdict = "ok" if last["ok"] else "FAILED"
        parts = [f"last run: {verdict} ({last.get('reason')}, "
                 f"{human_duration(float(last.get('seconds') or 0))})"]
    for job in last.get("jobs", []):
        line = f"  {job['job']}: exit {job.get('exit_code')}"
        if job.get("error"):
            line += f"  error: {job['error']}"
        parts.append(line)
        result = job.get("result") or {}
        if job["job"] == "snapshot" and "events" in result and last.get("unchanged"):
            parts.append(f"    holds: {result['events']} events in {result['files']} record "
                         f"files -> {result.get('out', '?')}")
        elif job["job"] == "snapshot" and "events" in result:
            parts.extend(f"    {x}" for x in explain_snapshot(result))
        elif result:
            parts.append(f"    {json.dumps(result, sort_keys=True)}")
        parts.extend(f"    {s}" for s in job.get("stderr", [])[-5:])
    return "\n".join(parts)


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _when_included(result: dict[str, Any]) -> str:
    """When rebuilds take the events left out, from their periods' settle times: the oldest
    period's events first, all of them once the newest one's period settled."""
    until, last = result.get("pending_until_ms"), result.get("pending_all_until_ms")
    if not until:
        return "a later rebuild includes them"
    first = result.get("pending_first_events")
    if not last or last == until or first is None or first >= result["pending_events"]:
        return f"a rebuild after {_utc(until)} includes them"
    return (f"a rebuild after {_utc(until)} includes {first} of them, one after {_utc(last)} "
            "all of them")


def explain_snapshot(result: dict[str, Any]) -> list[str]:
    """A snapshot job's result in words: what it wrote, what it left out, why and until when."""
    lines = [f"written: {result['events']} events in {result['files']} record files "
             f"({result.get('new_events', 0)} events, {result.get('new_files', 0)} files new "
             f"in this run) -> {result.get('out', '?')}"]
    pending = result.get("pending_events") or 0
    if pending:
        lines.append(f"left out: {pending} events {result.get('pending_reason') or ''}; "
                     f"{_when_included(result)} "
                     "(spark.settle_ms; snapshot_interval_s can rebuild by itself)".replace(
                         "  ", " "))
    else:
        lines.append("left out: nothing (every stored event is in the files)")
    if result.get("late"):
        lines.append(f"late: {result['late']} events arrived after their period was written: "
                     "they are not in the files (a node bootstrapped from them gets these "
                     "through Recon)")
    return lines


def _show(status: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return
    print(f"state: {'running' if status['running'] else 'idle'}  "
          f"runs: {status['runs']}  failures: {status['failures']}")
    if status["running"]:
        print(progress_bar(status.get("progress")))
    print(_describe_last(status.get("last")))


def _watch(client: Any, poll_s: float = 0.5) -> dict[str, Any]:
    """Show progress until the run finishes; returns the final status.

    On a terminal one bar is redrawn in place, with the time spent; otherwise (a pipe, a log)
    a line is printed only when the phase changes, not once per poll.
    """
    tty = sys.stdout.isatty()
    status: dict[str, Any] = client.get("/v1/snapshots/status")
    phase = None
    started = time.monotonic()
    while status["running"]:
        progress = status.get("progress") or {}
        if tty:
            elapsed = human_duration(time.monotonic() - started)
            print("\r" + f"{progress_bar(progress)}  {elapsed}".ljust(90), end="", flush=True)
        elif progress.get("phase") != phase:
            phase = progress.get("phase")
            print(f"{_phase(progress) if phase else 'starting'} ...", flush=True)
        time.sleep(poll_s)
        status = client.get("/v1/snapshots/status")
    if tty:
        print()
    return status


def _cmd_rebuild(args: argparse.Namespace) -> int:

    client = client_for(args)
    answer = client.post("/v1/snapshots")
    if answer.get("unchanged"):
        # Nothing committed since the last good build and nothing left out: done already.
        print("snapshot up to date: nothing new since the last build, nothing to rebuild")
        print(_describe_last(answer.get("last")))
        return 0
    print("rebuild queued after the current run" if answer.get("queued_after_current")
          else "rebuild started")
    if not args.wait:
        return 0
    status = _watch(client)
    print(_describe_last(status.get("last")))
    return 0 if status.get("last") and status["last"]["ok"] else 1


def _cmd_status(args: argparse.Namespace) -> int:

    client = client_for(args)
    status = _watch(client) if args.watch else client.get("/v1/snapshots/status")
    _show(status, args.json)
    return 0


@contextlib.contextmanager
def _local_database(args: argparse.Namespace, snapshot: str
                    ) -> Iterator[tuple[Any, int, str, dict[str, str], Any, Any]]:
    """The stopped node's database (engine, network id, layout, profiles, load rules, config)
    for a load from ``snapshot``, holding its data dir's ``repo.lock`` meanwhile.

    The signers and the manifest are checked first, before the loader's imports (seconds) and
    before the data dir is touched. On a later failure, a SQLite database (and data dir) this
    command created is removed again: a failed bootstrap must not leave an empty database that
    a later bootstrap would refuse.
    """
    from node.snapshots.precheck import check_before_load

    overrides = {"node.data_dir": args.data_dir} if args.data_dir else {}
    config = config_from(args, overrides)
    check_before_load(config, args.signer or (), Path(snapshot))
    from node.datadir.lock import DataDirLocked, RepoLock
    from node.snapshots.bootstrap import load_rules
    from storage import make_engine, upgrade

    rules = load_rules(config, args.signer or (), time.time())  # before anything is created
    data_dir = config.data_path
    created_dir = not data_dir.exists()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        lock = RepoLock(data_dir)
        lock.acquire()
    except DataDirLocked as exc:
        raise CliError(f"{exc} ({args.command} writes the database directly, so it needs a "
                       "stopped node)") from None
    except OSError as exc:
        raise CliError(f"cannot use data dir {data_dir}: {exc.strerror or exc}") from None
    sqlite_file = data_dir / "syncnode.db" if not config.storage.url else None
    created_db = sqlite_file is not None and not sqlite_file.exists()
    done = False
    try:
        engine = make_engine(config.database_url,
                             sqlite_synchronous=config.storage.sqlite_synchronous)
        try:
            upgrade(engine)
            from node.config.channels import channel_profiles

            yield (engine, config.node.network_id, config.recon.event_id_layout,
                   channel_profiles(config), rules, config)
            done = True
        finally:
            engine.dispose()
    finally:
        lock.release()
        if not done and created_db and sqlite_file is not None:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{sqlite_file}{suffix}").unlink(missing_ok=True)
        if not done and created_dir:
            lock.path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                data_dir.rmdir()


def _bootstrap_failure(exc: Exception) -> CliError:
    if isinstance(exc, OSError):  # a snapshot file that cannot be read
        return CliError(f"{exc.filename or 'snapshot'}: {exc.strerror or exc}", code=EXIT_USAGE)
    return CliError(str(exc), code=EXIT_USAGE if getattr(exc, "input_error", True)
                    else EXIT_FAILED)


def _cmd_bootstrap(args: argparse.Namespace) -> int:
    from node.snapshots.precheck import BootstrapError

    try:
        with _local_database(args, args.from_snapshot) as (
                engine, network_id, layout, profiles, rules, config):
            from node.snapshots.bootstrap import bootstrap

            result = bootstrap(engine, Path(args.from_snapshot), network_id, layout, profiles,
                               rules=rules, workers=args.workers)
    except (BootstrapError, OSError) as exc:
        raise _bootstrap_failure(exc) from None
    print(f"loaded {result.events} events from {result.files} record files "
          f"in {result.seconds} s; chain ends at {result.running_hash[:16]}...")
    _print_left_out(result.left_out, config, args.from_snapshot)
    print("start the node (`syncnode run`): Recon fetches everything newer than the snapshot")
    return 0


def _print_left_out(left_out: dict[str, int], config: Any, snapshot: str) -> None:
    from node.snapshots.trust import left_out_hint

    for channel, count in sorted(left_out.items()):
        print(left_out_hint(channel, count, config, snapshot))


def _cmd_pull(args: argparse.Namespace) -> int:
    from node.snapshots.precheck import BootstrapError

    try:
        with _local_database(args, args.directory) as (
                engine, network_id, layout, profiles, rules, config):
            from node.snapshots.bootstrap import pull

            result = pull(engine, Path(args.directory), network_id, layout, profiles,
                          rules=rules)
    except (BootstrapError, OSError) as exc:
        raise _bootstrap_failure(exc) from None
    _print_left_out(result.left_out, config, args.directory)
    if not result.fetched:
        print(f"nothing to fetch: the log already holds every event of {args.directory} "
              f"{'this node replicates ' if result.left_out else ''}"
              f"({result.nodes_read} tree nodes compared)")
        return 0
    print(f"fetched {result.fetched} events from {len(result.files_read)} record files; "
          f"{result.nodes_read} tree nodes read, {result.subtrees_skipped} subtrees already equal")
    return 0


def _add_local_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", metavar="DIR", help="override node.data_dir")
    parser.add_argument("--signer", metavar="PEER_ID", action="append",
                        help="trust snapshots signed by this node (repeatable; replaces "
                             "spark.snapshot_signers and the defaults: this data dir's key "
                             "and p2p.allowed_peers)")
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
        "pull", help="offline: add to a stopped node's database the events a snapshot "
                     "directory holds and the log lacks (refused while a node runs there)",
        description="Compares the snapshot's range tree (objects/) with the local log, skips "
                    "every subtree whose hash matches, and loads only the events of differing "
                    "ranges from their record files. It writes the database directly, so it "
                    "takes the data dir's repo.lock and refuses while `syncnode run` holds it; "
                    "a running node gets the same events from its peers through Recon.")
    pull_cmd.add_argument("directory", metavar="DIR")
    _add_local_options(pull_cmd)
    pull_cmd.set_defaults(func=_cmd_pull)

    boot = subparsers.add_parser(
        "bootstrap", help="verify a snapshot and load it into an empty node database")
    boot.add_argument("--from-snapshot", metavar="DIR", required=True)
    boot.add_argument("--workers", type=int, metavar="N", default=None,
                      help="processes that verify the record files (default: one per CPU; "
                           "0: verify in this process)")
    _add_local_options(boot)
    boot.set_defaults(func=_cmd_bootstrap)


def main(argv: list[str] | None = None) -> int:
    """``python -m node.cli.snapshot ...``: these commands on their own, until cli.py has them."""

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
