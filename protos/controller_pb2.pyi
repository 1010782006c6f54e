from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class OpenSessionRequest(_message.Message):
    __slots__ = ("first_trace", "analyst_public_key", "analyst_signature", "authority_signature", "authority_expires", "person_id")
    FIRST_TRACE_FIELD_NUMBER: _ClassVar[int]
    ANALYST_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    ANALYST_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    AUTHORITY_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    AUTHORITY_EXPIRES_FIELD_NUMBER: _ClassVar[int]
    PERSON_ID_FIELD_NUMBER: _ClassVar[int]
    first_trace: bytes
    analyst_public_key: bytes
    analyst_signature: bytes
    authority_signature: bytes
    authority_expires: int
    person_id: str
    def __init__(self, first_trace: _Optional[bytes] = ..., analyst_public_key: _Optional[bytes] = ..., analyst_signature: _Optional[bytes] = ..., authority_signature: _Optional[bytes] = ..., authority_expires: _Optional[int] = ..., person_id: _Optional[str] = ...) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ControllerDescription(_message.Message):
    __slots__ = ("controller_id", "dataset_sha256", "rules_sha256", "instruction_format")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    DATASET_SHA256_FIELD_NUMBER: _ClassVar[int]
    RULES_SHA256_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FORMAT_FIELD_NUMBER: _ClassVar[int]
    controller_id: str
    dataset_sha256: bytes
    rules_sha256: bytes
    instruction_format: int
    def __init__(self, controller_id: _Optional[str] = ..., dataset_sha256: _Optional[bytes] = ..., rules_sha256: _Optional[bytes] = ..., instruction_format: _Optional[int] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class NextRequest(_message.Message):
    __slots__ = ("session_id", "trace", "pointer", "spec")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    POINTER_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    trace: bytes
    pointer: str
    spec: bytes
    def __init__(self, session_id: _Optional[str] = ..., trace: _Optional[bytes] = ..., pointer: _Optional[str] = ..., spec: _Optional[bytes] = ...) -> None: ...

class NextResponse(_message.Message):
    __slots__ = ("position", "last", "result_json", "abort_reason")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ABORT_REASON_FIELD_NUMBER: _ClassVar[int]
    position: int
    last: bool
    result_json: str
    abort_reason: str
    def __init__(self, position: _Optional[int] = ..., last: _Optional[bool] = ..., result_json: _Optional[str] = ..., abort_reason: _Optional[str] = ...) -> None: ...
