"""The ``syncnode`` command: ``run`` starts a node; the other subcommands talk to its local API.

Importing this module and building the parser stays cheap (stdlib only): each command imports
what it needs when it runs, so ``status``, ``publish``, ``log``, ``--help`` and ``--version``
never load SQLAlchemy, trio, libp2p or the node runtime. ``tests/node/test_cli_commands.py`` checks.
Errors are one ``error:`` line; exit codes follow the rule in ``node.cli.common``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from node.cli import blocks as cli_blocks
from node.cli import config as cli_config
from node.cli import db as cli_db
from node.cli import node_commands as cli_node
from node.cli import records_args as cli_records_args
from node.cli import snapshot as cli_snapshot
from node.cli import ui as cli_ui
from node.cli.common import EXIT_FAILED, EXIT_USAGE, ApiClient, CliError, config_from

__all__ = ["ApiClient", "CliError", "build_parser", "main", "redact_secrets", "run_overrides"]

def _cmd_completion(args: argparse.Namespace) -> int:
    sys.stdout.write(cli_config.completion_script(build_parser(), args.shell))
    return 0


def _register_completion(sub: Any) -> None:
    completion = sub.add_parser(
        "completion", help="print a shell completion script",
        description="bash: source <(syncnode completion bash); zsh: syncnode completion zsh > "
                    "\"${fpath[1]}/_syncnode\"")
    completion.add_argument("shell", choices=["bash", "zsh"])
    completion.set_defaults(func=_cmd_completion)


EXTENSIONS = [
    cli_node.register,
    cli_records_args.register,
    cli_blocks.register,
    cli_db.register,
    cli_snapshot.register,
    cli_config.register,
    _register_completion,
    cli_ui.register,
]


# The arguments being parsed, so that a usage error can redact the token among them.
_ARGV: list[str] = []


def redact_secrets(message: str, argv: Sequence[str]) -> str:
    """``message`` without the API token: the value of ``--token`` (or of an abbreviation of
    it, which argparse accepts) and ``$SYNCNODE_API_TOKEN``. argparse echoes arguments it does
    not take ("unrecognized arguments: --token SECRET"), and error lines end up in logs."""
    from node.datadir.api_token import TOKEN_ENV

    secrets = {os.environ.get(TOKEN_ENV, "")}
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if len(name) > 3 and "--token".startswith(name):
            secrets.add(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        message = message.replace(secret, "***")
    return message


class _Parser(argparse.ArgumentParser):
    """Usage errors as one ``error:`` line (exit 2), pointing at ``--help``, never showing
    the token."""

    def error(self, message: str) -> NoReturn:
        message = redact_secrets(message, _ARGV)
        message += _suggestion(self, message)
        self.exit(EXIT_USAGE, f"error: {message} (see `{self.prog} --help`)\n")


def _options(parser: argparse.ArgumentParser) -> Iterator[str]:
    """Every option string of ``parser`` and of the subcommand parsers built under it."""
    for action in parser._actions:
        yield from (o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _options(sub)


def _suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """``; did you mean --data-dir?`` for an unrecognized ``--dat-dir`` (difflib)."""
    if not message.startswith("unrecognized arguments:"):
        return ""
    import difflib

    known = sorted(set(_options(parser)))
    flags = [w.partition("=")[0] for w in message.removeprefix("unrecognized arguments:").split()
             if w.startswith("--")]
    hints = {flag: close[0] for flag in flags
             if (close := difflib.get_close_matches(flag, known, n=1))}
    if len(flags) == 1 and hints:
        return f"; did you mean {hints[flags[0]]}?"
    return "".join(f"; {wrong}: did you mean {right}?" for wrong, right in hints.items())


class _VersionAction(argparse.Action):
    """``--version`` that reads the package metadata only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            shown = version("syncnode")
        except PackageNotFoundError:
            shown = "0+unknown"
        parser.exit(0, f"syncnode {shown}\n")


# -- run ---------------------------------------------------------------------------------------


