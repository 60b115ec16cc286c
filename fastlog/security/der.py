# fastlog/security/der.py — the few fields of an X.509 certificate that TLS setup needs.
#
# Owns: a bounded DER reader (RFC 5280 layout: Certificate → tbsCertificate → version,
# serialNumber, signature, issuer, validity, subject) that returns the subject as a list of
# RDNs (each a list of (OID dotted string, DER tag, value bytes)) and the validity window.
# Every length is checked against the bytes left before anything is sliced, so a bad
# certificate raises DerError and never reads or allocates past its input. No crypto:
# signatures and chains are checked by OpenSSL through the ssl module.
# Called from: fastlog.security.tls (startup, validating the broker's own certificate)
# and fastlog.security.principal (a handshake's peer certificate); any thread.
"""Minimal DER reader for a certificate's subject and validity."""

from __future__ import annotations

import dataclasses
import datetime

TAG_INTEGER = 0x02
TAG_OID = 0x06
TAG_UTF8 = 0x0C
TAG_PRINTABLE = 0x13
TAG_T61 = 0x14
TAG_IA5 = 0x16
TAG_UTC_TIME = 0x17
TAG_GENERALIZED_TIME = 0x18
TAG_GENERAL = 0x1B
TAG_BMP = 0x1E
TAG_SEQUENCE = 0x30
TAG_SET = 0x31
TAG_VERSION = 0xA0  # [0] EXPLICIT in TBSCertificate

# An attribute is (OID dotted string, DER tag of its value, value bytes).
Attribute = tuple[str, int, bytes]


class DerError(ValueError):
    """The bytes are not a DER certificate this reader understands."""


@dataclasses.dataclass(frozen=True)
class CertificateFields:
    subject: list[list[Attribute]]  # RDNs in encoded order (most general first)
    not_before: datetime.datetime  # UTC, timezone-aware
    not_after: datetime.datetime


def _read_tlv(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, value start, value end) of the element at ``pos``; bounded by ``end``."""
    if pos + 2 > end:
        raise DerError("truncated element")
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise DerError("multi-byte tags are not used in certificates")
    first = data[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4:
            raise DerError("indefinite or oversized length")
        if pos + count > end:
            raise DerError("truncated length")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    if length > end - pos:
        raise DerError("element longer than its container")
    return tag, pos, pos + length


def _expect(data: bytes, pos: int, end: int, tag: int) -> tuple[int, int]:
    got, start, stop = _read_tlv(data, pos, end)
    if got != tag:
        raise DerError(f"expected tag 0x{tag:02x}, found 0x{got:02x}")
    return start, stop


def decode_oid(body: bytes) -> str:
    if not body:
        raise DerError("empty object identifier")
    arcs: list[int] = []
    value = 0
    for byte in body:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if body[-1] & 0x80:
        raise DerError("truncated object identifier")
    first = arcs[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join(str(a) for a in head + arcs[1:])


def _decode_time(tag: int, body: bytes) -> datetime.datetime:
    try:
        text = body.decode("ascii")
        if tag == TAG_UTC_TIME:
            # RFC 5280 4.1.2.5.1: YY >= 50 is 19YY, else 20YY (not strptime's pivot)
            century = "19" if text[:2] >= "50" else "20"
            stamp = datetime.datetime.strptime(century + text, "%Y%m%d%H%M%SZ")
        elif tag == TAG_GENERALIZED_TIME:
            stamp = datetime.datetime.strptime(text, "%Y%m%d%H%M%SZ")
        else:
            raise DerError("validity is not a time")
    except (UnicodeDecodeError, ValueError) as e:
        raise DerError("malformed validity time") from e
    return stamp.replace(tzinfo=datetime.UTC)


def _read_name(data: bytes, start: int, end: int) -> list[list[Attribute]]:
    rdns: list[list[Attribute]] = []
    pos = start
    while pos < end:
        set_start, set_end = _expect(data, pos, end, TAG_SET)
        rdn: list[Attribute] = []
        apos = set_start
        while apos < set_end:
            seq_start, seq_end = _expect(data, apos, set_end, TAG_SEQUENCE)
            oid_start, oid_end = _expect(data, seq_start, seq_end, TAG_OID)
            vtag, vstart, vend = _read_tlv(data, oid_end, seq_end)
            rdn.append((decode_oid(data[oid_start:oid_end]), vtag, data[vstart:vend]))
            apos = seq_end
        rdns.append(rdn)
        pos = set_end
    return rdns


def certificate_fields(der: bytes) -> CertificateFields:
    """The subject and validity of one DER-encoded certificate."""
    data = bytes(der)
    cert_start, cert_end = _expect(data, 0, len(data), TAG_SEQUENCE)
    tbs_start, tbs_end = _expect(data, cert_start, cert_end, TAG_SEQUENCE)
    tag, start, stop = _read_tlv(data, tbs_start, tbs_end)
    pos = stop if tag == TAG_VERSION else tbs_start
    _, pos = _expect(data, pos, tbs_end, TAG_INTEGER)  # serialNumber
    _, pos = _expect(data, pos, tbs_end, TAG_SEQUENCE)  # signature algorithm
    _, pos = _expect(data, pos, tbs_end, TAG_SEQUENCE)  # issuer
    val_start, val_end = _expect(data, pos, tbs_end, TAG_SEQUENCE)
    t1, s1, e1 = _read_tlv(data, val_start, val_end)
    t2, s2, e2 = _read_tlv(data, e1, val_end)
    subj_start, subj_end = _expect(data, val_end, tbs_end, TAG_SEQUENCE)
    return CertificateFields(
        subject=_read_name(data, subj_start, subj_end),
        not_before=_decode_time(t1, data[s1:e1]),
        not_after=_decode_time(t2, data[s2:e2]),
    )
