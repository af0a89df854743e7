from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HashAlgorithm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HASH_ALGORITHM_UNKNOWN: _ClassVar[HashAlgorithm]
    SHA_384: _ClassVar[HashAlgorithm]

class SidecarType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SIDECAR_TYPE_UNKNOWN: _ClassVar[SidecarType]
    CONTRACT_STATE_CHANGE: _ClassVar[SidecarType]
    CONTRACT_ACTION: _ClassVar[SidecarType]
    CONTRACT_BYTECODE: _ClassVar[SidecarType]
    SYNCNODE_DELIVERY: _ClassVar[SidecarType]

class SignatureType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SIGNATURE_TYPE_UNKNOWN: _ClassVar[SignatureType]
    SHA_384_WITH_RSA: _ClassVar[SignatureType]
    ED25519: _ClassVar[SignatureType]
HASH_ALGORITHM_UNKNOWN: HashAlgorithm
SHA_384: HashAlgorithm
SIDECAR_TYPE_UNKNOWN: SidecarType
CONTRACT_STATE_CHANGE: SidecarType
CONTRACT_ACTION: SidecarType
CONTRACT_BYTECODE: SidecarType
SYNCNODE_DELIVERY: SidecarType
SIGNATURE_TYPE_UNKNOWN: SignatureType
SHA_384_WITH_RSA: SignatureType
ED25519: SignatureType

class Timestamp(_message.Message):
    __slots__ = ("seconds", "nanos")
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    NANOS_FIELD_NUMBER: _ClassVar[int]
    seconds: int
    nanos: int
    def __init__(self, seconds: _Optional[int] = ..., nanos: _Optional[int] = ...) -> None: ...

class SemanticVersion(_message.Message):
    __slots__ = ("major", "minor", "patch", "pre", "build")
    MAJOR_FIELD_NUMBER: _ClassVar[int]
    MINOR_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    PRE_FIELD_NUMBER: _ClassVar[int]
    BUILD_FIELD_NUMBER: _ClassVar[int]
    major: int
    minor: int
    patch: int
    pre: str
    build: str
    def __init__(self, major: _Optional[int] = ..., minor: _Optional[int] = ..., patch: _Optional[int] = ..., pre: _Optional[str] = ..., build: _Optional[str] = ...) -> None: ...

class HashObject(_message.Message):
    __slots__ = ("algorithm", "length", "hash")
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    algorithm: HashAlgorithm
    length: int
    hash: bytes
    def __init__(self, algorithm: _Optional[_Union[HashAlgorithm, str]] = ..., length: _Optional[int] = ..., hash: _Optional[bytes] = ...) -> None: ...

class SidecarMetadata(_message.Message):
    __slots__ = ("hash", "id", "types")
    HASH_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    hash: HashObject
    id: int
    types: _containers.RepeatedScalarFieldContainer[SidecarType]
    def __init__(self, hash: _Optional[_Union[HashObject, _Mapping]] = ..., id: _Optional[int] = ..., types: _Optional[_Iterable[_Union[SidecarType, str]]] = ...) -> None: ...

class RecordStreamItem(_message.Message):
    __slots__ = ("transaction", "record")
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    transaction: bytes
    record: bytes
    def __init__(self, transaction: _Optional[bytes] = ..., record: _Optional[bytes] = ...) -> None: ...

class RecordStreamFile(_message.Message):
    __slots__ = ("hapi_proto_version", "start_object_running_hash", "record_stream_items", "end_object_running_hash", "block_number", "sidecars")
    HAPI_PROTO_VERSION_FIELD_NUMBER: _ClassVar[int]
    START_OBJECT_RUNNING_HASH_FIELD_NUMBER: _ClassVar[int]
    RECORD_STREAM_ITEMS_FIELD_NUMBER: _ClassVar[int]
    END_OBJECT_RUNNING_HASH_FIELD_NUMBER: _ClassVar[int]
    BLOCK_NUMBER_FIELD_NUMBER: _ClassVar[int]
    SIDECARS_FIELD_NUMBER: _ClassVar[int]
    hapi_proto_version: SemanticVersion
    start_object_running_hash: HashObject
    record_stream_items: _containers.RepeatedCompositeFieldContainer[RecordStreamItem]
    end_object_running_hash: HashObject
    block_number: int
    sidecars: _containers.RepeatedCompositeFieldContainer[SidecarMetadata]
    def __init__(self, hapi_proto_version: _Optional[_Union[SemanticVersion, _Mapping]] = ..., start_object_running_hash: _Optional[_Union[HashObject, _Mapping]] = ..., record_stream_items: _Optional[_Iterable[_Union[RecordStreamItem, _Mapping]]] = ..., end_object_running_hash: _Optional[_Union[HashObject, _Mapping]] = ..., block_number: _Optional[int] = ..., sidecars: _Optional[_Iterable[_Union[SidecarMetadata, _Mapping]]] = ...) -> None: ...

