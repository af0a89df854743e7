"""Work every member of a simulated group would repeat with the same result, done once.

In a group of N every broadcast is decoded N times and each filter or repair signature on it
is checked by every member; the answers are the same at every member (the same bytes under
the same settings). The node does this work once per node, so it is real CPU per member, but
in one process simulating N members it is the whole cost of a 1,000-member run. So, as
``SdsChannel.layers.signatures.trust`` already shares an event's signature check (docs/sim.md
"Speed"):

- :class:`SharedDecodeProfile`: the channel's wire profile with a decode cache keyed by the
  received bytes (a decoded ``Transmission`` is frozen; only successful decodes are kept, so a
  bad message raises at every member);
- :func:`shared_verification`: Ed25519 verification memoised by (key, signature, data) while
  a run lasts (``verify`` is a pure function of them).

Neither changes any member's decisions; both are off with ``Scenario.shared=False`` (the
scale benchmark's CPU figure per member then counts every member's own decoding).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import sync.sds.message as sds_message
from sync.sds.message import Transmission
from sync.sds.profile import SdsProfile

__all__ = ["SharedDecodeProfile", "shared_verification"]

#: Decoded transmissions kept; a broadcast's copies arrive within a second of each other.
_DECODE_CACHE = 8192


@dataclass(frozen=True)
class SharedDecodeProfile(SdsProfile):
    cache: dict[tuple[bytes, bool, bool], Transmission] = field(
        default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, profile: SdsProfile) -> SharedDecodeProfile:
        if isinstance(profile, SharedDecodeProfile):
            return profile
        return cls(**{f.name: getattr(profile, f.name) for f in dataclasses.fields(profile)})

    def decode(self, data: bytes, *, check_id: bool, verify_signature: bool,
               known_signatures: Mapping[str, bytes] | None) -> Transmission:
        key = (data, check_id, verify_signature)
        tx = self.cache.get(key)
        if tx is None:
            tx = super().decode(data, check_id=check_id, verify_signature=verify_signature,
                                known_signatures=known_signatures)
            if len(self.cache) >= _DECODE_CACHE:
                self.cache.clear()
            self.cache[key] = tx
        return tx


@contextlib.contextmanager
def shared_verification() -> Iterator[None]:
    """Memoise ``sync.sds.message.verify`` while the block runs."""
    # ``verify`` is sync.identity's, imported into sync.sds.message: replaced there only.
    original = sds_message.__dict__["verify"]
    setattr(sds_message, "verify", functools.lru_cache(maxsize=1 << 16)(original))  # noqa: B010
    try:
        yield
    finally:
        setattr(sds_message, "verify", original)  # noqa: B010
