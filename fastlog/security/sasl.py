# fastlog/security/sasl.py — the SASL mechanisms fastlog serves, by Kafka's names.
#
# Owns: the mechanism names (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), the check of Kafka's
# sasl.enabled.mechanisms / sasl.mechanism.inter.broker.protocol values, and the bound on
# one SASL message (a PLAIN or SCRAM message is a few hundred bytes; a longer one is
# refused before it is decoded).
# Called from: startup (config checks) and the per-connection mechanism objects; pure.
"""SASL mechanism names and their configuration checks."""

from __future__ import annotations

from .errors import SecurityConfigError

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
MAX_SASL_MESSAGE_BYTES = 4096


def parse_enabled_mechanisms(value: str, key: str = "sasl.enabled.mechanisms") -> tuple[str, ...]:
    """The mechanisms of a comma-separated list (Kafka's names, case-sensitive as in
    Kafka); an unknown one is a SecurityConfigError naming it."""
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    for name in names:
        if name not in MECHANISMS:
            raise SecurityConfigError(
                f"{key} names the SASL mechanism {name!r}, which fastlog does not support "
                f"(supported: {', '.join(MECHANISMS)})")
    return names
