# fastlog/server/authenticator.py — who is on the other end of a connection: SASL
# authentication on SASL_PLAINTEXT and SASL_SSL listeners (Kafka's SaslServerAuthenticator)
# and the principal every connection carries for the authorizer.
#
# Owns: ListenerSecurity, one per listener (its security protocol, sasl.enabled.mechanisms,
# the PLAIN users of its JAAS line, the SCRAM credential lookup), and
# SaslServerAuthenticator, one per connection of a SASL listener, kept in
# conn.state["authenticator"] until the client has authenticated. The exchange, as Kafka's:
#
#   HANDSHAKE     ApiVersions (answered as usual) or SaslHandshake v0/v1 naming a
#                 mechanism; one not enabled gets UNSUPPORTED_SASL_MECHANISM with the
#                 enabled list, then the connection closes
#   AUTHENTICATE  after SaslHandshake v1: SaslAuthenticate requests carrying the tokens;
#                 after v0: the tokens themselves, each a frame of its own (4-byte size,
#                 token), answered by a frame holding the server's token
#   COMPLETE      conn.state["principal"] = "User:<name>"; the authenticator is dropped and
#                 requests go to their handlers
#   FAILED        SASL_AUTHENTICATION_FAILED (58) with a message that does not tell an
#                 unknown user from a wrong password, then the connection closes (a v0
#                 client, which cannot read an error, is closed at once)
#
# Any other request before COMPLETE closes the connection, as does a frame larger than a
# SASL exchange needs. A connection not authenticated within
# fastlog.sasl.authentication.timeout.ms of its first request is closed (a loop.call_later
# cancelled on success; one that sends nothing at all is closed by connections.max.idle.ms,
# as the network layer does not tell handlers about a connection before its first frame).
# Failures are logged with the client's address, the listener and the mechanism, never a
# username or a password, rate-limited. Connections of PLAINTEXT (and, for now, SSL)
# listeners are User:ANONYMOUS.
# Called from: KafkaApis (fastlog/server/apis.py) on the broker's API loop only.
"""SASL authentication of client connections."""

from __future__ import annotations

import logging
import secrets

from fastlog._net import CloseConnection
from fastlog.logs import RateLimitedLog
from fastlog.protocol import ApiKey, Errors
from fastlog.security import (
    ANONYMOUS,
    PlainServer,
    PrincipalMapper,
    ScramCredential,
    ScramServer,
    SecurityConfigError,
    peer_principal,
    plain_users,
)
from fastlog.security.errors import AuthenticationFailed
from fastlog.security.sasl import PLAIN
from fastlog.server.config import SASL_PROTOCOLS, TLS_PROTOCOLS, KafkaConfig

log = logging.getLogger("fastlog.server.authenticator")

# Kafka's sasl.server.max.receive.size default: no SASL request or token is larger.
MAX_SASL_RECEIVE_SIZE = 524288
HANDSHAKE, AUTHENTICATE, FAILED = "handshake", "authenticate", "failed"
# Requests a client may send before it has authenticated, in each state.
_ALLOWED = {
    HANDSHAKE: (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE),
    AUTHENTICATE: (ApiKey.SASL_AUTHENTICATE,),
    FAILED: (),
}


def user_principal(name: str) -> str:
    return f"User:{name}"


class ListenerSecurity:
    """One listener's authentication settings, built once at startup."""

    def __init__(self, name: str, config: KafkaConfig, metadata, timeout_ms: int,
                 failure_log: RateLimitedLog, fake_salt_key: bytes):
        self.name = name
        self.protocol = config.listener_security_protocol(name)
        self.sasl = self.protocol in SASL_PROTOCOLS
        cfg = config.listener_config(name)
        self.mechanisms = tuple(cfg["sasl.enabled.mechanisms"]) if self.sasl else ()
        entry = cfg.get("plain.sasl.jaas.config")
        self.plain_users = plain_users(entry) if entry is not None else {}
        # SSL listeners: the client certificate's subject, mapped by these rules, is the
        # principal (SASL_SSL: the SASL user is)
        self.tls = self.protocol in TLS_PROTOCOLS
        self.principal_mapper = (PrincipalMapper(cfg["ssl.principal.mapping.rules"])
                                 if self.tls else None)
        self.metadata = metadata
        self.timeout = timeout_ms / 1000.0
        self.failure_log = failure_log
        self.fake_salt_key = fake_salt_key

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        """The stored credential of ``user`` for ``mechanism``, None when there is none (a
        malformed stored one counts as none, with a log line)."""
        text = self.metadata.user_config(user).get(mechanism)
        if text is None:
            return None
        try:
            return ScramCredential.from_kafka_string(text)
        except SecurityConfigError as e:
            self.failure_log.log(logging.WARNING, "ignoring the stored %s credential of a user: %s",
                                 mechanism, e)
            return None

    def mechanism_server(self, mechanism: str):
        if mechanism == PLAIN:
            return PlainServer(self.plain_users)
        return ScramServer(mechanism, lambda user: self.scram_credential(mechanism, user),
                           self.fake_salt_key)


