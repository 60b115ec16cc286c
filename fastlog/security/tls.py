# fastlog/security/tls.py — ssl.SSLContext objects built from Kafka's ssl.* keys.
#
# Owns: server_context(cfg) for a TLS listener and client_context(cfg) for the broker's
# (or our client's) outgoing connections, from a mapping of one listener's resolved keys
# (plain names such as "ssl.keystore.location"); peer_principal() for a finished
# handshake. Keystores: PEM (one file holding the private key and the certificate chain,
# or KIP-651's inline ssl.keystore.key + ssl.keystore.certificate.chain; ssl.key.password
# decrypts an encrypted key) and PKCS12 (ssl.keystore.password; read with the
# `cryptography` package). Truststores: PEM (file or inline ssl.truststore.certificates)
# and PKCS12. JKS cannot be read here: one sentence asks for PKCS12.
# Everything is checked when the context is built: a missing or unreadable file, a wrong
# password, a keystore without its key or certificate, a key that does not match the
# certificate, a broker certificate outside its validity window, an unknown protocol or
# cipher suite each raise SecurityConfigError with one sentence (never a password). Key
# material that must reach OpenSSL as a file (inline PEM, PKCS12) goes through an
# anonymous in-memory file (memfd) or, where there is none, a 0600 file in a private
# temporary directory that is removed at once.
# Called from: startup (one context per listener, shared by all connections afterwards,
# as SSLContext is thread-safe once built) and the network layer after a handshake
# (peer_principal, on the connection's thread). No I/O besides reading the named files.
"""TLS contexts from Kafka's ssl.* configuration keys."""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import ssl
import tempfile
from collections.abc import Iterator, Mapping

from fastlog.fileio import FileTooLargeError, read_capped

from .der import DerError, certificate_fields
from .errors import SecurityConfigError
from .principal import ANONYMOUS, PrincipalMapper, subject_dn

# The keys this module reads (a listener's other ssl.* keys are not acted on).
TLS_CONFIG_KEYS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.key.password", "ssl.keystore.key", "ssl.keystore.certificate.chain",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.cipher.suites", "ssl.endpoint.identification.algorithm",
)
DEFAULT_STORE_TYPE = "JKS"  # Kafka's default for both stores
DEFAULT_ENABLED_PROTOCOLS = "TLSv1.2,TLSv1.3"
# A keystore or truststore is a few KiB; the cap keeps a wrong path (a device, a log)
# from being read without end.
MAX_STORE_BYTES = 1 << 20

CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# TLS 1.3 suites OpenSSL enables by default (ssl cannot change that set, see tls_warnings).
TLS13_SUITES = ("TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256")
TLS13_ALL_SUITES = (*TLS13_SUITES, "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256")
# Java's (IANA) names of TLS 1.2 suites → OpenSSL's names.
IANA_TO_OPENSSL = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
}
_PEM_BLOCK = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]+)-----\s.*?-----END (?P=label)-----", re.DOTALL)


def _get(cfg: Mapping[str, object], key: str) -> str | None:
    """A key's value as text, None when unset or empty (Kafka treats "" as unset here)."""
    value = cfg.get(key)
    if value is None:
        return None
    text = str(value)
    return text if text.strip() else None


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _read_store(cfg: Mapping[str, object], key: str) -> bytes:
    path = _get(cfg, key)
    try:
        return read_capped(path, MAX_STORE_BYTES)
    except FileNotFoundError:
        raise SecurityConfigError(f"{key} names {path}, which does not exist") from None
    except OSError as e:
        raise SecurityConfigError(f"{key} names {path}, which cannot be read ({e.strerror})") from None
    except FileTooLargeError:
        raise SecurityConfigError(
            f"{key} names {path}, which is larger than {MAX_STORE_BYTES} bytes") from None


