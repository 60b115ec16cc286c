"""BrokerConnection: version negotiation, pipelining, and failures, over real sockets."""

import asyncio
import struct

import pytest

from fastlog.client import errors
from fastlog.client.connection import BrokerConnection
from fastlog.client.versions import ApiKey, client_range
from fastlog.protocol import SUPPORTED_VERSIONS


def _host_port(bootstrap):
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def test_negotiates_highest_common_version(bootstrap, arun):
    async def go():
        conn = await BrokerConnection(*_host_port(bootstrap)).connect()
        try:
            for key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.LIST_OFFSETS):
                lo, hi = client_range(key)
                blo, bhi = conn.broker_versions[key]
                assert conn.version(key) == min(hi, bhi)
                assert conn.version(key) >= max(lo, blo)
        finally:
            await conn.close()

    arun(go())


def test_pipelined_requests_are_matched_in_order(bootstrap, arun):
    async def go():
        conn = await BrokerConnection(*_host_port(bootstrap)).connect()
        try:
            futs = [conn.submit(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation":
                                                  False}) for _ in range(200)]
            await conn.drain()
            answers = await asyncio.gather(*futs)
            assert len(answers) == 200
            assert all(a.brokers for a in answers)
        finally:
            await conn.close()

    arun(go())


async def _fake_broker(handler):
    """A one-connection TCP peer on a free port running handler(reader, writer)."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_api_versions_falls_back_to_the_version_the_broker_names(arun):
    """A broker that only speaks ApiVersions v0 answers error 35 in v0 format (KIP-511)."""
    from fastlog.protocol import api_versions_response, encode_response

    seen = []

    async def handler(reader, writer):
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                key, version, cid = struct.unpack_from(">hhi", frame, 0)
                seen.append(version)
                body = api_versions_response(0 if version == 0 else 35)
                body["api_keys"] = [k for k in body["api_keys"] if k["api_key"] != 18]
                body["api_keys"].append({"api_key": 18, "min_version": 0, "max_version": 0})
                parts = encode_response(18, 0, cid, body, framed=True)
                writer.write(b"".join(bytes(p) for p in parts))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def go():
        server, port = await _fake_broker(handler)
        async with server:
            conn = await BrokerConnection("127.0.0.1", port).connect()
            await conn.close()
        return conn

    conn = arun(go())
    assert seen == [min(2, client_range(ApiKey.API_VERSIONS)[1]), 0]
    assert conn.broker_versions[ApiKey.API_VERSIONS] == (0, 0)
    assert conn.broker_versions[ApiKey.PRODUCE] == SUPPORTED_VERSIONS[ApiKey.PRODUCE]


def test_broker_closing_mid_request_fails_the_request(arun):
    async def handler(reader, writer):
        await reader.readexactly(4)
        writer.close()

    async def go():
        server, port = await _fake_broker(handler)
        async with server:
            with pytest.raises(errors.BrokerUnavailable) as exc:
                await BrokerConnection("127.0.0.1", port).connect()
        assert "closed the connection" in str(exc.value) or "closed" in str(exc.value)

    arun(go())


def test_silent_broker_times_out(arun):
    async def handler(reader, writer):
        await reader.read(1 << 16)
        await asyncio.sleep(5)

    async def go():
        server, port = await _fake_broker(handler)
        async with server:
            with pytest.raises(errors.ClientTimeout):
                await BrokerConnection("127.0.0.1", port, request_timeout_ms=300).connect()

    arun(go())


def test_connect_to_closed_port(arun, closed_port):
    port = closed_port

    async def go():
        with pytest.raises(errors.BrokerUnavailable) as exc:
            await BrokerConnection("127.0.0.1", port).connect()
        assert "connection refused" in str(exc.value)

    arun(go())
