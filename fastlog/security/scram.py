# fastlog/security/scram.py — SASL SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677).
#
# Owns: ScramCredential (salt, stored_key, server_key, iterations: what Kafka stores,
# never the password) and its Kafka string form
#     salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>
# (the value of key "SCRAM-SHA-256"/"SCRAM-SHA-512" in /config/users/<user>'s config map);
# ScramServer, one per connection, the broker side of the exchange
#     client-first  n,[a=<authzid>],n=<saslname>,r=<client nonce>[,<ext>=<value>...]
#     server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
#     client-final  c=biws,r=<nonce>,p=<base64 proof>
#     server-final  v=<base64 server signature>
# and ScramClient, the same exchange from our own client. Channel binding is not
# supported (gs2 flag "n" only), as in Kafka; an unknown user gets a fake salt and the
# default iterations so the server-first message looks like a real user's, and every
# failure is one AuthenticationFailed whose message never says whether the user exists.
# Called from: the network layer's SaslAuthenticate handling, one ScramServer per
# connection on that connection's thread; the credential lookup is called once per
# exchange from the same thread. Credentials are immutable and shareable.
"""SASL/SCRAM credentials, server exchange and client exchange."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping

from .errors import AuthenticationFailed, SecurityConfigError
from .sasl import MAX_SASL_MESSAGE_BYTES, SCRAM_SHA_256, SCRAM_SHA_512

MECHANISMS = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
# Kafka's bounds (ScramMechanism.minIterations, and AlterUserScramCredentials' maximum).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096

_GS2_HEADER = "n,,"
_CHANNEL_BINDING = base64.b64encode(_GS2_HEADER.encode()).decode()  # "biws"
_FAILED = "Authentication failed: Invalid credentials"
# Printable ASCII except ',' (RFC 5802 "printable").
_NONCE = r"[\x21-\x2b\x2d-\x7e]+"
_SASLNAME = r"(?:[^=,\x00]|=2C|=3D)+"
_EXTENSIONS = r"(?:,[A-Za-z][A-Za-z0-9]*=[^,]*)*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_NONCE})(?P<extensions>{_EXTENSIONS})")
_CLIENT_FINAL = re.compile(
    rf"c=(?P<channel>[A-Za-z0-9+/=]+),r=(?P<nonce>{_NONCE}){_EXTENSIONS},p=(?P<proof>[A-Za-z0-9+/=]+)")


def check_mechanism(mechanism: str) -> str:
    if mechanism not in MECHANISMS:
        raise SecurityConfigError(
            f"SASL mechanism {mechanism!r} is not a SCRAM mechanism (use SCRAM-SHA-256 or "
            "SCRAM-SHA-512)")
    return MECHANISMS[mechanism]


def salted_password(password: str, salt: bytes, iterations: int,
                    mechanism: str = SCRAM_SHA_256) -> bytes:
    """SCRAM's Hi(password, salt, iterations): PBKDF2 with the mechanism's hash."""
    return hashlib.pbkdf2_hmac(check_mechanism(mechanism), password.encode("utf-8"), salt,
                               iterations)


def _hmac(digest: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, digest).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def escape_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_saslname(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


@dataclasses.dataclass(frozen=True)
class ScramCredential:
    """What a broker stores for one user and mechanism (Kafka's ScramCredential)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_password(cls, password: str, mechanism: str = SCRAM_SHA_256,
                      iterations: int = DEFAULT_ITERATIONS,
                      salt: bytes | None = None) -> ScramCredential:
        check_mechanism(mechanism)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise SecurityConfigError(
                f"SCRAM iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, "
                f"not {iterations}")
        salt = secrets.token_bytes(32) if salt is None else salt
        return cls.from_salted_password(salted_password(password, salt, iterations, mechanism),
                                        salt, iterations, mechanism)

    @classmethod
    def from_salted_password(cls, salted: bytes, salt: bytes, iterations: int,
                             mechanism: str = SCRAM_SHA_256) -> ScramCredential:
        """The credential of a salted password (Hi(password, salt, iterations)), which is
        what AlterUserScramCredentials carries instead of the password."""
        digest = check_mechanism(mechanism)
        client_key = _hmac(digest, salted, b"Client Key")
        return cls(
            salt=salt,
            stored_key=hashlib.new(digest, client_key).digest(),
            server_key=_hmac(digest, salted, b"Server Key"),
            iterations=iterations,
        )

    def to_kafka_string(self) -> str:
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_kafka_string(cls, text: str) -> ScramCredential:
        """Parse Kafka's stored form; a malformed one is a SecurityConfigError."""
        try:
            fields = dict(part.split("=", 1) for part in text.split(","))
            if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
                raise ValueError
            credential = cls(
                salt=base64.b64decode(fields["salt"], validate=True),
                stored_key=base64.b64decode(fields["stored_key"], validate=True),
                server_key=base64.b64decode(fields["server_key"], validate=True),
                iterations=int(fields["iterations"]),
            )
        except (ValueError, binascii.Error):
            raise SecurityConfigError(
                "a stored SCRAM credential is not of the form "
                "salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>") from None
        if credential.iterations < MIN_ITERATIONS or not credential.salt:
            raise SecurityConfigError(
                f"a stored SCRAM credential has fewer than {MIN_ITERATIONS} iterations or "
                "an empty salt")
        return credential


