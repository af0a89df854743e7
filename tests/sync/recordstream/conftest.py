"""Fixtures: the real Hedera v6 files and node keys from ``tests/testdata/hedera-v6``."""

from __future__ import annotations

from pathlib import Path

import pytest

from sync.recordstream import PublicKey, load_public_keys_pem

B5 = "2022-07-13T08_46_08.041986003Z"
B6 = "2022-07-13T08_46_11.304284003Z"
NODES = ("0.0.3", "0.0.4", "0.0.5", "0.0.6")


@pytest.fixture(scope="session")
def hedera_dir(testdata: Path) -> Path:
    return testdata / "hedera-v6"


@pytest.fixture(scope="session")
def hedera_files(hedera_dir: Path) -> dict[str, bytes]:
    """Every record, sidecar and signature file, keyed by its path relative to hedera-v6/."""
    files = {
        p.relative_to(hedera_dir).as_posix(): p.read_bytes()
        for p in hedera_dir.rglob("*")
        if p.is_file() and p.name.endswith((".rcd.gz", ".rcd_sig"))
    }
    assert len(files) == 11
    return files


@pytest.fixture(scope="session")
def hedera_keys(hedera_dir: Path) -> dict[str, list[PublicKey]]:
    keys = {
        p.stem: load_public_keys_pem(p.read_bytes(), p.name)
        for p in (hedera_dir / "node-keys").glob("*.pem")
    }
    assert sorted(keys) == list(NODES)
    return keys
