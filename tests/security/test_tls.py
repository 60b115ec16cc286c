"""TLS contexts from Kafka's ssl.* keys: real handshakes over 127.0.0.1 (mutual TLS and its
principal, host name checks), PEM/PKCS12/inline stores, and one sentence for each bad
setting."""

import datetime
import os
import socket
import ssl
import subprocess
import tempfile
import threading

import pytest

from fastlog.security import (
    AuthenticationFailed,
    PrincipalMapper,
    SecurityConfigError,
    client_context,
    peer_principal,
    server_context,
    tls_warnings,
)
from fastlog.security.tls import IANA_TO_OPENSSL

from .conftest import PASSWORDS

HANDSHAKE_TIMEOUT = 5.0


def broker_cfg(certs, **extra):
    cfg = {"ssl.keystore.type": "PEM", "ssl.keystore.location": certs.keystore,
           "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.dir / "ca.pem")}
    cfg.update({k.replace("_", "."): v for k, v in extra.items()})
    return cfg


def client_cfg(certs, with_cert=True, **extra):
    cfg = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.dir / "ca.pem")}
    if with_cert:
        cfg.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": certs.client_keystore})
    cfg.update({k.replace("_", "."): v for k, v in extra.items()})
    return cfg


def handshake(server_ctx, client_ctx, hostname="localhost", mapper=None):
    """Connect over 127.0.0.1; returns (server-side principal or exception, client
    exception or None, the negotiated version)."""
    result = {}
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(HANDSHAKE_TIMEOUT)
        port = listener.getsockname()[1]

        def serve():
            try:
                conn, _ = listener.accept()
                conn.settimeout(HANDSHAKE_TIMEOUT)
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    result["principal"] = peer_principal(tls, mapper)
                    tls.sendall(b"ok")
            except (OSError, AuthenticationFailed) as e:
                result["principal"] = e

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        client_error, version = None, None
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=HANDSHAKE_TIMEOUT) as raw:
                with client_ctx.wrap_socket(raw, server_hostname=hostname) as tls:
                    version = tls.version()
                    tls.recv(2)
        except OSError as e:
            client_error = e
        thread.join(HANDSHAKE_TIMEOUT * 2)
        assert not thread.is_alive(), "handshake thread did not finish (liveness check)"
    return result.get("principal"), client_error, version


def test_mutual_tls_principal(certs):
    cfg = broker_cfg(certs, ssl_client_auth="required")
    principal, err, _ = handshake(server_context(cfg), client_context(client_cfg(certs)))
    assert err is None
    assert principal == "User:CN=client1,OU=Eng,O=Acme,C=US"
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=Eng.*$/$1/U,DEFAULT")
    principal, _, _ = handshake(server_context(cfg), client_context(client_cfg(certs)), mapper=mapper)
    assert principal == "User:CLIENT1"
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=Other.*$/$1/")
    principal, _, _ = handshake(server_context(cfg), client_context(client_cfg(certs)), mapper=mapper)
    assert isinstance(principal, AuthenticationFailed)


def test_client_auth_modes(certs):
    anonymous_client = client_context(client_cfg(certs, with_cert=False))
    for mode, verify in (("none", ssl.CERT_NONE), ("requested", ssl.CERT_OPTIONAL),
                         ("required", ssl.CERT_REQUIRED)):
        assert server_context(broker_cfg(certs, ssl_client_auth=mode)).verify_mode == verify
    principal, err, _ = handshake(server_context(broker_cfg(certs, ssl_client_auth="requested")),
                                  anonymous_client)
    assert err is None and principal == "User:ANONYMOUS"
    principal, _, _ = handshake(server_context(broker_cfg(certs)), client_context(client_cfg(certs)))
    assert principal == "User:ANONYMOUS"  # none: the certificate is not even asked for
    principal, err, _ = handshake(server_context(broker_cfg(certs, ssl_client_auth="required")),
                                  anonymous_client)
    assert isinstance(principal, OSError) or err is not None