def credentials_from_user_config(config: Mapping[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials in one user's config map (the "config" object of Kafka's
    /config/users/<user> znode), by mechanism; other keys (quotas) are ignored."""
    return {m: ScramCredential.from_kafka_string(config[m]) for m in MECHANISMS if m in config}


# Looks up a username → its credential for the exchange's mechanism, or None if unknown.
CredentialLookup = Callable[[str], "ScramCredential | None"]


class ScramServer:
    """The broker's side of one SCRAM exchange. ``lookup_credential(username)`` returns
    the user's credential for this mechanism or None. ``fake_salt_key`` keys the fake
    salt given to unknown users: pass the same secret for the broker's lifetime so that
    asking twice for an unknown user gives the same salt, as for a real one."""

    def __init__(self, mechanism: str, lookup_credential: CredentialLookup,
                 fake_salt_key: bytes | None = None, server_nonce: str | None = None):
        self.mechanism = mechanism
        self._digest = check_mechanism(mechanism)
        self._lookup = lookup_credential
        self._fake_salt_key = fake_salt_key or secrets.token_bytes(32)
        self._state = "client-first"
        self._credential: ScramCredential | None = None
        self._user_known = False
        self._server_nonce = server_nonce or secrets.token_urlsafe(24)  # fixed only in tests
        self._nonce = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self.username: str | None = None
        self.extensions: dict[str, str] = {}

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def step(self, client_bytes: bytes) -> bytes:
        """Consume one client message and return the server's answer; the second call's
        answer is the server-final message and makes ``complete`` true."""
        try:
            if len(client_bytes) > MAX_SASL_MESSAGE_BYTES:
                raise AuthenticationFailed("Authentication failed: SCRAM message too long")
            text = bytes(client_bytes).decode("utf-8")
            if self._state == "client-first":
                return self._client_first(text)
            if self._state == "client-final":
                return self._client_final(text)
            raise AuthenticationFailed("Authentication failed: SCRAM exchange already finished")
        except AuthenticationFailed:
            self._state = "failed"
            raise
        except (UnicodeDecodeError, ValueError, binascii.Error):
            self._state = "failed"
            raise AuthenticationFailed(_FAILED) from None

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise AuthenticationFailed("Authentication failed: invalid SCRAM client-first message")
        username = unescape_saslname(m["saslname"])
        authzid = m["authzid"]
        if authzid is not None and unescape_saslname(authzid) != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username")
        extensions = dict(e.split("=", 1) for e in m["extensions"].split(",")[1:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise AuthenticationFailed(
                "Authentication failed: delegation tokens are not supported")
        credential = self._lookup(username)
        self._user_known = credential is not None
        if credential is None:
            credential = self._fake_credential(username)
        self.username = username
        self.extensions = extensions
        self._credential = credential
        self._nonce = m["nonce"] + self._server_nonce
        bare_start = m.start("saslname") - 2  # where "n=<saslname>" begins
        self._gs2_header = text[:bare_start]
        self._client_first_bare = text[bare_start:]
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = "client-final"
        return self._server_first.encode()

    def _fake_credential(self, username: str) -> ScramCredential:
        salt = _hmac(self._digest, self._fake_salt_key,
                     self.mechanism.encode() + b"\x00" + username.encode("utf-8"))
        size = hashlib.new(self._digest).digest_size
        return ScramCredential(salt, bytes(size), bytes(size), DEFAULT_ITERATIONS)

    def _client_final(self, text: str) -> bytes:
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise AuthenticationFailed("Authentication failed: invalid SCRAM client-final message")
        # Kafka's check (ScramSaslServer): the nonce must end with the combined nonce;
        # librdkafka 2.0.x repeats its own nonce in front of it.
        if not m["nonce"].endswith(self._nonce):
            raise AuthenticationFailed(
                "Authentication failed: Invalid client nonce in the final client message")
        expected_binding = base64.b64encode(self._gs2_header.encode()).decode()
        if m["channel"] != expected_binding:
            raise AuthenticationFailed("Authentication failed: Invalid channel binding")
        credential = self._credential
        proof = base64.b64decode(m["proof"], validate=True)
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._digest, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed(_FAILED)
        client_key = _xor(proof, signature)
        computed = hashlib.new(self._digest, client_key).digest()
        if not hmac.compare_digest(computed, credential.stored_key) or not self._user_known:
            raise AuthenticationFailed(_FAILED)
        self._state = "complete"
        server_signature = _hmac(self._digest, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """Our client's side of one exchange: ``first()``, then ``final(server_first)``, then
    ``verify(server_final)``; a server that fails to prove it knows the credential, or
    answers out of protocol, raises AuthenticationFailed."""

    def __init__(self, mechanism: str, username: str, password: str,
                 nonce: str | None = None):
        self.mechanism = mechanism
        self._digest = check_mechanism(mechanism)
        self._username = username
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={escape_saslname(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return (_GS2_HEADER + self._client_first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        try:
            text = bytes(server_first).decode("utf-8")
            fields = dict(part.split("=", 1) for part in text.split(","))
            nonce, iterations = fields["r"], int(fields["i"])
            salt = base64.b64decode(fields["s"], validate=True)
        except (UnicodeDecodeError, ValueError, KeyError, binascii.Error):
            raise AuthenticationFailed("Authentication failed: invalid SCRAM server-first message") from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationFailed("Authentication failed: server nonce does not extend ours")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise AuthenticationFailed(
                f"Authentication failed: server asked for {iterations} SCRAM iterations")
        salted = salted_password(self._password, salt, iterations, self.mechanism)
        client_key = _hmac(self._digest, salted, b"Client Key")
        stored_key = hashlib.new(self._digest, client_key).digest()
        without_proof = f"c={_CHANNEL_BINDING},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        proof = _xor(client_key, _hmac(self._digest, stored_key, auth_message))
        self._server_signature = _hmac(
            self._digest, _hmac(self._digest, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        try:
            text = bytes(server_final).decode("utf-8")
            if not text.startswith("v="):
                raise ValueError
            signature = base64.b64decode(text[2:], validate=True)
        except (UnicodeDecodeError, ValueError, binascii.Error):
            raise AuthenticationFailed("Authentication failed: invalid SCRAM server-final message") from None
        if not self._server_signature or not hmac.compare_digest(signature, self._server_signature):
            raise AuthenticationFailed("Authentication failed: the server's SCRAM signature is wrong")
