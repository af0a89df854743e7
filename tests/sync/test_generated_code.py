from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_checked_in_protobuf_code_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