def test_endpoint_identification(certs):
    server = server_context(broker_cfg(certs))
    _, err, _ = handshake(server, client_context(client_cfg(certs)), hostname="localhost")
    assert err is None
    _, err, _ = handshake(server, client_context(client_cfg(certs)), hostname="elsewhere")
    assert isinstance(err, ssl.SSLCertVerificationError)
    relaxed = client_context(client_cfg(certs, ssl_endpoint_identification_algorithm=""))
    _, err, _ = handshake(server, relaxed, hostname="elsewhere")
    assert err is None
    # a server certificate from a CA the client does not trust is refused either way
    untrusted = client_context({"ssl.truststore.type": "PEM",
                                "ssl.truststore.location": str(certs.dir / "other.pem"),
                                "ssl.endpoint.identification.algorithm": ""})
    _, err, _ = handshake(server, untrusted)
    assert isinstance(err, ssl.SSLCertVerificationError)


def test_encrypted_pem_key_with_key_password(certs):
    cfg = broker_cfg(certs, ssl_keystore_location=certs.enc_keystore,
                     ssl_key_password=PASSWORDS["key"])
    _, err, _ = handshake(server_context(cfg), client_context(client_cfg(certs)))
    assert err is None


def test_inline_pem_kip651(certs):
    cfg = {"ssl.keystore.type": "PEM", "ssl.keystore.key": certs.text("broker.key"),
           "ssl.keystore.certificate.chain": certs.text("broker.pem") + certs.text("ca.pem"),
           "ssl.truststore.type": "PEM", "ssl.truststore.certificates": certs.text("ca.pem"),
           "ssl.client.auth": "required"}
    client = {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": certs.text("ca.pem"),
              "ssl.keystore.type": "PEM", "ssl.keystore.key": certs.text("client.key"),
              "ssl.keystore.certificate.chain": certs.text("client.pem")}
    before = set(os.listdir(tempfile.gettempdir()))
    principal, err, _ = handshake(server_context(cfg), client_context(client))
    assert err is None and principal == "User:CN=client1,OU=Eng,O=Acme,C=US"
    left = {n for n in set(os.listdir(tempfile.gettempdir())) - before if "fastlog-tls" in n}
    assert not left


def test_pkcs12_keystore_and_truststore(certs):
    pytest.importorskip("cryptography")
    cfg = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(certs.dir / "broker.p12"),
           "ssl.keystore.password": PASSWORDS["store"], "ssl.truststore.type": "PKCS12",
           "ssl.truststore.location": str(certs.dir / "trust.p12"),
           "ssl.truststore.password": PASSWORDS["trust"], "ssl.client.auth": "required"}
    principal, err, _ = handshake(server_context(cfg), client_context(client_cfg(certs)))
    assert err is None and principal == "User:CN=client1,OU=Eng,O=Acme,C=US"
    client = {"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(certs.dir / "trust.p12"),
              "ssl.truststore.password": PASSWORDS["trust"]}
    _, err, _ = handshake(server_context(broker_cfg(certs)), client_context(client))
    assert err is None
    bad = dict(cfg, **{"ssl.keystore.password": "wrong"})
    with pytest.raises(SecurityConfigError, match="password is wrong") as e:
        server_context(bad)
    assert "wrong" not in str(e.value).replace("password is wrong", "")


def test_protocols_and_cipher_suites(certs):
    only13 = server_context(broker_cfg(certs, ssl_enabled_protocols="TLSv1.3"))
    assert only13.minimum_version == only13.maximum_version == ssl.TLSVersion.TLSv1_3
    _, err, version = handshake(only13, client_context(client_cfg(certs)))
    assert err is None and version == "TLSv1.3"
    # Java names of TLS 1.2 suites only: TLS 1.3 is then unusable, as in Java
    suites = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
    server = server_context(broker_cfg(certs, ssl_cipher_suites=suites))
    assert server.maximum_version == ssl.TLSVersion.TLSv1_2
    assert {c["name"] for c in server.get_ciphers() if c["protocol"] == "TLSv1.2"} == {
        "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-AES128-GCM-SHA256"}
    _, err, version = handshake(server, client_context(client_cfg(certs)))
    assert err is None and version == "TLSv1.2"
    # OpenSSL names work too; TLS 1.3 names alone leave only TLS 1.3
    assert server_context(broker_cfg(certs, ssl_cipher_suites="ECDHE-ECDSA-AES128-GCM-SHA256"))
    only13 = server_context(broker_cfg(certs, ssl_cipher_suites="TLS_AES_128_GCM_SHA256"))
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3
    assert tls_warnings(broker_cfg(certs, ssl_cipher_suites="TLS_AES_128_GCM_SHA256"))
    assert not tls_warnings(broker_cfg(certs, ssl_cipher_suites=suites))


