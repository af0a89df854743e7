"""Every numeric config key has a finite range (issue 29, bug 5): ``opt(..., most=...)`` on each,
non-finite floats refused, and errors that name the key, the value and the bound."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from node.config.fields import ConfigError
from node.config.settings import Config, load_config


def numeric_keys() -> list[tuple[str, type, dataclasses.Field[typing.Any]]]:
    found = []
    for section in dataclasses.fields(Config):
        cls = typing.get_type_hints(Config)[section.name]
        hints = typing.get_type_hints(cls)
        for key in dataclasses.fields(cls):
            if hints[key.name] in (int, float):
                found.append((f"{section.name}.{key.name}", hints[key.name], key))
    return found


def test_every_numeric_key_has_an_upper_bound_that_holds() -> None:
    keys = numeric_keys()
    assert len(keys) > 70  # the audit covers every section
    for dotted, kind, key in keys:
        most = key.metadata.get("most")
        assert most is not None, f"{dotted} has no upper bound (opt(..., most=...))"
        assert key.default <= most, dotted
        if dotted == "node.network_id":
            continue  # bounded by its own check at 2^63 - 1
        above = most + 1 if kind is int else most * 2 + 1
        with pytest.raises(ConfigError) as info:
            load_config(overrides={dotted: str(above)}, env={})
        assert info.value.key == dotted
        assert "must be" in str(info.value), str(info.value)


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "1e400"])
def test_every_float_key_refuses_non_finite_values(text: str) -> None:
    for dotted, kind, _key in numeric_keys():
        if kind is not float:
            continue
        with pytest.raises(ConfigError, match="expected a finite number") as info:
            load_config(overrides={dotted: text}, env={})
        assert info.value.key == dotted


@pytest.mark.parametrize("name", ["general", "chat-2", "a.b_c", "X" * 128])
def test_good_channel_names(name: str) -> None:
    assert load_config(overrides={"p2p.channels": (name,)}, env={}).p2p.channels == (name,)


@pytest.mark.parametrize("name", ["a/b", "../x", "..", ".hidden", "-x", "a b", "é", "a\x00",
                                  "X" * 129, "a%2Fb", "a?b", ""])
def test_bad_channel_names(name: str) -> None:
    with pytest.raises(ConfigError, match=r"invalid channel name|at least one channel"):
        load_config(overrides={"p2p.channels": (name,)}, env={})
