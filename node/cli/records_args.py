"""The arguments of ``syncnode records``, declared without importing the record stream code.

The commands themselves live in ``node.cli.records`` and are imported only when run.
"""

from __future__ import annotations

import argparse

from node.cli.common import lazy_command

__all__ = ["add_subcommands", "register"]


def add_subcommands(records: argparse.ArgumentParser) -> None:
    sub = records.add_subparsers(dest="records_command", required=True, metavar="SUBCOMMAND")

    verify = sub.add_parser(
        "verify",
        help="verify every record, sidecar and signature file under DIR",
        description="Exit status: 0 every check passed and every signature was verified; 1 a "
        "check failed, or a signature could not be checked (no key for its node: --keys); "
        "2 unusable arguments.",
    )
    verify.add_argument("dir", metavar="DIR", help="directory holding record<node>/ folders")
    verify.add_argument(
        "--keys",
        metavar="KEYDIR",
        help="directory of <node>.pem public keys (RSA and/or Ed25519); without it only "
        "Ed25519 signatures of nodes named by their peer id are checked",
    )
    verify.add_argument(
        "--require-sidecars",
        action="store_true",
        help="fail a record file whose sidecar files are absent (by default they are reported "
        "as not checked: HIP-435 lets a mirror node skip them)",
    )
    verify.add_argument("--json", action="store_true", help="print a JSON report")
    verify.add_argument("--full", action="store_true",
                        help="print hashes and signatures in full (on a terminal they are cut "
                             "to 16 hex digits; piped output and --json are always full)")
    verify.set_defaults(func=lazy_command("node.cli.records", "run_verify"))

    show = sub.add_parser("show", help="print a record, sidecar or signature file")
    show.add_argument("file", metavar="FILE")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument("--full", action="store_true",
                        help="print hashes and signatures in full (on a terminal they are cut "
                             "to 16 hex digits; piped output and --json are always full)")
    show.set_defaults(func=lazy_command("node.cli.records", "run_show"))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``records verify`` and ``records show`` to a ``syncnode`` parser."""
    records = subparsers.add_parser(
        "records",
        help="verify and inspect record stream v6 files",
        description="Verify and inspect record stream v6 files (HIP-435).",
    )
    add_subcommands(records)
