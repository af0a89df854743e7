"""Reading the configuration: TOML file, then ``SYNCNODE_<SECTION>_<KEY>`` variables, then CLI
flags, each value coerced to its declared type and checked (``node.config.settings`` declares
them)."""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from node.config.apps import parse_tables
from node.config.fields import ConfigError, shown
from node.datadir.api_token import TOKEN_ENV
from sync.crdt import TableSchema

__all__ = ["CLIENT_VARIABLES", "ENV_PREFIX", "load"]

ENV_PREFIX = "SYNCNODE_"
Root = TypeVar("Root")


def _sections(root: type[Any]) -> dict[str, type[Any]]:
    hints = typing.get_type_hints(root)
    return {f.name: hints[f.name] for f in dataclasses.fields(root)}


def _coerce(key: str, expected: Any, value: Any, *, from_text: bool) -> Any:
    if expected == tuple[TableSchema, ...]:
        return parse_tables(key, value, from_text=from_text)
    origin = typing.get_origin(expected)
    if origin is tuple:
        if from_text:
            value = [p.strip() for p in str(value).split(",") if p.strip()]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(key, f"expected a list of strings, got {shown(value)}")
        return tuple(value)
    if expected is bool:
        if from_text:
            low = str(value).lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {shown(value)}")
        return value
    if expected is int:
        if from_text:
            try:
                value = int(str(value), 0)
            except ValueError:
                raise ConfigError(key, f"expected an integer, got {shown(value)}") from None
        if isinstance(value, float):
            # TOML reads 1e9 and 1000000000.0 as floats; shown() would print 1000000000.
            whole = (f": write {int(value)} (no '.', no exponent)"
                     if value.is_integer() and abs(value) < 2**63 else "")
            raise ConfigError(key, f"expected an integer, got the float {value:g}{whole}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {shown(value)}")
        return value
    if expected is float:
        if from_text:
            try:
                value = float(str(value))
            except ValueError:
                raise ConfigError(key, f"expected a number, got {shown(value)}") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(key, f"expected a number, got {shown(value)}")
        # TOML and float() accept inf and nan; no key means "forever" or "undefined" by them.
        if not math.isfinite(value):
            raise ConfigError(key, f"expected a finite number, got {shown(value)}")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(key, f"expected a string, got {shown(value)}")
    return value


# A value as given: (the value, whether it is text to parse, the variable it came from or None).
Given = tuple[Any, bool, str | None]


def _did_you_mean(word: str, choices: list[str], shown_as: Callable[[str], str] = str) -> str:
    """``; did you mean X?`` for the closest of ``choices`` (difflib), or nothing."""
    import difflib  # only on an error: every client command loads the config

    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {shown_as(close[0])}?" if close else ""


def _build_section(name: str, cls: type[Any], values: Mapping[str, Given]) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, (raw, from_text, origin) in values.items():
        dotted = f"{name}.{key}"
        try:
            if key not in known:
                raise ConfigError(dotted, "unknown key" + _did_you_mean(
                    key, list(known),
                    (lambda k: f"{ENV_PREFIX}{name}_{k}".upper()) if origin else str))
            value = _coerce(dotted, hints[key], raw, from_text=from_text)
            check = known[key].metadata.get("check")
            problem = check(value) if check else None
            most = known[key].metadata.get("most")
            if problem is None and most is not None and value > most:
                problem = f"must be <= {shown(most)}"
            if problem:
                raise ConfigError(dotted, _sentence(problem, value))
        except ConfigError as exc:
            if origin is None:
                raise
            # Name the variable the user set, not only the key it stands for.
            message = str(exc).removeprefix(f"config error: {dotted}: ")
            raise ConfigError(dotted, message, origin) from None
        kwargs[key] = value
    return cls(**kwargs)


def _sentence(problem: str, value: Any) -> str:
    """The check's reason, with the value given unless the reason already names it."""
    items = value if isinstance(value, tuple) else (value,)
    if any(isinstance(v, str) and v and shown(v) in problem for v in items):
        return problem
    return f"{problem}, got {shown(value)}"


# Variables the client commands read (never config keys): SYNCNODE_API_TOKEN would otherwise
# be read as a key "token" of [api] and stop `run` and `config show` with "unknown key".
CLIENT_VARIABLES = frozenset({TOKEN_ENV})


def load(
    root: type[Root],
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Root:
    """The dataclass ``root`` (one field per section, each a dataclass of keys) from defaults <
    the TOML file < ``SYNCNODE_*`` variables < ``overrides`` (``"section.key"`` to CLI values),
    each key validated. ``root`` is given by ``node.config.settings.load_config``: this module reads
    nothing of it by import, so the config does not import back the module that loads it."""
    sections = _sections(root)
    merged: dict[str, dict[str, Given]] = {name: {} for name in sections}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError("--config", f"file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("--config", f"invalid TOML in {path}: {exc}") from None
        for section, table in data.items():
            if section not in sections:
                raise ConfigError(section, "unknown section" + _did_you_mean(
                    section, list(sections), lambda k: f"[{k}]"))
            if not isinstance(table, dict):
                raise ConfigError(section, "expected a table")
            for key, value in table.items():
                merged[section][key] = (value, False, None)
    for name, value in (os.environ if env is None else env).items():
        if not name.startswith(ENV_PREFIX) or name in CLIENT_VARIABLES:
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section, _, key = rest.partition("_")
        if section in sections and key:
            merged[section][key] = (value, True, name)
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if section not in sections:
            raise ConfigError(dotted, "unknown section")
        merged[section][key] = (value, isinstance(value, str), None)
    built = {name: _build_section(name, cls, merged[name]) for name, cls in sections.items()}
    return root(**built)
