"""A TLS listener's keystore changed while the broker runs (Kafka's per-broker
listener.name.<listener>.ssl.keystore.location, KIP-226): new connections get the new
certificate, the file is read again when the same path is set again, the value survives a
restart and, deleted, gives way to server.properties'; a keystore that cannot be loaded,
a cluster-wide default, a plaintext listener or a password are refused with Kafka's
error."""

import socket
import ssl

from fastlog.protocol import ApiKey, Errors
from fastlog.testing import BrokerProcess
from tests.server.wire import Wire

KEY = "listener.name.ssl.ssl.keystore.location"


def _peer_ou(broker, certs) -> str:
    ctx = ssl.create_default_context(cafile=str(certs.dir / "ca.pem"))
    with socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        subject = dict(item[0] for item in s.getpeercert()["subject"])
        return subject["organizationalUnitName"]


def _alter(broker, name, key, value, op=0):
    w = Wire(broker)
    try:
        r = w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 4, "resource_name": name,
            "configs": [{"name": key, "config_operation": op, "value": value}]}],
            "validate_only": False})
        return r.responses[0]
    finally:
        w.close()


def test_keystore_rotated_without_restart(certs, tmp_path):
    certs.issue("rotated", "/CN=localhost/OU=Rotated/O=Acme", server=True)
    rotated = certs.write("rotated.keystore.pem", certs.text("rotated.key"),
                          certs.text("rotated.pem"), certs.text("ca.pem"))
    b = BrokerProcess(tmp_path / "data", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.keystore}).start()
    try:
        assert _peer_ou(b, certs) == "Brokers"
        assert _alter(b, "0", KEY, rotated).error_code == 0
        assert _peer_ou(b, certs) == "Rotated"
        w = Wire(b)
        try:
            r = w.call(ApiKey.DESCRIBE_CONFIGS, 3, {"resources": [{
                "resource_type": 4, "resource_name": "0", "configuration_keys": [KEY]}],
                "include_synonyms": True, "include_documentation": False})
            (c,) = r.results[0].configs
            assert (c.value, c.config_source, c.read_only) == (rotated, 2, False)
            assert [(s.name, s.value, s.source) for s in c.synonyms] == [
                (KEY, rotated, 2), ("ssl.keystore.location", certs.keystore, 4)]
        finally:
            w.close()

        # Refused: not loadable, for every broker, on a plaintext listener, a password.
        r = _alter(b, "0", KEY, str(certs.dir / "ca.pem"))
        assert r.error_code == Errors.INVALID_REQUEST and "no private key" in r.error_message
        r = _alter(b, "", KEY, rotated)
        assert r.error_code == Errors.INVALID_REQUEST
        assert "Cannot update these configs at default cluster level" in r.error_message
        r = _alter(b, "0", "listener.name.plaintext.ssl.keystore.location", rotated)
        assert r.error_code == Errors.INVALID_REQUEST
        r = _alter(b, "0", "listener.name.ssl.ssl.keystore.password", "x")
        assert r.error_code == Errors.INVALID_REQUEST
        assert _peer_ou(b, certs) == "Rotated"

        b.restart()
        assert _peer_ou(b, certs) == "Rotated"
        # Deleted, the listener is back on the static keystore.
        assert _alter(b, "0", KEY, None, op=1).error_code == 0
        assert _peer_ou(b, certs) == "Brokers"
        assert _alter(b, "0", KEY, rotated).error_code == 0
        assert _peer_ou(b, certs) == "Rotated"
        # The same path set again reads the file again (a certificate renewed in place).
        renewed = certs.text("broker.key") + certs.text("broker.pem") + certs.text("ca.pem")
        with open(rotated, "w") as f:
            f.write(renewed)
        assert _peer_ou(b, certs) == "Rotated"  # not before it is asked to
        assert _alter(b, "0", KEY, rotated).error_code == 0
        assert _peer_ou(b, certs) == "Brokers"
    finally:
        b.stop()
    assert "Traceback" not in b.log_path.read_text(errors="replace")
