"""Certificates for the TLS tests, made with the openssl command line tool: a CA, a broker
certificate for localhost/127.0.0.1, a client certificate, an expired and a not-yet-valid
one, and the keystores/truststores Kafka users write (PEM, encrypted PEM, PKCS12)."""

import pathlib
import subprocess

import pytest

PASSWORDS = {"key": "key-pass-1", "store": "store-pass-2", "trust": "trust-pass-3"}
CA_CONFIG = """
[ca]
default_ca = ca_default
[ca_default]
dir = {dir}
database = {dir}/index.txt
new_certs_dir = {dir}
serial = {dir}/serial
default_md = sha256
policy = policy_any
preserve = yes
unique_subject = no
[policy_any]
commonName = supplied
countryName = optional
organizationName = optional
organizationalUnitName = optional
[server_ext]
subjectAltName = DNS:localhost,IP:127.0.0.1
"""


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


class Certs:
    def __init__(self, d: pathlib.Path):
        self.dir = d
        (d / "index.txt").write_text("")
        (d / "serial").write_text("1000\n")
        (d / "ca.cnf").write_text(CA_CONFIG.format(dir=d))
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
                "-subj", "/CN=fastlog-test-ca", cwd=d)

    def issue(self, name, subject, start="-", end="+", server=False):
        """<name>.key and <name>.pem signed by the CA; start/end are openssl ca dates
        (YYMMDDHHMMSSZ) or '-'/'+' for now-1h/now+30d."""
        d = self.dir
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=d)
        dates = ["-days", "30"] if end == "+" else ["-enddate", end]
        if start != "-":
            dates += ["-startdate", start]
        ext = ["-extensions", "server_ext"] if server else []
        openssl("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key",
                "-notext", "-preserveDN", "-in", f"{name}.csr", "-out", f"{name}.pem", *dates, *ext, cwd=d)
        return d / f"{name}.key", d / f"{name}.pem"

    def text(self, name):
        return (self.dir / name).read_text()

    def write(self, name, *parts):
        path = self.dir / name
        path.write_text("".join(parts))
        return str(path)


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    c = Certs(tmp_path_factory.mktemp("tls"))
    d = c.dir
    c.issue("broker", "/CN=localhost/OU=Brokers/O=Acme", server=True)
    c.issue("client", "/C=US/O=Acme/OU=Eng/CN=client1")
    c.issue("expired", "/CN=old", start="200101000000Z", end="200201000000Z", server=True)
    c.issue("future", "/CN=new", start="491231000000Z", end="491231235959Z", server=True)
    c.issue("other", "/CN=other")
    openssl("pkcs8", "-topk8", "-in", "broker.key", "-out", "broker.enc.key",
            "-passout", f"pass:{PASSWORDS['key']}", cwd=d)
    openssl("pkcs12", "-export", "-inkey", "broker.key", "-in", "broker.pem",
            "-certfile", "ca.pem", "-out", "broker.p12", "-passout", f"pass:{PASSWORDS['store']}",
            cwd=d)
    openssl("pkcs12", "-export", "-nokeys", "-in", "ca.pem", "-out", "trust.p12",
            "-passout", f"pass:{PASSWORDS['trust']}", cwd=d)
    c.keystore = c.write("broker.keystore.pem", c.text("broker.key"), c.text("broker.pem"),
                         c.text("ca.pem"))
    c.enc_keystore = c.write("broker.enc.keystore.pem", c.text("broker.enc.key"),
                             c.text("broker.pem"))
    c.client_keystore = c.write("client.keystore.pem", c.text("client.pem"), c.text("client.key"))
    return c
