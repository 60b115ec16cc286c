# fastlog/security/plain.py — SASL/PLAIN (RFC 4616) on the broker, as Kafka serves it.
#
# Owns: PlainServer, one per connection: the client's single message
#     [authzid] NUL authcid NUL passwd          (UTF-8)
# checked against the listener's JAAS options user_<name>="<password>" (Kafka's
# PlainServerCallbackHandler); the authorization id must be empty or equal the username;
# the answer is empty bytes. Passwords are compared with hmac.compare_digest, and an
# unknown user is compared against a stand-in so that the failure, its message and its
# cost are the same as for a wrong password.
# Called from: the network layer's SaslAuthenticate handling, on the connection's thread.
"""SASL/PLAIN broker side."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from .errors import AuthenticationFailed
from .jaas import JaasEntry
from .sasl import MAX_SASL_MESSAGE_BYTES

USER_PREFIX = "user_"


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """username → password from a PlainLoginModule entry's user_<name> options."""
    return {k[len(USER_PREFIX):]: v for k, v in entry.options.items()
            if k.startswith(USER_PREFIX) and len(k) > len(USER_PREFIX)}


def parse_plain_message(message: bytes) -> tuple[str, str, str]:
    """(authzid, username, password) of a PLAIN message, or AuthenticationFailed."""
    if len(message) > MAX_SASL_MESSAGE_BYTES:
        raise AuthenticationFailed("Invalid SASL/PLAIN response: message too long")
    try:
        tokens = bytes(message).decode("utf-8").split("\x00")
    except UnicodeDecodeError:
        raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
    if len(tokens) != 3:
        raise AuthenticationFailed(
            f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
    authzid, username, password = tokens
    if not username:
        raise AuthenticationFailed("Authentication failed: username not specified")
    if not password:
        raise AuthenticationFailed("Authentication failed: password not specified")
    return authzid, username, password


class PlainServer:
    """The broker's side of one PLAIN exchange; ``users`` maps username → password (see
    plain_users). After a successful ``step`` ``complete`` is true and ``username`` set."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]):
        self._users = users
        self.complete = False
        self.username: str | None = None

    def step(self, client_bytes: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("Authentication failed: SASL/PLAIN exchange already finished")
        authzid, username, password = parse_plain_message(client_bytes)
        expected = self._users.get(username)
        given = password.encode("utf-8")
        known = expected is not None
        reference = expected.encode("utf-8") if known else given + b"\x00"
        if not hmac.compare_digest(given, reference) or not known:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username")
        self.username = username
        self.complete = True
        return b""
