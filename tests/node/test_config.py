from __future__ import annotations

import dataclasses
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from node.config.fields import ConfigError
from node.config.settings import Config, load_config
from tests.conftest import ROOT

EXAMPLE = ROOT / "config.example.toml"


def declared_keys() -> set[str]:
    keys = set()
    defaults = Config()
    for section in dataclasses.fields(Config):
        for key in dataclasses.fields(getattr(defaults, section.name)):
            keys.add(f"{section.name}.{key.name}")
    return keys


def test_every_example_key_loads_and_every_declared_key_is_in_the_example() -> None:
    data = tomllib.loads(EXAMPLE.read_text())
    example_keys = {f"{s}.{k}" for s, table in data.items() for k in table}
    assert example_keys == declared_keys()
    config = load_config(EXAMPLE, env={})
    defaults = Config()
    for dotted in example_keys:
        section, key = dotted.split(".")
        # The example documents the defaults: loading it changes nothing.
        assert getattr(getattr(config, section), key) == getattr(getattr(defaults, section), key)


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[api]\nlisten = "127.0.0.1:1000"\n[node]\nnetwork_id = 5\n')
    env = {"SYNCNODE_API_LISTEN": "127.0.0.1:2000", "SYNCNODE_P2P_CHANNELS": "a, b"}
    config = load_config(path, env=env)
    assert config.api.listen == "127.0.0.1:2000"
    assert config.node.network_id == 5
    assert config.p2p.channels == ("a", "b")
    config = load_config(path, env=env, overrides={"api.listen": "127.0.0.1:3000"})
    assert config.api.listen == "127.0.0.1:3000"


@pytest.mark.parametrize(
    ("toml", "env", "key", "fragment"),
    [
        ("[node]\nbogus = 1\n", {}, "node.bogus", "unknown key"),
        ("[nodes]\nx = 1\n", {}, "nodes", "unknown section"),
        ('[node]\nnetwork_id = "one"\n', {}, "node.network_id", "expected an integer"),
        ("[node]\nnetwork_id = -1\n", {}, "node.network_id", "must be in [0, 2^63)"),
        ('[api]\nlisten = "localhost"\n', {}, "api.listen", "HOST:PORT"),
        ('[p2p]\nlisten = "/ip4/1.2.3.4/tcp/1"\n', {}, "p2p.listen", "list of strings"),
        ('[p2p]\nbootstrap = ["1.2.3.4:5"]\n', {}, "p2p.bootstrap", "not a multiaddr"),
        ("[p2p]\nchannels = []\n", {}, "p2p.channels", "at least one channel"),
        ('[storage]\nsqlite_synchronous = "OFF"\n', {}, "storage.sqlite_synchronous", "one of"),
        ("", {"SYNCNODE_STORAGE_BATCH_MAX_EVENTS": "many"}, "storage.batch_max_events", "integer"),
        ("", {"SYNCNODE_P2P_DIAL_TIMEOUT_S": "0"}, "p2p.dial_timeout_s", "must be > 0"),
        ("[node\n", {}, "--config", "invalid TOML"),
    ],
)
def test_bad_values_name_the_key(
    tmp_path: Path, toml: str, env: dict[str, str], key: str, fragment: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env)
    assert info.value.key == key
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("toml", "env", "said"),
    [
        # A typo gets the closest name (difflib), as the user would write it.
        ("[storage]\nbatch_max_evnts = 5\n", {},
         "storage.batch_max_evnts: unknown key; did you mean batch_max_events?"),
        ("[storag]\nx = 1\n", {}, "storag: unknown section; did you mean [storage]?"),
        ("", {"SYNCNODE_STORAGE_BATCH_MAX_EVNTS": "5"},
         "SYNCNODE_STORAGE_BATCH_MAX_EVNTS (storage.batch_max_evnts): unknown key; did you "
         "mean SYNCNODE_STORAGE_BATCH_MAX_EVENTS?"),
        # A variable's error names the variable first.
        ("", {"SYNCNODE_STORAGE_BATCH_MAX_EVENTS": "many"},
         "SYNCNODE_STORAGE_BATCH_MAX_EVENTS (storage.batch_max_events): expected an integer, "
         "got 'many'"),
        ("", {"SYNCNODE_STORAGE_BATCH_MAX_EVENTS": "999999999"},
         "SYNCNODE_STORAGE_BATCH_MAX_EVENTS (storage.batch_max_events): must be <= 100000"),
        # TOML reads 1e9 as a float: say so, and what to write.
        ("[api]\nmax_body_bytes = 1e9\n", {},
         "api.max_body_bytes: expected an integer, got the float 1e+09: write 1000000000"),
        ("[api]\nmax_body_bytes = 2.5\n", {},
         "api.max_body_bytes: expected an integer, got the float 2.5"),
        # Equal values are refused (SDS-R draws T_req modulo T_max - T_min): the message says <.
        ("[sds]\nrepair_t_min_s = 10\nrepair_t_max_s = 10\n", {},
         "sds.repair_t_min_s: must be < sds.repair_t_max_s"),
        ("[sds]\nrepair_t_min_s = 10\nrepair_t_max_s = 5\n", {},
         "sds.repair_t_min_s: must be < sds.repair_t_max_s"),
    ],
)
def test_errors_say_what_the_user_wrote_and_what_to_write(
    tmp_path: Path, toml: str, env: dict[str, str], said: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env)
    assert said in str(info.value), str(info.value)


def test_repair_times_one_apart_are_accepted() -> None:
    config = load_config(overrides={"sds.repair_t_min_s": 10.0, "sds.repair_t_max_s": 10.5})
    assert config.sds.repair_t_max_s > config.sds.repair_t_min_s


def test_cli_reports_bad_config_on_one_line_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[node]\nnetwork_id = true\n")
    result = subprocess.run(
        [sys.executable, "-m", "node.cli", "run", "--config", str(path)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: config error: node.network_id: expected an integer, got true"
    ]


def test_channel_profiles_default_override_and_applications() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from node.config.channels import channel_profiles
    from sync.identity import peer_id_of

    producer = peer_id_of(Ed25519PrivateKey.generate())
    config = load_config(overrides={
        "p2p.channels": ("chat", "news", "blocks"), "sds.profile": "waku",
        "sds.channel_profiles": ("news=syncnode",),
        "blocks.enabled": True, "blocks.producers": (producer,),
    })
    profiles = channel_profiles(config)
    assert profiles["chat"] == "waku" and profiles["news"] == "syncnode"
    assert profiles["blocks"] == "syncnode"  # an application's channel: writers are signed
    with pytest.raises(ConfigError, match="channel_profiles"):
        load_config(overrides={"sds.channel_profiles": ("chat=plain",)})


def test_every_hosted_application_channel_is_a_configured_one() -> None:
    """``node.config.channels.app_channels`` (read without importing the applications) names
    what every plugin of ``PLUGINS`` asks for, in order: a new plugin must be added there."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from node.apps.plugins import PLUGINS
    from node.config.channels import app_channels, channel_names
    from sync.identity import peer_id_of

    producer = peer_id_of(Ed25519PrivateKey.generate())
    config = load_config(overrides={
        "p2p.channels": ("chat",), "blocks.enabled": True, "blocks.producers": (producer,),
        "blocks.routes": ("^eth=eth-blocks",), "db.enabled": True,
    })
    wanted = [c for plugin in PLUGINS for c in plugin.channels(config)]
    assert len(wanted) >= 3 and app_channels(config) == wanted
    assert channel_names(config) == ["chat", *wanted]
