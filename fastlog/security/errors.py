# fastlog/security/errors.py — the two failures the security package reports.
#
# Owns: SecurityConfigError (a listener's TLS/SASL configuration cannot be used: startup
# prints its one sentence and exits 2) and AuthenticationFailed (a client's credentials or
# SASL messages were refused: the broker answers SASL_AUTHENTICATION_FAILED with the
# message and closes the connection). Pure exception classes: usable from any thread.
"""Exceptions of fastlog.security."""

from __future__ import annotations

from fastlog.protocol.errors import Errors, KafkaApiError


class SecurityConfigError(ValueError):
    """A TLS or SASL setting cannot be used; the message is one sentence for the operator
    and never contains a password or key material."""


class AuthenticationFailed(KafkaApiError):
    """A client failed to authenticate. ``code`` is SASL_AUTHENTICATION_FAILED and the
    message is safe to send back to the client: it never says whether the user exists."""

    def __init__(self, message: str = "Authentication failed: Invalid credentials"):
        super().__init__(Errors.SASL_AUTHENTICATION_FAILED, message)
