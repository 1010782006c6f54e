from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class DistancesRequest(_message.Message):
    __slots__ = ("model", "public_key_n", "encrypted_levels", "encrypted_square_norm")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_N_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTED_LEVELS_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTED_SQUARE_NORM_FIELD_NUMBER: _ClassVar[int]
    model: str
    public_key_n: bytes
    encrypted_levels: _containers.RepeatedScalarFieldContainer[bytes]
    encrypted_square_norm: bytes
    def __init__(self, model: _Optional[str] = ..., public_key_n: _Optional[bytes] = ..., encrypted_levels: _Optional[_Iterable[bytes]] = ..., encrypted_square_norm: _Optional[bytes] = ...) -> None: ...

class DistancesResponse(_message.Message):
    __slots__ = ("encrypted_distances", "k")
    ENCRYPTED_DISTANCES_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    encrypted_distances: _containers.RepeatedScalarFieldContainer[bytes]
    k: int
    def __init__(self, encrypted_distances: _Optional[_Iterable[bytes]] = ..., k: _Optional[int] = ...) -> None: ...

class LabelsRequest(_message.Message):
    __slots__ = ("model", "indices")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INDICES_FIELD_NUMBER: _ClassVar[int]
    model: str
    indices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, model: _Optional[str] = ..., indices: _Optional[_Iterable[int]] = ...) -> None: ...

class LabelsResponse(_message.Message):
    __slots__ = ("labels",)
    LABELS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, labels: _Optional[_Iterable[int]] = ...) -> None: ...
