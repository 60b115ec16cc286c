# fastlog/client/security.py: how our client secures and authenticates its connections,
# from the client keys Kafka's Java client and librdkafka take.
#
# Owns: ClientSecurity, parsed once from a mapping of client settings:
#   security.protocol   PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL
#   ssl.ca.location     PEM file of the CAs that sign the brokers' certificates (the
#                       system's CAs when unset); ssl.certificate.location,
#                       ssl.key.location and ssl.key.password: this client's certificate
#                       for mutual TLS; ssl.endpoint.identification.algorithm: https
#                       (librdkafka's default: the broker's name must match its
#                       certificate) or none
#   sasl.mechanism      PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (librdkafka's sasl.mechanisms
#                       too); Kafka's default GSSAPI is refused
#   sasl.username / sasl.password, or the Java client's sasl.jaas.config
#                       (PlainLoginModule / ScramLoginModule with username= and password=)
# and the exchange on a new connection (SaslHandshake v1, then SaslAuthenticate requests:
# one PLAIN message, or SCRAM's two rounds with the server's signature checked). The TLS
# context is Python's ssl module's. Any other key is refused with one sentence: a setting
# is never ignored in silence.
# Used by: fastlog.client.connection (BrokerConnection.connect, on the connection's loop)
# and the CLI (fastlog/cli/main.py client_security). The password is never in a message.
"""Client-side TLS and SASL settings and authentication."""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Mapping

from fastlog.client import errors
from fastlog.client.versions import ApiKey
from fastlog.security import MECHANISMS, ScramClient, SecurityConfigError, parse_login_module

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_SSL_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
             "ssl.key.password", "ssl.endpoint.identification.algorithm")
KEYS = ("security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
        "sasl.password", "sasl.jaas.config", *_SSL_KEYS)


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = dataclasses.field(default=None, repr=False)

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_config(cls, config: Mapping[str, str] | None) -> ClientSecurity:
        """Parse client settings; FastlogError (one sentence) for what we cannot do."""
        config = dict(config or {})
        for key in config:
            if key not in KEYS:
                raise errors.FastlogError(f"fastlog's client does not support the setting "
                                          f"{key!r} (it takes {', '.join(KEYS)})")
        protocol = config.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise errors.FastlogError(f"security.protocol must be one of {', '.join(PROTOCOLS)}, "
                                      f"not {protocol!r}")
        tls = None
        if protocol in _TLS_PROTOCOLS:
            tls = _ssl_context(config)
        elif any(k in config for k in _SSL_KEYS):
            raise errors.FastlogError(f"the ssl.* settings need security.protocol SSL or "
                                      f"SASL_SSL, not {protocol}")
        if protocol in ("PLAINTEXT", "SSL"):
            return cls(protocol, ssl_context=tls)
        mechanism = (config.get("sasl.mechanism") or config.get("sasl.mechanisms")
                     or "GSSAPI").strip()
        if mechanism not in MECHANISMS:
            raise errors.FastlogError(f"sasl.mechanism {mechanism} is not supported (use "
                                      f"{', '.join(MECHANISMS)})")
        username, password = config.get("sasl.username"), config.get("sasl.password")
        jaas = config.get("sasl.jaas.config")
        if jaas is not None:
            try:
                options = parse_login_module(jaas).options
            except SecurityConfigError as e:
                raise errors.FastlogError(str(e)) from None
            username = options.get("username", username)
            password = options.get("password", password)
        if not username or password is None:
            raise errors.FastlogError(f"SASL mechanism {mechanism} needs sasl.username and "
                                      "sasl.password (or sasl.jaas.config)")
        return cls(protocol, mechanism, username, password, tls)

    async def authenticate(self, conn) -> None:
        """Run the SASL exchange on a connected BrokerConnection; KafkaError when the
        broker refuses."""
        where = f"SASL {self.mechanism} authentication with broker {conn.address}"
        resp = await conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": self.mechanism},
                                  version=1)
        if resp.error_code:
            raise errors.KafkaError(resp.error_code, where,
                                    f"the broker enables {', '.join(resp.mechanisms) or 'none'}")
        if self.mechanism == "PLAIN":
            await self._step(conn, where, f"\0{self.username}\0{self.password}".encode())
            return
        client = ScramClient(self.mechanism, self.username, self.password)
        server_first = await self._step(conn, where, client.first())
        try:
            client.verify(await self._step(conn, where, client.final(server_first)))
        except errors.FastlogError:
            raise
        except Exception as e:  # noqa: BLE001 - AuthenticationFailed from the exchange
            raise errors.FastlogError(f"{where} failed: {e}") from None

    @staticmethod
    async def _step(conn, where: str, token: bytes) -> bytes:
        resp = await conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
        errors.raise_for(resp.error_code, where, resp.error_message)
        return resp.auth_bytes


def _ssl_context(config: Mapping[str, str]) -> ssl.SSLContext:
    """The TLS context of librdkafka's ssl.* keys (see the module comment); one sentence
    for a file that cannot be read or a key that does not fit its certificate."""
    check = config.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if check not in ("https", "none", ""):
        raise errors.FastlogError("ssl.endpoint.identification.algorithm must be https or "
                                  f"none, not {check!r}")
    ca = config.get("ssl.ca.location")
    cert, key = config.get("ssl.certificate.location"), config.get("ssl.key.location")
    if (cert is None) != (key is None):
        raise errors.FastlogError("mutual TLS needs both ssl.certificate.location and "
                                  "ssl.key.location")
    try:
        ctx = ssl.create_default_context(cafile=ca)
        if cert is not None:
            ctx.load_cert_chain(cert, key, config.get("ssl.key.password"))
    except FileNotFoundError as e:
        raise errors.FastlogError(f"cannot read {e.filename or ca or cert}: no such file") from None
    except (ssl.SSLError, OSError) as e:
        what = "ssl.ca.location" if cert is None else "the client certificate or key"
        raise errors.FastlogError(f"cannot load {what}: {getattr(e, 'reason', None) or e}") from None
    ctx.check_hostname = check == "https"
    return ctx
