"""Request and response headers.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id
nullable string; v2 (flexible request versions) adds a tag buffer, but client_id keeps its
int16 length so any broker can read the header of any version. Response header v0:
correlation_id; v1 (flexible response versions) adds a tag buffer, except ApiVersions,
whose response header is always v0 so that a client can read the reply to a version the
broker does not know. Pure functions over _codec Reader/Writer, any thread.
"""

from typing import NamedTuple

from .api_keys import ApiKey
from .messages import ALL

REQUESTS = {m.api_key: m for m in ALL if m.kind == "request"}
RESPONSES = {m.api_key: m for m in ALL if m.kind == "response"}


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def request_is_flexible(api_key, api_version):
    """Header v2 or v1? Decided by the spec's first flexible version, also for versions
    above what we serve (their header must still parse); unknown keys read as v1."""
    msg = REQUESTS.get(api_key)
    return msg is not None and msg.is_flexible(api_version)


def response_is_flexible(api_key, api_version):
    """Response header v1 (with a tag buffer) or v0."""
    if api_key == ApiKey.API_VERSIONS:
        return False
    msg = RESPONSES.get(api_key)
    return msg is not None and msg.is_flexible(api_version)


def read_request_header(r):
    """Read a request header from Reader ``r``; codec errors propagate."""
    api_key = r.int16()
    api_version = r.int16()
    correlation_id = r.int32()
    client_id = r.nullable_string()
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    if request_is_flexible(api_key, api_version):
        r.tagged_fields()
    return header


def write_request_header(w, api_key, api_version, correlation_id, client_id):
    w.int16(api_key)
    w.int16(api_version)
    w.int32(correlation_id)
    w.nullable_string(client_id)
    if request_is_flexible(api_key, api_version):
        w.uvarint(0)


def write_response_header(w, api_key, api_version, correlation_id):
    w.int32(correlation_id)
    if response_is_flexible(api_key, api_version):
        w.uvarint(0)


def read_response_header(r, api_key, api_version):
    """Read a response header; returns the correlation id."""
    correlation_id = r.int32()
    if response_is_flexible(api_key, api_version):
        r.tagged_fields()
    return correlation_id
