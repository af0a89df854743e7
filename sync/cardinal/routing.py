"""The application layer's prefix table: which keys are counted under which prefix, and which
channel (the spec's topic) each prefix travels on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sync.errors import LocalProtocolError

__all__ = ["DEFAULT_CHANNEL", "PrefixRouter", "prefix_to_channel"]

DEFAULT_CHANNEL = "cardinal"


class PrefixRouter:
    """Application prefixes as regexes, each mapped to a channel name.

    A key's prefix is the text matched at its start by the first regex (in the order given) that
    matches a non-empty prefix; keys no regex matches travel inline in the Batch message and on
    ``default_channel``, as do Batch, Reorg and ReorgComplete messages.
    """

    __slots__ = ("_routes", "default_channel")

    def __init__(
        self, routes: Mapping[str, str] | Sequence[str], default_channel: str = DEFAULT_CHANNEL
    ) -> None:
        pairs = (
            list(routes.items())
            if isinstance(routes, Mapping)
            else [(pattern, default_channel) for pattern in routes]
        )
        compiled = []
        for pattern, channel in pairs:
            try:
                compiled.append((re.compile(pattern), channel))
            except re.error as exc:
                raise LocalProtocolError(f"invalid prefix regex {pattern!r}: {exc}") from None
        self._routes: tuple[tuple[re.Pattern[str], str], ...] = tuple(compiled)
        self.default_channel = default_channel

    @property
    def patterns(self) -> tuple[str, ...]:
        return tuple(regex.pattern for regex, _ in self._routes)

    def route(self, key: str) -> tuple[str | None, str]:
        """``(prefix or None, channel)`` of an application key."""
        for regex, channel in self._routes:
            match = regex.match(key)
            if match is not None and match.end() > 0:
                return match.group(0), channel
        return None, self.default_channel

    def prefix_of(self, key: str) -> str | None:
        return self.route(key)[0]

    def channel_of(self, key: str) -> str:
        return self.route(key)[1]

    def channels(self) -> tuple[str, ...]:
        """Every channel a consumer of this application should subscribe to, sorted."""
        return tuple(sorted({self.default_channel, *(channel for _, channel in self._routes)}))


def prefix_to_channel(
    mapping: Mapping[str, str], default_channel: str = DEFAULT_CHANNEL
) -> PrefixRouter:
    """The application's ``{prefix regex: channel}`` table as a :class:`PrefixRouter`."""
    return PrefixRouter(mapping, default_channel)