def run_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys ``run``'s options set (``"section.key"``: value); also read by the test
    harness, which runs nodes in its own process from the same arguments."""
    overrides: dict[str, Any] = {}
    if args.data_dir:
        overrides["node.data_dir"] = args.data_dir
    if args.api:
        overrides["api.listen"] = args.api
    if args.listen:
        overrides["p2p.listen"] = args.listen
    if args.bootstrap:
        overrides["p2p.bootstrap"] = args.bootstrap
    return overrides


def _cmd_run(args: argparse.Namespace) -> int:
    config = config_from(args, run_overrides(args), combined=True)
    import trio

    from node.node_main import run_node, startup_problem
    from node.telemetry.logs import configure_logging

    configure_logging(config.node.log_level, config.node.log_format)
    try:
        code = trio.run(run_node, config)
    except BaseException as exc:
        if (problem := startup_problem(exc)) is not None:
            raise CliError(problem, code=EXIT_FAILED) from None
        raise
    # The node has stopped and closed everything ("stopped" is printed). What the interpreter
    # would still do is collect the node's objects cycle by cycle while it tears modules down:
    # 0.4 s for a fresh node's ~150,000 objects, seconds for one that ran long. Nothing left
    # needs it (atexit handlers, logging's flush among them, still run), so leave them be.
    gc.freeze()
    return code


# -- parser ------------------------------------------------------------------------------------


class _Placeholder:
    """Stands in for the parser of a command this invocation does not run: it takes every
    declaration and keeps none (building all ~40 parsers costs more than the command itself)."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *_args, **_kwargs: self


class _OnlySelected:
    """Subparsers that fully build only the ``selected`` command; the others get a name and a
    help line (all that ``syncnode --help`` and an "invalid choice" error show)."""

    def __init__(self, real: Any, selected: str | None) -> None:
        self.real = real
        self.selected = selected

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if name == self.selected:
            return self.real.add_parser(name, **kwargs)
        self.real.add_parser(name, help=kwargs.get("help"), add_help=False)
        return _Placeholder()


def _command_word(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The full parser, or (given ``argv``) one with only the command ``argv`` names built."""
    parser = _Parser(
        prog="syncnode", description="Peer-to-peer sync daemon for append-only event logs.",
        epilog="Exit status: 0 done; 1 the command failed (no node, port or data dir in use, "
               "not found, a failure on the node); 2 bad arguments, config or input.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub: Any = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a node in the foreground")
    run.add_argument("--config", metavar="FILE", help="TOML config (see config.example.toml)")
    run.add_argument("--data-dir", metavar="DIR", help="override node.data_dir")
    run.add_argument("--api", metavar="HOST:PORT", help="override api.listen")
    run.add_argument("--listen", metavar="MULTIADDR", action="append", help="override p2p.listen")
    run.add_argument("--bootstrap", metavar="MULTIADDR", action="append",
                     help="peer to dial at start-up (repeatable)")
    run.set_defaults(func=_cmd_run)

    commands: Any = sub if argv is None else _OnlySelected(sub, _command_word(argv))
    for register in EXTENSIONS:
        register(commands)
    return parser


def join_token_value(argv: Sequence[str]) -> list[str]:
    """``--token VALUE`` as ``--token=VALUE``: argparse reads a value that starts with '-' as an
    option, and tokens made before they were hex (base64url) can start with one."""
    out: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--token":
            value = next(args, None)
            out.append("--token" if value is None else f"--token={value}")
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = join_token_value(sys.argv[1:] if argv is None else argv)
    _ARGV[:] = argv
    args = build_parser(argv).parse_args(argv)
    try:
        code: int = args.func(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as exc:
        # A daemon's error comes wrapped in many nested task groups: name the leaves (the
        # default hook stops printing at ten levels, before them).
        from node.leaves import format_leaves, summarise_leaves

        if os.environ.get("SYNCNODE_DEBUG"):
            if isinstance(exc, BaseExceptionGroup):
                print(format_leaves(exc), file=sys.stderr, end="")
            raise
        print(f"error: unexpected {summarise_leaves(exc)} (a bug: please report it; "
              "SYNCNODE_DEBUG=1 shows the traceback)", file=sys.stderr)
        return EXIT_FAILED
    return code


if __name__ == "__main__":
    raise SystemExit(main())
