from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StateRef(_message.Message):
    __slots__ = ("message_id", "retrieval_hint", "sender_id")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    RETRIEVAL_HINT_FIELD_NUMBER: _ClassVar[int]
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    retrieval_hint: bytes
    sender_id: str
    def __init__(self, message_id: _Optional[str] = ..., retrieval_hint: _Optional[bytes] = ..., sender_id: _Optional[str] = ...) -> None: ...

class StateOutgoing(_message.Message):
    __slots__ = ("message_id", "attempts", "possibly", "bloom_senders", "fp_product", "resend_at")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    POSSIBLY_FIELD_NUMBER: _ClassVar[int]
    BLOOM_SENDERS_FIELD_NUMBER: _ClassVar[int]
    FP_PRODUCT_FIELD_NUMBER: _ClassVar[int]
    RESEND_AT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    attempts: int
    possibly: bool
    bloom_senders: _containers.RepeatedScalarFieldContainer[str]
    fp_product: float
    resend_at: float
    def __init__(self, message_id: _Optional[str] = ..., attempts: _Optional[int] = ..., possibly: _Optional[bool] = ..., bloom_senders: _Optional[_Iterable[str]] = ..., fp_product: _Optional[float] = ..., resend_at: _Optional[float] = ...) -> None: ...

class StateWaiting(_message.Message):
    __slots__ = ("wire", "lost")
    WIRE_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    wire: bytes
    lost: bool
    def __init__(self, wire: _Optional[bytes] = ..., lost: _Optional[bool] = ...) -> None: ...

class StateMissing(_message.Message):
    __slots__ = ("ref", "lost_at")
    REF_FIELD_NUMBER: _ClassVar[int]
    LOST_AT_FIELD_NUMBER: _ClassVar[int]
    ref: StateRef
    lost_at: float
    def __init__(self, ref: _Optional[_Union[StateRef, _Mapping]] = ..., lost_at: _Optional[float] = ...) -> None: ...

class StateTimed(_message.Message):
    __slots__ = ("ref", "at")
    REF_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    ref: StateRef
    at: float
    def __init__(self, ref: _Optional[_Union[StateRef, _Mapping]] = ..., at: _Optional[float] = ...) -> None: ...

class StateResponse(_message.Message):
    __slots__ = ("message_id", "at")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    at: float
    def __init__(self, message_id: _Optional[str] = ..., at: _Optional[float] = ...) -> None: ...

class ChannelStateV2(_message.Message):
    __slots__ = ("channel_id", "participant_id", "lamport", "last_activity", "outgoing", "waiting", "missing", "lost", "repair_out", "repair_in", "heads", "sync_at")
    CHANNEL_ID_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANT_ID_FIELD_NUMBER: _ClassVar[int]
    LAMPORT_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    OUTGOING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    REPAIR_OUT_FIELD_NUMBER: _ClassVar[int]
    REPAIR_IN_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    SYNC_AT_FIELD_NUMBER: _ClassVar[int]
    channel_id: str
    participant_id: str
    lamport: int
    last_activity: float
    outgoing: _containers.RepeatedCompositeFieldContainer[StateOutgoing]
    waiting: _containers.RepeatedCompositeFieldContainer[StateWaiting]
    missing: _containers.RepeatedCompositeFieldContainer[StateMissing]
    lost: _containers.RepeatedScalarFieldContainer[str]
    repair_out: _containers.RepeatedCompositeFieldContainer[StateTimed]
    repair_in: _containers.RepeatedCompositeFieldContainer[StateResponse]
    heads: _containers.RepeatedCompositeFieldContainer[StateRef]
    sync_at: float
    def __init__(self, channel_id: _Optional[str] = ..., participant_id: _Optional[str] = ..., lamport: _Optional[int] = ..., last_activity: _Optional[float] = ..., outgoing: _Optional[_Iterable[_Union[StateOutgoing, _Mapping]]] = ..., waiting: _Optional[_Iterable[_Union[StateWaiting, _Mapping]]] = ..., missing: _Optional[_Iterable[_Union[StateMissing, _Mapping]]] = ..., lost: _Optional[_Iterable[str]] = ..., repair_out: _Optional[_Iterable[_Union[StateTimed, _Mapping]]] = ..., repair_in: _Optional[_Iterable[_Union[StateResponse, _Mapping]]] = ..., heads: _Optional[_Iterable[_Union[StateRef, _Mapping]]] = ..., sync_at: _Optional[float] = ...) -> None: ...
