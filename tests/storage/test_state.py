from __future__ import annotations

from sqlalchemy import Engine

from storage import delete_state, get_state, list_state, put_state


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
