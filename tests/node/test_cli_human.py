"""The human forms of the client commands' text output (``node.cli.human``)."""

from __future__ import annotations

from node.cli.human import human_duration, human_size, iso_ms, iso_s


def test_times_durations_and_sizes() -> None:
    assert iso_ms(1_795_680_624_313) == "2026-11-26T08:10:24.313Z"
    assert iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert iso_ms(10**30) == str(10**30)  # no clock gives it: the number itself
    assert iso_s(1_795_680_624.9) == "2026-11-26T08:10:24Z"
    assert [human_duration(s) for s in (0.04, 9.96, 12.7, 185, 7385, 367_200)] == [
        "0.0 s", "10.0 s", "12 s", "3 min 05 s", "2 h 03 min", "4 d 06 h"]
    assert [human_size(b) for b in (0, 1023, 1536, 12 * 2**20, 3.2 * 2**30, 2**50)] == [
        "0 B", "1023 B", "1.5 KiB", "12.0 MiB", "3.2 GiB", "1024.0 TiB"]