class TransactionSidecarRecord(_message.Message):
    __slots__ = ("consensus_timestamp", "migration", "state_changes", "actions", "bytecode", "syncnode_delivery")
    CONSENSUS_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    STATE_CHANGES_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    BYTECODE_FIELD_NUMBER: _ClassVar[int]
    SYNCNODE_DELIVERY_FIELD_NUMBER: _ClassVar[int]
    consensus_timestamp: Timestamp
    migration: bool
    state_changes: bytes
    actions: bytes
    bytecode: bytes
    syncnode_delivery: SyncnodeDelivery
    def __init__(self, consensus_timestamp: _Optional[_Union[Timestamp, _Mapping]] = ..., migration: _Optional[bool] = ..., state_changes: _Optional[bytes] = ..., actions: _Optional[bytes] = ..., bytecode: _Optional[bytes] = ..., syncnode_delivery: _Optional[_Union[SyncnodeDelivery, _Mapping]] = ...) -> None: ...

class SidecarFile(_message.Message):
    __slots__ = ("sidecar_records",)
    SIDECAR_RECORDS_FIELD_NUMBER: _ClassVar[int]
    sidecar_records: _containers.RepeatedCompositeFieldContainer[TransactionSidecarRecord]
    def __init__(self, sidecar_records: _Optional[_Iterable[_Union[TransactionSidecarRecord, _Mapping]]] = ...) -> None: ...

class SignatureObject(_message.Message):
    __slots__ = ("type", "length", "checksum", "signature", "hash_object")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    HASH_OBJECT_FIELD_NUMBER: _ClassVar[int]
    type: SignatureType
    length: int
    checksum: int
    signature: bytes
    hash_object: HashObject
    def __init__(self, type: _Optional[_Union[SignatureType, str]] = ..., length: _Optional[int] = ..., checksum: _Optional[int] = ..., signature: _Optional[bytes] = ..., hash_object: _Optional[_Union[HashObject, _Mapping]] = ...) -> None: ...

class SignatureFile(_message.Message):
    __slots__ = ("file_signature", "metadata_signature", "secondary_file_signature", "secondary_metadata_signature")
    FILE_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    METADATA_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    SECONDARY_FILE_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    SECONDARY_METADATA_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    file_signature: SignatureObject
    metadata_signature: SignatureObject
    secondary_file_signature: SignatureObject
    secondary_metadata_signature: SignatureObject
    def __init__(self, file_signature: _Optional[_Union[SignatureObject, _Mapping]] = ..., metadata_signature: _Optional[_Union[SignatureObject, _Mapping]] = ..., secondary_file_signature: _Optional[_Union[SignatureObject, _Mapping]] = ..., secondary_metadata_signature: _Optional[_Union[SignatureObject, _Mapping]] = ...) -> None: ...

class TransactionRecordHeader(_message.Message):
    __slots__ = ("transaction_hash", "consensus_timestamp")
    TRANSACTION_HASH_FIELD_NUMBER: _ClassVar[int]
    CONSENSUS_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    transaction_hash: bytes
    consensus_timestamp: Timestamp
    def __init__(self, transaction_hash: _Optional[bytes] = ..., consensus_timestamp: _Optional[_Union[Timestamp, _Mapping]] = ...) -> None: ...

class SyncnodeRecord(_message.Message):
    __slots__ = ("transaction_hash", "consensus_timestamp", "event")
    TRANSACTION_HASH_FIELD_NUMBER: _ClassVar[int]
    CONSENSUS_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    transaction_hash: bytes
    consensus_timestamp: Timestamp
    event: SyncnodeEventInfo
    def __init__(self, transaction_hash: _Optional[bytes] = ..., consensus_timestamp: _Optional[_Union[Timestamp, _Mapping]] = ..., event: _Optional[_Union[SyncnodeEventInfo, _Mapping]] = ...) -> None: ...

class SyncnodeEventInfo(_message.Message):
    __slots__ = ("message_id", "channel", "sender", "lamport")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    LAMPORT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    channel: str
    sender: str
    lamport: int
    def __init__(self, message_id: _Optional[str] = ..., channel: _Optional[str] = ..., sender: _Optional[str] = ..., lamport: _Optional[int] = ...) -> None: ...

class SyncnodeDelivery(_message.Message):
    __slots__ = ("message_id", "seq", "received_at_ms")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    seq: int
    received_at_ms: int
    def __init__(self, message_id: _Optional[str] = ..., seq: _Optional[int] = ..., received_at_ms: _Optional[int] = ...) -> None: ...