def build_listener_security(config: KafkaConfig, metadata) -> dict[str, ListenerSecurity]:
    """ListenerSecurity of every listener, by name."""
    failure_log = RateLimitedLog(log)
    key = secrets.token_bytes(32)  # the fake salts of unknown users, for this run
    timeout = config["fastlog.sasl.authentication.timeout.ms"]
    return {name: ListenerSecurity(name, config, metadata, timeout, failure_log, key)
            for name, _, _ in config.listeners}


def open_connection(conn, security: ListenerSecurity, loop) -> None:
    """Set up a connection's state at its first request: User:ANONYMOUS, or, on a SASL
    listener, an authenticator and its deadline."""
    state = conn.state
    if not security.sasl:
        # SSL: User:<mapped subject DN> of the client certificate (ANONYMOUS without one);
        # a DN that no mapping rule takes fails the connection, as in Kafka
        if not security.tls:
            state["principal"] = ANONYMOUS
            return
        try:
            state["principal"] = peer_principal(conn, security.principal_mapper)
        except AuthenticationFailed as e:
            security.failure_log.log(logging.WARNING, "closing a TLS connection from %s: %s",
                                     conn.peer, e)
            raise CloseConnection("no principal for the client certificate") from None
        return
    state["principal"] = None
    state["authenticator"] = SaslServerAuthenticator(conn, security, loop)


class SaslServerAuthenticator:
    """The server side of one connection's SASL exchange (see the module comment)."""

    def __init__(self, conn, security: ListenerSecurity, loop):
        self.conn = conn
        self.security = security
        self.loop = loop
        self.state = HANDSHAKE
        self.raw_tokens = False   # SaslHandshake v0: tokens come as bare frames
        self.mechanism: str | None = None
        self.server = None
        self._deadline = loop.call_later(security.timeout, self._expire)

    # ---- gate (KafkaApis.handle) ----------------------------------------------------
    def check_request(self, frame) -> None:
        """Refuse (CloseConnection) a frame that may not come now: too large, or a
        request other than the ones the exchange is waiting for."""
        if len(frame) > MAX_SASL_RECEIVE_SIZE:
            self._refuse(f"a frame of {len(frame)} bytes during SASL authentication")
        if self.raw_tokens:
            return
        api_key = int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1
        if api_key not in _ALLOWED[self.state]:
            try:
                what = ApiKey(api_key).name
            except ValueError:
                what = f"API key {api_key}"
            self._refuse(f"{what} before SASL authentication completed")

    def _refuse(self, what: str):
        self.state = FAILED
        self._deadline.cancel()
        self.security.failure_log.log(
            logging.WARNING, "closing connection %s from %s on listener %s: %s",
            self.conn.id, self.conn.peer, self.security.name, what)
        raise CloseConnection(what)

    def _expire(self) -> None:
        if self.conn.state.get("authenticator") is self and not self.conn.closed:
            self.state = FAILED
            self.security.failure_log.log(
                logging.WARNING, "closing connection %s from %s on listener %s: not "
                "authenticated within %g s", self.conn.id, self.conn.peer, self.security.name,
                self.security.timeout)
            self.conn.close()

    # ---- SaslHandshake ----------------------------------------------------------------
    def handshake(self, version: int, mechanism: str) -> dict:
        enabled = list(self.security.mechanisms)
        if mechanism not in enabled:
            self.state = FAILED
            self._close_after_response("unsupported mechanism")
            return {"error_code": Errors.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}
        self.mechanism = mechanism
        self.server = self.security.mechanism_server(mechanism)
        self.state = AUTHENTICATE
        self.raw_tokens = version == 0
        return {"error_code": Errors.NONE, "mechanisms": enabled}

    # ---- tokens -----------------------------------------------------------------------
    def authenticate(self, auth_bytes: bytes) -> dict:
        """One SaslAuthenticate request: its response body."""
        try:
            answer = self.server.step(bytes(auth_bytes))
        except AuthenticationFailed as e:
            self._failed()
            return {"error_code": Errors.SASL_AUTHENTICATION_FAILED, "error_message": e.message,
                    "auth_bytes": b""}
        self._maybe_complete()
        return {"error_code": Errors.NONE, "error_message": None, "auth_bytes": answer,
                "session_lifetime_ms": 0}

    def raw_token(self, frame) -> list:
        """One token after SaslHandshake v0: the response parts (the server's token)."""
        try:
            answer = self.server.step(bytes(frame))
        except AuthenticationFailed:
            self._failed(close=False)
            raise CloseConnection("SASL authentication failed") from None
        self._maybe_complete()
        return [answer]

    def _maybe_complete(self) -> None:
        if not self.server.complete:
            return
        self._deadline.cancel()
        state = self.conn.state
        state["principal"] = user_principal(self.server.username)
        del state["authenticator"]
        self.server = None

    def _failed(self, close: bool = True) -> None:
        self.state = FAILED
        self.server = None
        self._deadline.cancel()
        self.security.failure_log.log(
            logging.WARNING, "failed authentication of connection %s from %s on listener %s "
            "with SASL mechanism %s", self.conn.id, self.conn.peer, self.security.name,
            self.mechanism)
        if close:
            self._close_after_response("authentication failed")

    def _close_after_response(self, why: str) -> None:
        # The response is queued on the socket when the handler returns; the close runs
        # after it on the loop (Kafka, too, sends the error and then closes).
        self._deadline.cancel()
        self.loop.call_soon(self.conn.close)
