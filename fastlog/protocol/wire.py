"""Whole frames: header plus body, for both sides of a connection.

Broker side: decode_request_header → decode_request → (handler) → encode_response.
Client side (fastlog.client, tests): encode_request → decode_response.
A "frame" here is the bytes after the 4-byte size prefix; ``framed=True`` on the encoders
prepends that prefix. Decoding never copies record sets (memoryviews into the frame) and
turns every malformed input into InvalidRequestError / ProtocolError (both CodecErrors).
Stateless apart from the per-version plan caches filled on first use: any thread.
"""

from fastlog._codec import CodecError, Reader, Writer

from .api_keys import ApiKey
from .errors import Errors, InvalidRequestError, ProtocolError, UnsupportedVersionError
from .headers import (
    REQUESTS,
    RESPONSES,
    RequestHeader,
    read_request_header,
    read_response_header,
    write_request_header,
    write_response_header,
)
from .versions import SUPPORTED_VERSIONS, api_versions_response

_API_VERSIONS_V0 = RESPONSES[ApiKey.API_VERSIONS].encoder(0)


def decode_request_header(frame):
    """Parse the request header of ``frame`` → (RequestHeader, body_offset).

    Raises UnsupportedVersionError (carrying the header and body offset) for an unknown
    API key or a version outside SUPPORTED_VERSIONS, InvalidRequestError for a header that
    cannot be read at all.
    """
    r = Reader(frame)
    try:
        header = read_request_header(r)
    except CodecError as e:
        raise InvalidRequestError(f"unreadable request header: {e}") from None
    rng = SUPPORTED_VERSIONS.get(header.api_key)
    if rng is None:
        raise UnsupportedVersionError(f"unknown API key {header.api_key}", header, r.pos)
    if not rng[0] <= header.api_version <= rng[1]:
        raise UnsupportedVersionError(
            f"{ApiKey(header.api_key).name} v{header.api_version} is not served "
            f"(serving {rng[0]}-{rng[1]})", header, r.pos)
    return header, r.pos


def decode_request(api_key, api_version, frame, body_offset):
    """Decode the body of a request whose header decode_request_header accepted."""
    try:
        decode = REQUESTS[api_key].decoder(api_version)
    except (KeyError, ValueError):
        raise InvalidRequestError(f"no description for API {api_key} v{api_version}") from None
    try:
        return decode(Reader(frame, body_offset))
    except InvalidRequestError:
        raise
    except Exception as e:  # noqa: BLE001 - every malformed body must become one error type
        raise InvalidRequestError(
            f"malformed {REQUESTS[api_key].root} v{api_version} body: {e}") from e


def encode_response(api_key, api_version, correlation_id, body, framed=False):
    """Response header + body as a list of parts (bytes, and for records the memoryviews /
    FileRegions given, uncopied). ``body`` is a dict, a generated struct object or any
    object with the attributes; missing fields take the spec defaults."""
    w = Writer()
    if framed:
        w.int32(0)
    write_response_header(w, api_key, api_version, correlation_id)
    RESPONSES[api_key].encoder(api_version)(w, body)
    if framed:
        w.patch_int32(0, len(w) - 4)
    return w.getparts()


def unsupported_version_response(header, framed=False):
    """The reply to a request whose version we do not serve, or None if Kafka would close
    the connection instead. Only ApiVersions gets a reply: response header v0 and a
    v0-format body {error_code=UNSUPPORTED_VERSION, api_keys=[our table]} (KIP-511), which
    every client reads before retrying with a version from the table."""
    if header.api_key != ApiKey.API_VERSIONS:
        return None
    w = Writer()
    if framed:
        w.int32(0)
    w.int32(header.correlation_id)
    _API_VERSIONS_V0(w, api_versions_response(Errors.UNSUPPORTED_VERSION))
    if framed:
        w.patch_int32(0, len(w) - 4)
    return w.getparts()


def encode_request(api_key, api_version, correlation_id, client_id, body, framed=False):
    """Request header + body as bytes (client side)."""
    w = Writer()
    if framed:
        w.int32(0)
    write_request_header(w, api_key, api_version, correlation_id, client_id)
    REQUESTS[api_key].encoder(api_version)(w, body)
    if framed:
        w.patch_int32(0, len(w) - 4)
    return w.getvalue()


def decode_response(api_key, api_version, frame, offset=0):
    """Decode a response frame → (correlation_id, body object). Raises ProtocolError."""
    try:
        decode = RESPONSES[api_key].decoder(api_version)
    except (KeyError, ValueError):
        raise ProtocolError(f"no description for API {api_key} v{api_version}") from None
    try:
        r = Reader(frame, offset)
        correlation_id = read_response_header(r, api_key, api_version)
        return correlation_id, decode(r)
    except ProtocolError:
        raise
    except Exception as e:  # noqa: BLE001 - every malformed body must become one error type
        raise ProtocolError(
            f"malformed {RESPONSES[api_key].root} v{api_version} response: {e}") from e


def warm_up():
    """Compile every served (api, version) plan now rather than on first use (broker
    startup calls this so the first request of each kind pays no compile time)."""
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        for version in range(lo, hi + 1):
            REQUESTS[key].decoder(version)
            RESPONSES[key].encoder(version)


def new_response(api_key, **fields):
    """A response root object with spec defaults (alternative to a dict)."""
    return RESPONSES[api_key].new(**fields)


__all__ = [
    "RequestHeader", "decode_request_header", "decode_request", "encode_response",
    "unsupported_version_response", "encode_request", "decode_response", "new_response",
    "warm_up",
]
