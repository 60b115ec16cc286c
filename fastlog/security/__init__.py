# fastlog/security/__init__.py — the security building blocks the network layer and the
# broker call at connection time.
#
# tls        ssl.SSLContext for a listener / an outgoing connection from Kafka's ssl.* keys,
#            and the TLS peer's principal (User:<DN> or User:ANONYMOUS)
# principal  Java's RFC 2253 subject DN and Kafka's ssl.principal.mapping.rules
# scram      SCRAM-SHA-256/512 credentials (Kafka's stored form) and the server/client
#            exchanges
# plain      SASL/PLAIN against the listener's JAAS user_<name> options
# jaas       Kafka's sasl.jaas.config parser
# sasl       the mechanism names and sasl.enabled.mechanisms
# der        the subject and validity of an X.509 certificate (used by tls and principal)
# quota      client quotas: keys, entities, KIP-55's precedence and the throttle accounting
#            (the broker's ClientQuotas is per process state, kept on the request loop)
# Nothing here keeps global state or does I/O beyond reading the files the ssl.* keys
# name: startup builds contexts, mappers and user tables once, and each connection gets
# its own ScramServer or PlainServer. Config problems raise SecurityConfigError (one
# sentence; startup exits 2), client failures AuthenticationFailed (a KafkaApiError with
# SASL_AUTHENTICATION_FAILED).
"""TLS contexts, principals and SASL mechanisms with Kafka's configuration keys."""

from .errors import AuthenticationFailed, SecurityConfigError
from .jaas import JaasEntry, parse_jaas_config, parse_login_module
from .plain import PlainServer, plain_users
from .principal import ANONYMOUS, PrincipalMapper, format_dn, subject_dn
from .sasl import MECHANISMS, parse_enabled_mechanisms
from .scram import ScramClient, ScramCredential, ScramServer, credentials_from_user_config
from .tls import (
    TLS_CONFIG_KEYS,
    client_context,
    peer_principal,
    reload_keystore,
    server_context,
    tls_warnings,
)

__all__ = [
    "ANONYMOUS", "MECHANISMS", "TLS_CONFIG_KEYS", "AuthenticationFailed", "JaasEntry",
    "PlainServer", "PrincipalMapper", "ScramClient", "ScramCredential", "ScramServer",
    "SecurityConfigError", "client_context", "credentials_from_user_config", "format_dn",
    "parse_enabled_mechanisms", "parse_jaas_config", "parse_login_module",
    "peer_principal", "plain_users", "reload_keystore", "server_context", "subject_dn",
    "tls_warnings",
]
