# fastlog/client/connection.py: one asyncio TCP connection to one broker.
#
# Owns the Kafka framing on the client side: each request goes out as a 4-byte big-endian
# size plus the header and body that fastlog.protocol encodes; responses come back in
# request order (Kafka guarantees per-connection order), so a FIFO of pending requests
# matches them, and the correlation id is checked against the head of that FIFO. Requests
# may be pipelined: submit() writes and returns a future without waiting for earlier
# answers. On connect it negotiates ApiVersions and afterwards picks, for each API, the
# highest version that both this client and the broker speak. With SASL settings
# (fastlog.client.security) it authenticates next, before any other request.
#
# All methods run on the event loop that called connect(); the object is not thread-safe.

from __future__ import annotations

import asyncio
import collections
import socket
import struct

from fastlog import protocol
from fastlog.client import errors
from fastlog.client.versions import ApiKey, client_range

_size = struct.Struct(">i")
# Bound on a response frame we are willing to buffer: a fetch answer is bounded by the
# fetch_max_bytes we ask for, so anything far larger means a confused peer.
MAX_RESPONSE_BYTES = 1 << 30


class BrokerConnection:
    """A connection to host:port that sends requests and matches their responses."""

    def __init__(self, host: str, port: int, *, client_id: str = "fastlog",
                 node_id: int | None = None, request_timeout_ms: int = 30000,
                 connect_timeout_ms: int = 10000, security=None):
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.security = security   # fastlog.client.security.ClientSecurity, or None
        self.request_timeout = request_timeout_ms / 1000.0
        self.connect_timeout = connect_timeout_ms / 1000.0
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: collections.deque = collections.deque()
        self._correlation_id = 0
        self._read_task: asyncio.Task | None = None
        self._closed_error: Exception | None = None
        self._chosen: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._writer is not None and self._closed_error is None

    async def connect(self) -> BrokerConnection:
        try:
            tls = self.security.ssl_context if self.security is not None else None
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=1 << 20, ssl=tls,
                                        server_hostname=self.host if tls else None),
                self.connect_timeout)
        except (TimeoutError, OSError) as exc:
            raise errors.BrokerUnavailable(
                f"cannot connect to broker {self.address}: {_reason(exc)}") from None
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        try:
            await self._negotiate_versions()
            if self.security is not None and self.security.sasl:
                await self.security.authenticate(self)
        except BaseException:
            await self.close()
            raise
        return self

    async def _negotiate_versions(self) -> None:
        # v2 is understood by every broker since 0.11 and needs no flexible encoding; a
        # broker that knows only less answers error 35 in v0 format with its own range.
        version = min(2, client_range(ApiKey.API_VERSIONS)[1])
        for _ in range(2):
            resp = await self.request(ApiKey.API_VERSIONS, {}, version=version,
                                      fallback_v0=True)
            keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            if resp.error_code == errors.UNSUPPORTED_VERSION and ApiKey.API_VERSIONS in keys:
                version = min(version - 1, keys[ApiKey.API_VERSIONS][1])
                if version >= 0:
                    continue
            errors.raise_for(resp.error_code, f"ApiVersions to {self.address}")
            self.broker_versions = keys
            return
        raise errors.ProtocolMismatch(f"broker {self.address} accepts no ApiVersions version")

    def version(self, api_key: int) -> int:
        """Highest version of api_key that both sides speak (ProtocolMismatch if none)."""
        v = self._chosen.get(api_key)
        if v is not None:
            return v
        lo, hi = client_range(api_key)
        if self.broker_versions:
            blo, bhi = self.broker_versions.get(api_key, (0, -1))
            lo, hi = max(lo, blo), min(hi, bhi)
        if lo > hi:
            raise errors.ProtocolMismatch(
                f"broker {self.address} supports no version of {_api_name(api_key)} "
                f"that this client speaks")
        self._chosen[api_key] = hi
        return hi

    def supports(self, api_key: int) -> bool:
        try:
            self.version(api_key)
        except errors.ProtocolMismatch:
            return False
        return True

    def submit(self, api_key: int, request, *, version: int | None = None,
               expect_response: bool = True, fallback_v0: bool = False) -> asyncio.Future:
        """Write one request now; the future resolves to the decoded response (or None)."""
        if self._closed_error is not None:
            raise self._closed_error
        if version is None:
            version = self.version(api_key)
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        cid = self._correlation_id
        try:
            frame = protocol.encode_request(api_key, version, cid, self.client_id, request,
                                            framed=True)
        except errors.FastlogError:
            raise
        except Exception as exc:
            raise errors.ProtocolMismatch(
                f"cannot encode {_api_name(api_key)} v{version}: {exc}") from exc
        fut = asyncio.get_running_loop().create_future()
        if expect_response:
            self._pending.append((cid, api_key, version, fut, fallback_v0))
        else:
            fut.set_result(None)
        self._writer.write(frame)
        return fut

    async def request(self, api_key: int, request, *, version: int | None = None,
                      expect_response: bool = True, fallback_v0: bool = False,
                      timeout: float | None = None):
        """Send one request and wait for its response."""
        fut = self.submit(api_key, request, version=version,
                          expect_response=expect_response, fallback_v0=fallback_v0)
        await self.drain()
        return await self.wait(fut, timeout)

    async def wait(self, fut: asyncio.Future, timeout: float | None = None):
        t = self.request_timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(asyncio.shield(fut), t)
        except TimeoutError:
            fut.cancel()
            raise errors.ClientTimeout(
                f"broker {self.address} did not answer within {t:g} s") from None
        except asyncio.CancelledError:
            # Nobody waits for it any more (a timeout, Ctrl-C): cancelled, the read loop
            # skips its response and a later connection failure has no one to report to.
            fut.cancel()
            raise

    async def drain(self) -> None:
        if self._closed_error is not None:
            raise self._closed_error
        try:
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            self._fail(errors.BrokerUnavailable(
                f"connection to broker {self.address} lost: {_reason(exc)}"))
            raise self._closed_error from None

    async def _read_loop(self) -> None:
        reader = self._reader
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _size.unpack(head)
                if size < 4 or size > MAX_RESPONSE_BYTES:
                    raise errors.ProtocolMismatch(
                        f"broker {self.address} sent a frame of impossible size {size}")
                frame = await reader.readexactly(size)
                if not self._pending:
                    raise errors.ProtocolMismatch(
                        f"broker {self.address} sent a response nobody asked for")
                cid, api_key, version, fut, fallback_v0 = self._pending.popleft()
                (got,) = _size.unpack_from(frame, 0)
                if got != cid:
                    raise errors.ProtocolMismatch(
                        f"broker {self.address} answered correlation id {got}, expected {cid}")
                if fut.cancelled():
                    continue
                try:
                    resp = self._decode(api_key, version, frame, fallback_v0)
                except Exception as exc:  # noqa: BLE001 - one bad response fails its request
                    fut.set_exception(errors.ProtocolMismatch(
                        f"cannot decode {_api_name(api_key)} v{version} response from "
                        f"{self.address}: {exc}"))
                else:
                    fut.set_result(resp)
        except asyncio.CancelledError:
            self._fail(errors.BrokerUnavailable(f"connection to broker {self.address} closed"))
            raise
        except (asyncio.IncompleteReadError, OSError) as exc:
            self._fail(errors.BrokerUnavailable(
                f"connection to broker {self.address} lost: {_reason(exc)}"))
        except errors.FastlogError as exc:
            self._fail(exc)

    @staticmethod
    def _decode(api_key, version, frame, fallback_v0):
        try:
            return protocol.decode_response(api_key, version, frame)[1]
        except Exception:
            if not fallback_v0 or version == 0:
                raise
            # An ApiVersions answer to a version the broker does not speak is in v0 format.
            return protocol.decode_response(api_key, 0, frame)[1]

    def _fail(self, exc: Exception) -> None:
        if self._closed_error is None:
            self._closed_error = exc
        while self._pending:
            fut = self._pending.popleft()[3]
            if not fut.done():
                fut.set_exception(exc)
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        self._fail(errors.BrokerUnavailable(f"connection to broker {self.address} closed"))
        task, self._read_task = self._read_task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing anyway
                pass
        if self._writer is not None:
            try:
                await self._writer.wait_closed()
            except (OSError, RuntimeError):
                pass


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "the broker closed the connection"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text[0].lower() + text[1:] if text else type(exc).__name__


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api {api_key}"
