from __future__ import annotations

from sqlalchemy import Engine

from storage import (
    count_state,
    delete_oldest_state,
    delete_state,
    get_state,
    list_state,
    put_state,
)


def test_state_roundtrip_upsert_and_delete(engine: Engine) -> None:
    with engine.begin() as conn:
        assert get_state(conn, "sds/general") is None
        put_state(conn, "sds/general", b"one", 1)
        put_state(conn, "sds/general", b"two", 2)
        put_state(conn, "sds/other_%", b"x", 3)
        put_state(conn, "peers/a", b"p", 3)
    with engine.begin() as conn:
        assert get_state(conn, "sds/general") == b"two"
        assert list_state(conn, "sds/") == {"sds/general": b"two", "sds/other_%": b"x"}
        assert list_state(conn, "sds/other_") == {"sds/other_%": b"x"}
        delete_state(conn, "sds/general")
        assert get_state(conn, "sds/general") is None


def test_count_and_delete_oldest_under_a_prefix(engine: Engine) -> None:
    with engine.begin() as conn:
        for i, written_ms in enumerate([30, 10, 20, 10]):
            put_state(conn, f"idem/k{i}", b"v", written_ms)
        put_state(conn, "idem_other", b"v", 1)
        put_state(conn, "sds/general", b"v", 1)
    with engine.begin() as conn:
        assert count_state(conn, "idem/") == 4
        # The two written at 10 ms go first (ties broken by key), then the one at 20 ms.
        assert delete_oldest_state(conn, "idem/", 3) == 3
        assert set(list_state(conn, "idem/")) == {"idem/k0"}
        assert delete_oldest_state(conn, "idem/", 0) == 0
        assert delete_oldest_state(conn, "idem/", 5) == 1
        assert count_state(conn, "idem/") == 0
        assert get_state(conn, "idem_other") == get_state(conn, "sds/general") == b"v"
