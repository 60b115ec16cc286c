# fastlog/server/metric_text.py — the families of a few samples each (the broker's
# gauges and counters, the process and GC figures), written to exposition text without
# the library's objects.
#
# Owns: FamilyText, which a collector's `write(out)` fills with gauge(), counter() and
# labelled() calls and which turns them straight into the Prometheus text format or
# OpenMetrics (the lines prometheus_client writes for the same GaugeMetricFamily or
# CounterMetricFamily: HELP and TYPE as the format wants them, a counter's under
# NAME_total in the Prometheus text format; labels sorted by name, values escaped;
# numbers as floatToGoString writes them), and LibraryFamilies, which takes the same
# calls and makes the library's families, so the registry's collect() (WrittenFamilies,
# the collectors' base; and a test comparing both texts) sees what a scrape writes.
# Why: building a library family and encoding it held the interpreter lock about 10 us
# per family of one sample (hot); a scrape writes about 70 of them, and the request loop
# waits for a scrape's Python (metrics.py's module comment). Here a family costs one or
# two microseconds: its HELP and TYPE lines are made once per name and format
# (family_head, which the big families' writers in metrics.py use too), and each sample
# line is one f-string.
# Metric and label names must be plain (letters, digits, underscores): they come from
# the collectors' code. Label values may be anything (escaped here).
# Called from: the HTTP server's thread (a scrape) or any thread calling a collector's
# collect(); nothing here is shared between calls but the heads' cache (a dict: a read
# or an insert is one step under the interpreter lock).
"""Exposition text of small metric families, written without the library's objects."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.utils import floatToGoString

# HELP and TYPE lines by (name, help, kind, openmetrics); names and help texts come from
# the collectors' code, so this stays small (bounded all the same).
_HEADS: dict[tuple, str] = {}
_MAX_HEADS = 10_000
# Integers a double holds exactly, written as N.0 by repr(float(N)).
_EXACT = 1 << 53


def label_value(value: str) -> str:
    """A label value escaped for the exposition formats (backslash, quote, newline)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def help_text(doc: str, openmetrics: bool) -> str:
    """A HELP line's text escaped as the library escapes it in either format."""
    doc = doc.replace("\\", r"\\").replace("\n", r"\n")
    return doc.replace('"', r'\"') if openmetrics else doc


def number(value) -> str:
    """A sample's value as floatToGoString writes it; an int below a million (most
    samples) as the same text without the float round trip."""
    if type(value) is int and -_EXACT < value < 1_000_000:
        return f"{value}.0"
    return floatToGoString(value)


def family_head(name: str, doc: str, kind: str, openmetrics: bool) -> str:
    """A family's HELP and TYPE lines as the library writes them (a counter's under
    NAME_total in the text format), made once per name and format."""
    key = (name, doc, kind, openmetrics)
    head = _HEADS.get(key)
    if head is None:
        typed = name + "_total" if kind == "counter" and not openmetrics else name
        head = f"# HELP {typed} {help_text(doc, openmetrics)}\n# TYPE {typed} {kind}\n"
        if len(_HEADS) < _MAX_HEADS:
            _HEADS[key] = head
    return head


class FamilyText:
    """Families written to exposition text as they are given (see the module comment);
    `text()` is the whole, encoded."""

    __slots__ = ("openmetrics", "parts")

    def __init__(self, openmetrics: bool):
        self.openmetrics = openmetrics
        self.parts: list[str] = []

    def gauge(self, name: str, doc: str, value) -> None:
        """A gauge of one sample without labels."""
        self.parts.append(f"{family_head(name, doc, 'gauge', self.openmetrics)}"
                          f"{name} {number(value)}\n")

    def counter(self, name: str, doc: str, value) -> None:
        """A counter of one sample without labels (written as NAME_total)."""
        self.parts.append(f"{family_head(name, doc, 'counter', self.openmetrics)}"
                          f"{name}_total {number(value)}\n")

    def labelled(self, kind: str, name: str, doc: str, labels: tuple[str, ...],
                 samples) -> None:
        """A gauge or counter (`kind`) with label names `labels` and `samples`, pairs of
        (label values in the order of `labels`, value)."""
        parts = self.parts
        parts.append(family_head(name, doc, kind, self.openmetrics))
        sample = name + "_total" if kind == "counter" else name
        order = sorted(range(len(labels)), key=labels.__getitem__)
        for values, value in samples:
            text = ",".join([f'{labels[i]}="{label_value(values[i])}"' for i in order])
            parts.append(f"{sample}{{{text}}} {number(value)}\n")

    def text(self) -> bytes:
        return "".join(self.parts).encode()


class LibraryFamilies:
    """The same calls as FamilyText, made into the library's families (`families`)."""

    __slots__ = ("families",)

    def __init__(self):
        self.families: list = []

    def gauge(self, name: str, doc: str, value) -> None:
        self.families.append(GaugeMetricFamily(name, doc, value=value))

    def counter(self, name: str, doc: str, value) -> None:
        self.families.append(CounterMetricFamily(name, doc, value=value))

    def labelled(self, kind: str, name: str, doc: str, labels: tuple[str, ...],
                 samples) -> None:
        make = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        family = make(name, doc, labels=list(labels))
        for values, value in samples:
            family.add_metric(list(values), value)
        self.families.append(family)


class WrittenFamilies:
    """A collector whose write(out) gives its families (to FamilyText in a scrape): its
    collect(), for the registry, is the library's families of the same calls."""

    def write(self, out) -> None:
        raise NotImplementedError

    def collect(self) -> list:
        out = LibraryFamilies()
        self.write(out)
        return out.families
