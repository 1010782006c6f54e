from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelInfo(_message.Message):
    __slots__ = ("name", "dataset", "d", "bits", "class_names", "feature_names", "feature_lows", "feature_highs", "algorithm", "global_p_error", "rounding")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    D_FIELD_NUMBER: _ClassVar[int]
    BITS_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAMES_FIELD_NUMBER: _ClassVar[int]
    FEATURE_NAMES_FIELD_NUMBER: _ClassVar[int]
    FEATURE_LOWS_FIELD_NUMBER: _ClassVar[int]
    FEATURE_HIGHS_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_P_ERROR_FIELD_NUMBER: _ClassVar[int]
    ROUNDING_FIELD_NUMBER: _ClassVar[int]
    name: str
    dataset: str
    d: int
    bits: int
    class_names: _containers.RepeatedScalarFieldContainer[str]
    feature_names: _containers.RepeatedScalarFieldContainer[str]
    feature_lows: _containers.RepeatedScalarFieldContainer[float]
    feature_highs: _containers.RepeatedScalarFieldContainer[float]
    algorithm: str
    global_p_error: float
    rounding: str
    def __init__(self, name: _Optional[str] = ..., dataset: _Optional[str] = ..., d: _Optional[int] = ..., bits: _Optional[int] = ..., class_names: _Optional[_Iterable[str]] = ..., feature_names: _Optional[_Iterable[str]] = ..., feature_lows: _Optional[_Iterable[float]] = ..., feature_highs: _Optional[_Iterable[float]] = ..., algorithm: _Optional[str] = ..., global_p_error: _Optional[float] = ..., rounding: _Optional[str] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class GetClientSpecsRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class GetClientSpecsResponse(_message.Message):
    __slots__ = ("model", "client_specs", "specs_sha256")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SPECS_FIELD_NUMBER: _ClassVar[int]
    SPECS_SHA256_FIELD_NUMBER: _ClassVar[int]
    model: ModelInfo
    client_specs: bytes
    specs_sha256: str
    def __init__(self, model: _Optional[_Union[ModelInfo, _Mapping]] = ..., client_specs: _Optional[bytes] = ..., specs_sha256: _Optional[str] = ...) -> None: ...

class KeyChunk(_message.Message):
    __slots__ = ("model", "total_size", "sha256", "data", "warmup_query")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    WARMUP_QUERY_FIELD_NUMBER: _ClassVar[int]
    model: str
    total_size: int
    sha256: str
    data: bytes
    warmup_query: bytes
    def __init__(self, model: _Optional[str] = ..., total_size: _Optional[int] = ..., sha256: _Optional[str] = ..., data: _Optional[bytes] = ..., warmup_query: _Optional[bytes] = ...) -> None: ...

class RegisterKeysResponse(_message.Message):
    __slots__ = ("key_id", "size")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    size: int
    def __init__(self, key_id: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("model", "key_id", "encrypted_query")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTED_QUERY_FIELD_NUMBER: _ClassVar[int]
    model: str
    key_id: str
    encrypted_query: bytes
    def __init__(self, model: _Optional[str] = ..., key_id: _Optional[str] = ..., encrypted_query: _Optional[bytes] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("encrypted_class",)
    ENCRYPTED_CLASS_FIELD_NUMBER: _ClassVar[int]
    encrypted_class: bytes
    def __init__(self, encrypted_class: _Optional[bytes] = ...) -> None: ...

class ClassifyBatchRequest(_message.Message):
    __slots__ = ("model", "key_id", "encrypted_queries")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTED_QUERIES_FIELD_NUMBER: _ClassVar[int]
    model: str
    key_id: str
    encrypted_queries: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, model: _Optional[str] = ..., key_id: _Optional[str] = ..., encrypted_queries: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ClassifyBatchResponse(_message.Message):
    __slots__ = ("encrypted_classes",)
    ENCRYPTED_CLASSES_FIELD_NUMBER: _ClassVar[int]
    encrypted_classes: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, encrypted_classes: _Optional[_Iterable[bytes]] = ...) -> None: ...
