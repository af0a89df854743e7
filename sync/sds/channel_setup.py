"""What an ``SdsChannel`` was made with, as one read-only value: which channel, whose view,
the configuration and the wire profile it selects."""

from __future__ import annotations

from dataclasses import dataclass

from sync.sds.config import SdsConfig
from sync.sds.profile import SdsProfile

__all__ = ["ChannelSetup"]


@dataclass(frozen=True, slots=True)
class ChannelSetup:
    channel_id: str
    #: Our peer id: the sender of what we send.
    participant_id: str
    config: SdsConfig
    #: The wire rules (ids, signatures, filter shape and hashing), from ``config.profile``.
    profile: SdsProfile
