"""fastlog's Kafka wire protocol: API keys, error codes, the advertised version table,
and encode/decode of every request and response version we serve, derived from the
descriptions in messages.py by the engine in schema.py.

Broker side::

    header, off = decode_request_header(frame)          # UnsupportedVersionError carries header
    req = decode_request(header.api_key, header.api_version, frame, off)
    parts = encode_response(header.api_key, header.api_version, header.correlation_id, body)
"""

from .api_keys import ApiKey
from .errors import (
    Errors,
    InvalidRequestError,
    KafkaApiError,
    ProtocolError,
    UnsupportedVersionError,
)
from .headers import REQUESTS, RESPONSES, RequestHeader
from .versions import (
    PRODUCE_MIN_IMPLEMENTED,
    SUPPORTED_VERSIONS,
    api_versions_response,
    is_supported,
)
from .wire import (
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    new_response,
    unsupported_version_response,
    warm_up,
)

__all__ = [
    "ApiKey", "Errors", "InvalidRequestError", "KafkaApiError", "ProtocolError", "UnsupportedVersionError",
    "REQUESTS", "RESPONSES", "RequestHeader", "PRODUCE_MIN_IMPLEMENTED",
    "SUPPORTED_VERSIONS", "api_versions_response", "is_supported", "decode_request",
    "decode_request_header", "decode_response", "encode_request", "encode_response",
    "new_response", "unsupported_version_response", "warm_up",
]
