"""``syncnode config show|validate``, and the script behind ``syncnode completion bash|zsh``
(registered by ``node.cli.main``, which owns the whole parser)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from node.cli.common import config_from

__all__ = ["completion_script", "register", "toml_text"]


# -- config ------------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def toml_text(config: Any, *, secrets: bool = False) -> str:
    """The effective configuration as TOML that ``load_config`` reads back unchanged
    (a password in ``storage.url`` shown as ``***`` unless ``secrets``)."""
    import dataclasses

    lines: list[str] = []
    tables: list[str] = []
    for section in dataclasses.fields(config):
        values = getattr(config, section.name)
        lines.append(f"[{section.name}]")
        for key in dataclasses.fields(values):
            value = getattr(values, key.name)
            if section.name == "db" and key.name == "tables":
                for schema in value:
                    tables.append(f"\n[db.tables.{schema.name}]")
                    columns = ", ".join(f"{c} = {json.dumps(t.value)}"
                                        for c, t in schema.columns.items())
                    tables.append(f"columns = {{ {columns} }}")
                    if schema.writers is not None:
                        tables.append(f"writers = {_toml_value(sorted(schema.writers))}")
                continue
            if section.name == "storage" and key.name == "url" and not secrets:
                value = _PASSWORD.sub(r"\1***@", value)
            lines.append(f"{key.name} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines + tables).rstrip() + "\n"


def _cmd_show(args: argparse.Namespace) -> int:
    config = config_from(args)
    sys.stdout.write(toml_text(config, secrets=args.show_secrets))
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    config_from(args, combined=True)
    source = args.config or "defaults"
    print(f"ok: {source} is a valid configuration (with SYNCNODE_* variables applied)")
    return 0


# -- completion --------------------------------------------------------------------------------


def _tree(parser: argparse.ArgumentParser, path: str, out: dict[str, list[str]]) -> None:
    words = [opt for action in parser._actions for opt in action.option_strings]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                words.append(name)
                _tree(child, f"{path}/{name}", out)
    out[path] = words


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """A bash completion function for every command, subcommand and option of ``parser``;
    zsh runs the same function through ``bashcompinit``."""
    tree: dict[str, list[str]] = {}
    _tree(parser, "", tree)
    steps = " | ".join(f'"{p}"' for p in sorted(tree) if p)
    cases = "\n".join(f'    "{p}") words="{" ".join(w)}" ;;' for p, w in sorted(tree.items()))
    body = f"""_syncnode() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" words="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "$path/${{COMP_WORDS[i]}}" in
      {steps}) path="$path/${{COMP_WORDS[i]}}" ;;
    esac
  done
  case "$path" in
{cases}
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _syncnode syncnode
"""
    if shell == "zsh":
        return ("#compdef syncnode\nautoload -U +X bashcompinit && bashcompinit\n" + body)
    return "# bash completion for syncnode: source <(syncnode completion bash)\n" + body


def register(sub: Any) -> None:
    config = sub.add_parser("config", help="show or check the effective configuration")
    actions = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    show = actions.add_parser("show", help="print the effective configuration as TOML "
                                           "(defaults < --config file < SYNCNODE_* variables)")
    show.add_argument("--config", metavar="FILE", help="TOML config")
    show.add_argument("--show-secrets", action="store_true",
                      help="print the database password too (shown as *** by default)")
    show.set_defaults(func=_cmd_show)
    validate = actions.add_parser("validate", help="check a configuration: every key, its "
                                                   "range and its relations; exit 2 if bad")
    validate.add_argument("--config", metavar="FILE", help="TOML config")
    validate.set_defaults(func=_cmd_validate)
