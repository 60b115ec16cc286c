# fastlog/server/inter_broker.py — how this broker secures its own connections to other
# brokers (Kafka's inter-broker security).
#
# Owns: inter_broker_security(config), the fastlog.client ClientSecurity of the
# inter-broker listener (inter.broker.listener.name, else security.inter.broker.protocol),
# built once at startup from that listener's resolved keys (KafkaConfig.listener_config):
#   SSL, SASL_SSL    TLS with the listener's truststore, its keystore presented for mutual
#                    TLS, the peer's host name checked when
#                    ssl.endpoint.identification.algorithm is https (Kafka's default)
#                    (fastlog.security.client_context);
#   SASL_*           sasl.mechanism.inter.broker.protocol (PLAIN by default here; Kafka's
#                    GSSAPI is refused by the config) with the username and password of
#                    the listener's JAAS line for that mechanism,
#                    listener.name.<listener>.<mechanism>.sasl.jaas.config, as Kafka's
#                    brokers take them.
# Anything missing or unreadable is a SecurityConfigError with one sentence (the server
# command exits 2); the password is never in it.
# Called from: BrokerServer.startup (cluster mode, on the event loop, before the broker
# joins); the replica fetchers (fastlog/server/replica_fetcher.py) use the result on
# every connection they open to a leader.
"""The security of this broker's connections to other brokers."""

from __future__ import annotations

from fastlog.client.security import ClientSecurity
from fastlog.security import SecurityConfigError, client_context

_TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def inter_broker_security(config) -> ClientSecurity:
    """The ClientSecurity of the inter-broker listener (see the module comment)."""
    name = config.inter_broker_listener_name
    protocol = config.listener_security_protocol(name)
    cfg = config.listener_config(name)
    where = f"the inter-broker listener {name}"
    tls = None
    if protocol in _TLS_PROTOCOLS:
        try:
            tls = client_context(cfg)
        except SecurityConfigError as e:
            raise SecurityConfigError(f"{where}: {e}") from None
    if protocol not in _SASL_PROTOCOLS:
        return ClientSecurity(protocol, ssl_context=tls)
    mechanism = config["sasl.mechanism.inter.broker.protocol"].strip()
    jaas_key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    entry = cfg.get(f"{mechanism.lower()}.sasl.jaas.config")
    options = entry.options if entry is not None else {}
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise SecurityConfigError(
            f"{where} uses SASL mechanism {mechanism}, so the broker needs its own "
            f'username="..." password="..." in {jaas_key}')
    return ClientSecurity(protocol, mechanism, username, password, tls)
