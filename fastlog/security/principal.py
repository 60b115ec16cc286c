# fastlog/security/principal.py — who a TLS client is: its subject DN and Kafka's mapping.
#
# Owns: the RFC 2253 string of a certificate subject exactly as Java's
# X500Principal.getName() prints it (RDNs most specific first, the keywords CN C L ST O
# OU STREET DC UID, any other attribute as <dotted OID>=#<hex of its DER value>, the
# characters ,=+<>#;"\ escaped with a backslash, leading and trailing spaces escaped),
# and Kafka's ssl.principal.mapping.rules (SslPrincipalMapper): a comma-separated list of
# DEFAULT and RULE:<java regex>/<replacement>/[L|U], the first rule whose pattern matches
# the whole DN wins, no match is an authentication failure.
# Called from: startup (parse the rules once, a SecurityConfigError for a bad one) and the
# network layer after a handshake (map a DN); immutable after construction, any thread.
"""Certificate subject DNs (Java's RFC 2253 form) and Kafka's principal mapping rules."""

from __future__ import annotations

import re

from .der import (
    TAG_BMP,
    TAG_GENERAL,
    TAG_IA5,
    TAG_PRINTABLE,
    TAG_T61,
    TAG_UTF8,
    Attribute,
    certificate_fields,
)
from .errors import AuthenticationFailed, SecurityConfigError

ANONYMOUS = "User:ANONYMOUS"
USER_TYPE = "User"

# The keywords Java's RFC 2253 output uses; every other attribute prints as its OID.
RFC2253_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
_STRING_CODECS = {
    TAG_UTF8: "utf-8",
    TAG_PRINTABLE: "utf-8",
    TAG_IA5: "utf-8",
    TAG_GENERAL: "utf-8",
    TAG_T61: "latin-1",
    TAG_BMP: "utf-16-be",
}
_ESCAPED = set(',=+<>#;"\\')


def _der_hex(tag: int, value: bytes) -> str:
    n = len(value)
    if n < 0x80:
        length = bytes([n])
    else:
        size = (n.bit_length() + 7) // 8
        length = bytes([0x80 | size]) + n.to_bytes(size, "big")
    return "#" + (bytes([tag]) + length + value).hex()


def _escape_value(text: str) -> str:
    chars = []
    for c in text:
        if c in _ESCAPED:
            chars.append("\\" + c)
        elif c == "\x00":
            chars.append("\\00")
        else:
            chars.append(c)
    lead = 0
    while lead < len(chars) and chars[lead] in (" ", "\r"):
        lead += 1
    trail = len(chars) - 1
    while trail >= 0 and chars[trail] in (" ", "\r"):
        trail -= 1
    return "".join("\\" + c if i < lead or i > trail else c for i, c in enumerate(chars))


def format_attribute(attr: Attribute) -> str:
    oid, tag, value = attr
    keyword = RFC2253_KEYWORDS.get(oid)
    codec = _STRING_CODECS.get(tag)
    if keyword is None or codec is None:
        return f"{keyword or oid}={_der_hex(tag, value)}"
    try:
        text = value.decode(codec)
    except UnicodeDecodeError:
        return f"{keyword}={_der_hex(tag, value)}"
    return f"{keyword}={_escape_value(text)}"


def format_dn(rdns: list[list[Attribute]]) -> str:
    """RFC 2253 string of a Name given in encoded order (as der.certificate_fields gives)."""
    return ",".join("+".join(format_attribute(a) for a in rdn) for rdn in reversed(rdns))


def subject_dn(cert_der: bytes) -> str:
    """The subject DN of a DER certificate, as Java's X500Principal.getName() prints it."""
    return format_dn(certificate_fields(cert_der).subject)


# ------------------------------------------------------------------ mapping rules

# Kafka's own grammar (SslPrincipalMapper): the splitter finds each rule, the parser
# must consume the whole of it.
_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
DEFAULT_RULES = "DEFAULT"


class _Rule:
    __slots__ = ("pattern", "replacement", "case")

    def __init__(self, pattern: re.Pattern | None, replacement: str | None, case: str):
        self.pattern = pattern  # None: DEFAULT
        self.replacement = replacement
        self.case = case  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(lambda m: _java_replacement(self.replacement, m), dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def __str__(self):
        if self.pattern is None:
            return "DEFAULT"
        suffix = f"/{self.case}" if self.case else ""
        return f"RULE:{self.pattern.pattern}/{self.replacement}{suffix}"


def _java_replacement(template: str, match: re.Match) -> str:
    """Java's Matcher.appendReplacement for one match: $n is group n (as many digits as
    name an existing group), \\x is a literal x. A $ that names no group is literal, as
    Kafka's mapper escapes such back references before calling replaceAll."""
    groups = match.re.groups
    out = []
    i, n = 0, len(template)
    while i < n:
        c = template[i]
        if c == "\\" and i + 1 < n:
            out.append(template[i + 1])
            i += 2
        elif c == "$" and i + 1 < n and template[i + 1].isdigit() and int(template[i + 1]) <= groups:
            j = i + 2
            number = int(template[i + 1])
            while j < n and template[j].isdigit() and number * 10 + int(template[j]) <= groups:
                number = number * 10 + int(template[j])
                j += 1
            out.append(match.group(number) or "")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _split_rules(text: str) -> list[str]:
    rules = []
    pos, text = 0, text.strip()
    while pos <= len(text):
        m = _RULE_SPLITTER.search(text, pos)
        if m is None:
            break
        rules.append(m.group(1))
        # Java's find() resumes at the match end, one further after an empty match
        pos = m.end() if m.end() > m.start() else m.end() + 1
    return rules


class PrincipalMapper:
    """Kafka's ssl.principal.mapping.rules, parsed once; ``name(dn)`` maps one DN."""

    def __init__(self, rules: str | None = None):
        self.rules: list[_Rule] = []
        for rule in _split_rules(DEFAULT_RULES if rules is None else rules):
            m = _RULE_PARSER.match(rule)
            if m is None or m.end() != len(rule):
                raise SecurityConfigError(
                    f"ssl.principal.mapping.rules has an invalid rule {rule!r} "
                    "(expected DEFAULT or RULE:pattern/replacement/ with an optional L or U)")
            if m.group(1) is not None:
                self.rules.append(_Rule(None, None, ""))
            elif m.group(2) is not None:
                try:
                    pattern = re.compile(m.group(2))
                except re.error as e:
                    raise SecurityConfigError(
                        f"ssl.principal.mapping.rules has a pattern {m.group(2)!r} that is "
                        f"not a valid regular expression ({e})") from None
                self.rules.append(_Rule(pattern, m.group(4), m.group(6)))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise AuthenticationFailed(
            "Authentication failed: no ssl.principal.mapping.rules rule applies to the "
            "client certificate's subject")

    def principal(self, dn: str) -> str:
        """Kafka's principal string ``User:<mapped name>`` for a DN."""
        return f"{USER_TYPE}:{self.name(dn)}"

    def __str__(self):
        return "[" + ", ".join(str(r) for r in self.rules) + "]"
