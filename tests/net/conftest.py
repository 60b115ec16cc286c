"""The TLS tests of the socket server use the certificates the security tests make (a CA,
a broker certificate for localhost/127.0.0.1, a client certificate)."""

from tests.security.conftest import certs  # noqa: F401  (a session fixture, shared)
