# fastlog/security/jaas.py — Kafka's JAAS configuration lines (sasl.jaas.config).
#
# Owns: the parser for the text Kafka reads with java.io.StreamTokenizer (JaasConfig):
#     <login module class> <control flag> [<key>=<value> ...];   [more entries]
# with the tokenizer's rules as Kafka sets them up: // and /* */ comments; words of
# letters, digits, '.', '-', '_', '$' that start with a letter (or '_'/'$'); values
# quoted with " or ' and the escapes \n \t \r \b \f \a \v \<octal> \<char>, or one word;
# a token starting with a digit is a number and is not a value (Kafka rejects it too).
# Control flags: required, requisite, sufficient, optional (any case). The options of a
# login module are a str → str mapping; the last of a repeated key wins.
# Called from: startup, once per listener and mechanism; pure.
"""Parser for Kafka's sasl.jaas.config values."""

from __future__ import annotations

import dataclasses

from .errors import SecurityConfigError

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_WORD_START = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_WORD_PART = _WORD_START | set("0123456789.-")
_NUMBER_PART = set("0123456789.")
WORD, QUOTED, NUMBER, CHAR = "word", "quoted", "number", "char"


@dataclasses.dataclass(frozen=True)
class JaasEntry:
    login_module: str
    control_flag: str  # lower case, one of CONTROL_FLAGS
    options: dict[str, str]


def _is_word_char(c: str, start: bool) -> bool:
    return c in (_WORD_START if start else _WORD_PART) or ord(c) >= 160


def _tokens(text: str):
    """(kind, text) tokens: WORD and QUOTED carry their string, NUMBER and CHAR their
    source characters (no string value, as StreamTokenizer's sval is null for them)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c <= " ":
            i += 1
        elif text.startswith("//", i) or (c == "/" and not text.startswith("/*", i)):
            # a lone '/' is StreamTokenizer's comment character: the rest of the line
            while i < n and text[i] not in "\r\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c in "\"'":
            i, value = _quoted(text, i + 1, c)
            yield QUOTED, value
        elif c.isascii() and (c.isdigit() or (c in ".-" and i + 1 < n and text[i + 1] in _NUMBER_PART)):
            start = i
            i += 1
            while i < n and text[i] in _NUMBER_PART:
                i += 1
            yield NUMBER, text[start:i]
        elif _is_word_char(c, True):
            start = i
            while i < n and _is_word_char(text[i], False):
                i += 1
            yield WORD, text[start:i]
        else:
            i += 1
            yield CHAR, c


def _quoted(text: str, i: int, quote: str) -> tuple[int, str]:
    out = []
    n = len(text)
    while i < n and text[i] != quote and text[i] not in "\r\n":
        c = text[i]
        i += 1
        if c == "\\" and i < n:
            c = text[i]
            i += 1
            if "0" <= c <= "7":
                digits = c
                limit = 3 if c <= "3" else 2
                while len(digits) < limit and i < n and "0" <= text[i] <= "7":
                    digits += text[i]
                    i += 1
                c = chr(int(digits, 8))
            else:
                c = _ESCAPES.get(c, c)
        out.append(c)
    if i < n and text[i] == quote:
        i += 1
    return i, "".join(out)


def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> list[JaasEntry]:
    """All login module entries of a JAAS configuration text; a malformed text is one
    SecurityConfigError sentence that names ``key`` (never an option's value)."""
    tokens = list(_tokens(text))
    entries = []
    pos = 0
    while pos < len(tokens):
        kind, module = tokens[pos]
        if kind != WORD:
            raise SecurityConfigError(f"{key} does not start an entry with a login module class name")
        if pos + 1 >= len(tokens):
            raise SecurityConfigError(f"{key} does not give a login module control flag")
        kind, flag = tokens[pos + 1]
        if kind not in (WORD, QUOTED) or flag.lower() not in CONTROL_FLAGS:
            raise SecurityConfigError(
                f"{key} has an invalid login module control flag (use one of "
                f"{', '.join(CONTROL_FLAGS)})")
        pos += 2
        options: dict[str, str] = {}
        while pos < len(tokens) and tokens[pos] != (CHAR, ";"):
            kind, name = tokens[pos]
            if (kind not in (WORD, QUOTED) or pos + 2 >= len(tokens)
                    or tokens[pos + 1] != (CHAR, "=") or tokens[pos + 2][0] not in (WORD, QUOTED)):
                shown = name if kind in (WORD, QUOTED) else "(none)"
                raise SecurityConfigError(f"{key} does not give a value for option {shown!r}")
            options[name] = tokens[pos + 2][1]
            pos += 3
        if pos >= len(tokens):
            raise SecurityConfigError(f"{key} has an entry not terminated by a semicolon")
        pos += 1
        entries.append(JaasEntry(module, flag.lower(), options))
    if not entries:
        raise SecurityConfigError(f"{key} does not name a login module")
    return entries


def parse_login_module(text: str, key: str = "sasl.jaas.config") -> JaasEntry:
    """The one login module of a sasl.jaas.config value (Kafka allows exactly one)."""
    entries = parse_jaas_config(text, key)
    if len(entries) != 1:
        raise SecurityConfigError(
            f"{key} contains {len(entries)} login modules, it should contain exactly one")
    return entries[0]
