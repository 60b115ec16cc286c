# fastlog/client/security.py: how our client authenticates, from the client keys Kafka's
# Java client and librdkafka take.
#
# Owns: ClientSecurity, parsed once from a mapping of client settings:
#   security.protocol   PLAINTEXT (default) or SASL_PLAINTEXT; SSL and SASL_SSL are refused
#                       with one sentence until the broker has TLS listeners
#   sasl.mechanism      PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (librdkafka's sasl.mechanisms
#                       too); Kafka's default GSSAPI is refused
#   sasl.username / sasl.password, or the Java client's sasl.jaas.config
#                       (PlainLoginModule / ScramLoginModule with username= and password=)
# and the exchange on a new connection (SaslHandshake v1, then SaslAuthenticate requests:
# one PLAIN message, or SCRAM's two rounds with the server's signature checked). Any other
# key is refused with one sentence: a setting is never ignored in silence.
# Used by: fastlog.client.connection (BrokerConnection.connect, on the connection's loop)
# and the CLI (fastlog/cli/main.py client_security). The password is never in a message.
"""Client-side SASL settings and authentication."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from fastlog.client import errors
from fastlog.client.versions import ApiKey
from fastlog.security import MECHANISMS, ScramClient, SecurityConfigError, parse_login_module

PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT")
_TLS_PROTOCOLS = ("SSL", "SASL_SSL")
KEYS = ("security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
        "sasl.password", "sasl.jaas.config")


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)

    @property
    def sasl(self) -> bool:
        return self.protocol == "SASL_PLAINTEXT"

    @classmethod
    def from_config(cls, config: Mapping[str, str] | None) -> ClientSecurity:
        """Parse client settings; FastlogError (one sentence) for what we cannot do."""
        config = dict(config or {})
        for key in config:
            if key not in KEYS:
                raise errors.FastlogError(f"fastlog's client does not support the setting "
                                          f"{key!r} (it takes {', '.join(KEYS)})")
        protocol = config.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol in _TLS_PROTOCOLS:
            raise errors.FastlogError(f"security.protocol {protocol} is not available yet: "
                                      "fastlog's client has no TLS")
        if protocol not in PROTOCOLS:
            raise errors.FastlogError(f"security.protocol must be one of {', '.join(PROTOCOLS)}, "
                                      f"not {protocol!r}")
        if protocol == "PLAINTEXT":
            return cls()
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
        return cls(protocol, mechanism, username, password)

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
