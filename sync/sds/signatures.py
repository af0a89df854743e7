"""The signatures an ``SdsChannel`` knows to be valid: checked on a receipt, or by its driver
elsewhere (``trust``, say in a worker thread). ``receive`` of a message whose signature is here
skips the Ed25519 check; the message's id is still recomputed from its content, so a known
signature cannot vouch for a different message."""

from __future__ import annotations

from sync.sds.message import SignedEvent

__all__ = ["VerifiedSignatures"]

#: The most recent this many are kept (a duplicate arrives soon after its first copy).
CAPACITY = 4096


class VerifiedSignatures:
    __slots__ = ("by_id",)

    def __init__(self) -> None:
        #: message id -> its verified signature, oldest first (the decoder reads it as is).
        self.by_id: dict[str, bytes] = {}

    def trust(self, event: SignedEvent) -> None:
        """``event``'s signature was verified elsewhere: ``receive`` of its wire skips the
        check."""
        if event.signature is not None:
            self.remember(event.message_id, event.signature)

    def remember(self, message_id: str, signature: bytes) -> None:
        by_id = self.by_id
        if message_id not in by_id:
            if len(by_id) >= CAPACITY:
                del by_id[next(iter(by_id))]
            by_id[message_id] = signature