def _pem_blocks(text: str, kind: str) -> list[str]:
    """The PEM blocks of ``text`` whose label is ``kind`` ("CERTIFICATE") or, for kind
    "PRIVATE KEY", any private key label (PKCS#8, encrypted PKCS#8, RSA, EC)."""
    blocks = []
    for m in _PEM_BLOCK.finditer(text):
        label = m["label"]
        if label == kind or (kind == "PRIVATE KEY" and label.endswith("PRIVATE KEY")):
            blocks.append(m.group(0))
    return blocks


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """A path OpenSSL can read ``data`` from, readable by this process only and gone
    when the block ends: an anonymous memory file where the OS has one."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("fastlog-tls", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="fastlog-tls-") as tmp:  # mode 0700
        path = os.path.join(tmp, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        try:
            yield path
        finally:
            os.unlink(path)


def _pkcs12(data: bytes, password: str | None, key: str):
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise SecurityConfigError(
            f"{key} is a PKCS12 store, which needs the Python package 'cryptography' "
            "(install it, or convert the store to PEM)") from None
    try:
        return pkcs12.load_key_and_certificates(
            data, password.encode("utf-8") if password is not None else None)
    except (ValueError, TypeError):
        raise SecurityConfigError(
            f"{key} could not be opened: the password is wrong or the file is not PKCS12") from None


def _check_validity(cert_pem: str, source: str, now: datetime.datetime) -> None:
    try:
        fields = certificate_fields(ssl.PEM_cert_to_DER_cert(cert_pem))
    except (DerError, ValueError):
        raise SecurityConfigError(f"the certificate in {source} cannot be parsed") from None
    if now < fields.not_before:
        raise SecurityConfigError(
            f"the certificate in {source} is not valid before "
            f"{fields.not_before:%Y-%m-%d %H:%M:%S} UTC")
    if now > fields.not_after:
        raise SecurityConfigError(
            f"the certificate in {source} expired on {fields.not_after:%Y-%m-%d %H:%M:%S} UTC")


def _store_type(cfg: Mapping[str, object], key: str) -> str:
    kind = (_get(cfg, key) or DEFAULT_STORE_TYPE).upper()
    if kind in ("PEM", "PKCS12"):
        return kind
    if kind == "JKS":
        raise SecurityConfigError(
            f"{key} is JKS, which fastlog cannot read (convert the store with keytool "
            "-importkeystore -deststoretype PKCS12, or use PEM)")
    raise SecurityConfigError(f"{key} is {kind!r}; the supported types are PEM and PKCS12")


def _load_keystore(ctx: ssl.SSLContext, cfg: Mapping[str, object], required: bool,
                   now: datetime.datetime) -> bool:
    """Load the key and certificate chain into ``ctx``; False when none is configured."""
    location = _get(cfg, "ssl.keystore.location")
    inline_key = _get(cfg, "ssl.keystore.key")
    inline_chain = _get(cfg, "ssl.keystore.certificate.chain")
    key_password = _get(cfg, "ssl.key.password")
    if location is None and inline_key is None and inline_chain is None:
        if required:
            raise SecurityConfigError(
                "ssl.keystore.location is not set, and a TLS listener needs the broker's "
                "key and certificate")
        return False
    kind = _store_type(cfg, "ssl.keystore.type")
    if inline_key is not None or inline_chain is not None:
        if location is not None:
            raise SecurityConfigError(
                "both ssl.keystore.location and ssl.keystore.key are set; give only one")
        if kind != "PEM":
            raise SecurityConfigError("ssl.keystore.key can only be used with ssl.keystore.type=PEM")
        if inline_key is None or inline_chain is None:
            raise SecurityConfigError(
                "ssl.keystore.key and ssl.keystore.certificate.chain must be given together")
        source = "ssl.keystore.key/ssl.keystore.certificate.chain"
        pem = inline_key + "\n" + inline_chain + "\n"
    elif kind == "PEM":
        if _get(cfg, "ssl.keystore.password") is not None:
            raise SecurityConfigError(
                "ssl.keystore.password cannot be used with a PEM keystore; set "
                "ssl.key.password for an encrypted private key")
        source = f"ssl.keystore.location ({location})"
        pem = _read_store(cfg, "ssl.keystore.location").decode("utf-8", "replace")
    else:
        source = f"ssl.keystore.location ({location})"
        data = _read_store(cfg, "ssl.keystore.location")
        password = _get(cfg, "ssl.keystore.password")
        key, cert, extra = _pkcs12(data, password, "ssl.keystore.location")
        if key is None or cert is None:
            raise SecurityConfigError(f"{source} holds no private key with its certificate")
        from cryptography.hazmat.primitives import serialization
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        pem += "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in [cert, *extra])
        key_password = None
    certs = _pem_blocks(pem, "CERTIFICATE")
    keys = _pem_blocks(pem, "PRIVATE KEY")
    if not keys:
        raise SecurityConfigError(f"{source} holds a certificate but no private key")
    if not certs:
        raise SecurityConfigError(f"{source} holds a private key but no certificate")
    _check_validity(certs[0], source, now)
    asked = []

    def password_callback():
        asked.append(True)
        return (key_password or "").encode("utf-8")

    # The leaf certificate first, then the rest of the chain, then the key, whatever
    # order the file had.
    material = "\n".join([*certs, keys[0]]).encode()
    try:
        with _private_file(material) as path:
            ctx.load_cert_chain(path, password=password_callback)
    except ssl.SSLError as e:
        if getattr(e, "reason", None) == "KEY_VALUES_MISMATCH":
            raise SecurityConfigError(
                f"the private key in {source} does not match its certificate") from None
        if asked and key_password is None:
            raise SecurityConfigError(
                f"the private key in {source} is encrypted and ssl.key.password is not set") from None
        if asked:
            raise SecurityConfigError(
                f"ssl.key.password does not decrypt the private key in {source}") from None
        raise SecurityConfigError(f"the key or certificate in {source} cannot be loaded") from None
    return True


def _load_truststore(ctx: ssl.SSLContext, cfg: Mapping[str, object]) -> bool:
    """Load the trusted certificates into ``ctx``; False when none is configured."""
    location = _get(cfg, "ssl.truststore.location")
    inline = _get(cfg, "ssl.truststore.certificates")
    if location is None and inline is None:
        return False
    if location is not None and inline is not None:
        raise SecurityConfigError(
            "both ssl.truststore.location and ssl.truststore.certificates are set; give only one")
    kind = _store_type(cfg, "ssl.truststore.type")
    if inline is not None and kind != "PEM":
        raise SecurityConfigError(
            "ssl.truststore.certificates can only be used with ssl.truststore.type=PEM")
    source = "ssl.truststore.certificates" if inline is not None else (
        f"ssl.truststore.location ({location})")
    if kind == "PEM":
        if _get(cfg, "ssl.truststore.password") is not None:
            raise SecurityConfigError("ssl.truststore.password cannot be used with a PEM truststore")
        text = inline if inline is not None else (
            _read_store(cfg, "ssl.truststore.location").decode("utf-8", "replace"))
        certs = _pem_blocks(text, "CERTIFICATE")
    else:
        data = _read_store(cfg, "ssl.truststore.location")
        _, cert, extra = _pkcs12(data, _get(cfg, "ssl.truststore.password"),
                                 "ssl.truststore.location")
        from cryptography.hazmat.primitives import serialization
        certs = [c.public_bytes(serialization.Encoding.PEM).decode()
                 for c in ([cert] if cert is not None else []) + list(extra)]
    if not certs:
        raise SecurityConfigError(f"{source} holds no certificate")
    try:
        ctx.load_verify_locations(cadata="\n".join(certs))
    except ssl.SSLError:
        raise SecurityConfigError(f"a certificate in {source} cannot be loaded") from None
    return True


def _apply_protocols_and_ciphers(ctx: ssl.SSLContext, cfg: Mapping[str, object]) -> None:
    protocols = _split(_get(cfg, "ssl.enabled.protocols") or DEFAULT_ENABLED_PROTOCOLS)
    for name in protocols:
        if name not in PROTOCOLS:
            raise SecurityConfigError(
                f"ssl.enabled.protocols names {name!r}; fastlog supports TLSv1.2 and TLSv1.3")
    versions = sorted(PROTOCOLS[name] for name in protocols)
    if not versions:
        raise SecurityConfigError("ssl.enabled.protocols is empty")
    low, high = versions[0], versions[-1]
    suites = _split(_get(cfg, "ssl.cipher.suites") or "")
    if suites:
        tls12, tls13 = [], []
        for name in suites:
            if name in TLS13_ALL_SUITES:
                tls13.append(name)
                continue
            openssl_name = IANA_TO_OPENSSL.get(name, name)
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(openssl_name)
            except ssl.SSLError:
                raise SecurityConfigError(
                    f"ssl.cipher.suites names {name!r}, which is not a cipher suite this TLS "
                    "library knows") from None
            tls12.append(openssl_name)
        # As in Java: a protocol version none of whose suites is listed cannot be used.
        if not tls13:
            high = min(high, ssl.TLSVersion.TLSv1_2)
        if not tls12:
            low = max(low, ssl.TLSVersion.TLSv1_3)
        else:
            ctx.set_ciphers(":".join(tls12))
        if low > high:
            raise SecurityConfigError(
                "ssl.cipher.suites lists no suite of the protocols in ssl.enabled.protocols")
    ctx.minimum_version = low
    ctx.maximum_version = high


def tls_warnings(cfg: Mapping[str, object]) -> list[str]:
    """Sentences for settings that cannot take their full effect here, to log at startup:
    OpenSSL's set of TLS 1.3 suites cannot be narrowed through Python's ssl module."""
    suites = _split(_get(cfg, "ssl.cipher.suites") or "")
    tls13 = [s for s in suites if s in TLS13_ALL_SUITES]
    if tls13 and set(tls13) != set(TLS13_SUITES):
        return ["ssl.cipher.suites lists some TLS 1.3 suites; all of "
                f"{', '.join(TLS13_SUITES)} stay enabled for TLS 1.3"]
    return []


def _now(now: datetime.datetime | None) -> datetime.datetime:
    return now or datetime.datetime.now(datetime.UTC)


def reload_keystore(ctx: ssl.SSLContext, cfg: Mapping[str, object],
                    now: datetime.datetime | None = None) -> None:
    """Load a listener's key and certificate chain again into its live context (its
    keystore changed while the broker runs): new handshakes use them, connections already
    open keep theirs. SecurityConfigError as at startup."""
    _load_keystore(ctx, cfg, required=True, now=_now(now))


def server_context(cfg: Mapping[str, object], now: datetime.datetime | None = None) -> ssl.SSLContext:
    """The context of a TLS listener. ``now`` (UTC) is for tests of the validity check."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    client_auth = (_get(cfg, "ssl.client.auth") or "none").lower()
    if client_auth not in CLIENT_AUTH:
        raise SecurityConfigError(
            f"ssl.client.auth is {client_auth!r}; use none, requested or required")
    _apply_protocols_and_ciphers(ctx, cfg)
    _load_keystore(ctx, cfg, required=True, now=_now(now))
    ctx.verify_mode = CLIENT_AUTH[client_auth]
    if not _load_truststore(ctx, cfg) and ctx.verify_mode != ssl.CERT_NONE:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(cfg: Mapping[str, object], now: datetime.datetime | None = None) -> ssl.SSLContext:
    """The context of an outgoing connection: the server's certificate is always verified
    against the truststore (the system's when none is set), its host name only when
    ssl.endpoint.identification.algorithm is "https" (Kafka's default); a keystore, if
    set, is presented for mutual TLS."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    algorithm = cfg.get("ssl.endpoint.identification.algorithm", "https")
    algorithm = "" if algorithm is None else str(algorithm).strip().lower()
    if algorithm not in ("https", ""):
        raise SecurityConfigError(
            f"ssl.endpoint.identification.algorithm is {algorithm!r}; use https or an empty value")
    ctx.check_hostname = algorithm == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    _apply_protocols_and_ciphers(ctx, cfg)
    _load_keystore(ctx, cfg, required=False, now=_now(now))
    if not _load_truststore(ctx, cfg):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    return ctx


def peer_principal(ssl_object: ssl.SSLObject | ssl.SSLSocket,
                   mapper: PrincipalMapper | None = None) -> str:
    """``User:<mapped subject DN>`` of the peer's certificate after a handshake, or
    ``User:ANONYMOUS`` when the peer sent none. ``mapper`` is the listener's parsed
    ssl.principal.mapping.rules (DEFAULT when None); no matching rule raises
    AuthenticationFailed."""
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    return (mapper or PrincipalMapper()).principal(subject_dn(der))