def test_iana_names_match_openssl():
    out = subprocess.run(["openssl", "ciphers", "-stdname", "ALL:@SECLEVEL=0"], check=True,
                         capture_output=True, text=True, timeout=30).stdout
    known = {}
    for line in out.splitlines():  # "<IANA name> - <OpenSSL name> <protocol> ..."
        iana, _, rest = line.partition(" - ")
        known[iana.strip()] = rest.split()[0] if rest else None
    for iana, name in IANA_TO_OPENSSL.items():
        assert known.get(iana) == name, iana


def one_sentence(excinfo, *secrets):
    message = str(excinfo.value)
    assert message and "\n" not in message
    for secret in secrets:
        assert secret not in message
    return message


@pytest.mark.parametrize("change,fragment", [
    ({"ssl.keystore.location": "/nonexistent/ks.pem"}, "does not exist"),
    ({"ssl.truststore.location": "/nonexistent/ts.pem"}, "does not exist"),
    ({"ssl.keystore.location": "@broker.pem"}, "no private key"),
    ({"ssl.keystore.location": "@broker.key"}, "no certificate"),
    ({"ssl.keystore.location": "@mismatch.pem"}, "does not match"),
    ({"ssl.keystore.location": "@expired.pem"}, "expired on 2020-02-01"),
    ({"ssl.keystore.location": "@future.pem"}, "not valid before 2049-12-31"),
    ({"ssl.keystore.location": "@enc"}, "ssl.key.password is not set"),
    ({"ssl.keystore.location": "@enc", "ssl.key.password": "wrong-pass"}, "does not decrypt"),
    ({"ssl.keystore.password": "store-pass"}, "cannot be used with a PEM keystore"),
    ({"ssl.keystore.type": "JKS"}, "PKCS12"),
    ({"ssl.keystore.type": None}, "JKS"),
    ({"ssl.truststore.type": "BCFKS"}, "supported types"),
    ({"ssl.keystore.location": None}, "ssl.keystore.location is not set"),
    ({"ssl.client.auth": "always"}, "ssl.client.auth"),
    ({"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"}, "TLSv1.1"),
    ({"ssl.cipher.suites": "TLS_RSA_WITH_NOTHING"}, "TLS_RSA_WITH_NOTHING"),
    ({"ssl.keystore.key": "x"}, "only one"),
])
def test_bad_settings_are_one_sentence(certs, change, fragment):
    files = {"@broker.pem": str(certs.dir / "broker.pem"), "@broker.key": str(certs.dir / "broker.key"),
             "@expired.pem": certs.write("expired.ks.pem", certs.text("expired.key"), certs.text("expired.pem")),
             "@future.pem": certs.write("future.ks.pem", certs.text("future.key"), certs.text("future.pem")),
             "@mismatch.pem": certs.write("mismatch.ks.pem", certs.text("other.key"), certs.text("broker.pem")),
             "@enc": certs.enc_keystore}
    cfg = broker_cfg(certs)
    for key, value in change.items():
        cfg[key] = files.get(value, value)
    with pytest.raises(SecurityConfigError) as e:
        server_context(cfg)
    assert fragment in one_sentence(e, "wrong-pass", "store-pass", PASSWORDS["key"])


def test_validity_is_checked_against_now(certs):
    later = datetime.datetime(2049, 12, 31, 12, tzinfo=datetime.UTC)
    cfg = broker_cfg(certs, ssl_keystore_location=certs.write(
        "future2.ks.pem", certs.text("future.key"), certs.text("future.pem")))
    assert server_context(cfg, now=later)


def test_client_endpoint_algorithm_must_be_known(certs):
    with pytest.raises(SecurityConfigError, match="ldaps"):
        client_context(client_cfg(certs, ssl_endpoint_identification_algorithm="LDAPS"))
