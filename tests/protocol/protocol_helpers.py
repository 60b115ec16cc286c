"""Shared helpers for the protocol tests: realistic values generated from our own
descriptions, and the kafka-python message classes used as an independent reference."""

import importlib
import pkgutil
import random
import uuid

import pytest

from fastlog.protocol import REQUESTS, RESPONSES
from fastlog.protocol.schema import _in


def kafka_python_classes():
    """{(api_key, 'request'|'response'): kafka-python ApiMessage class}."""
    import kafka.protocol as kp
    from kafka.protocol.api_message import ApiMessage

    for mod in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        try:
            importlib.import_module(mod.name)
        except Exception:  # noqa: BLE001 - optional submodules may need extras
            continue
    out = {}
    stack = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and getattr(cls, "_json", None):
            out[(cls.API_KEY, cls.type)] = cls
    return out


def all_cases():
    for table, kind in ((REQUESTS, "request"), (RESPONSES, "response")):
        for key, msg in sorted(table.items()):
            for v in range(msg.valid[0], msg.valid[1] + 1):
                yield pytest.param(kind, key, v, id=f"{msg.name}{kind.capitalize()}-v{v}")


def make_value(msg, version, rich, seed=0):
    """A dict for ``msg`` at ``version``: ``rich`` fills nullable fields, arrays (2
    elements) and tagged fields with non-default values; otherwise nullables are null and
    arrays empty."""
    rng = random.Random(f"{msg.root}-{version}-{rich}-{seed}")
    return _struct(msg.fields, version, rich, rng)


def _scalar(f, ftype, rng):
    if ftype == "int8":
        return rng.randint(0, 100)
    if ftype == "int16":
        return rng.randint(-1, 300)
    if ftype == "int32":
        return rng.randint(-1, 2**31 - 1)
    if ftype == "int64":
        return rng.randint(-1, 2**62)
    if ftype == "uint16":
        return rng.randint(0, 65535)
    if ftype == "float64":
        return rng.random() * 100
    if ftype == "bool":
        return rng.random() < 0.5
    if ftype == "uuid":
        return rng.randbytes(16)
    if ftype == "string":
        return f"{f.name}-{rng.randint(0, 999)}-é"
    if ftype in ("bytes", "records"):
        return rng.randbytes(rng.randint(1, 40))
    raise AssertionError(ftype)


def _struct(fields, version, rich, rng):
    out = {}
    for f in fields:
        if not _in(f.versions, version):
            continue
        nullable = _in(f.nullable, version)
        if not rich and nullable:
            out[f.name] = None
        elif f.is_array:
            n = 2 if rich else 0
            if f.fields is not None:
                out[f.name] = [_struct(f.fields, version, rich, rng) for _ in range(n)]
            else:
                out[f.name] = [_scalar(f, f.elem, rng) for _ in range(n)]
        elif f.fields is not None:
            out[f.name] = _struct(f.fields, version, rich, rng)
        else:
            out[f.name] = _scalar(f, f.type, rng)
        if _in(f.tagged, version) and not rich:
            out[f.name] = f.default if not f.is_array else []
    return out


def normalize(value):
    """Our decoded objects / kafka-python dicts → plain comparable data."""
    if hasattr(value, "to_dict"):
        try:
            value = value.to_dict(json=False)
        except TypeError:
            value = value.to_dict()
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    if isinstance(value, set | frozenset):
        # kafka-python turns authorized-operations int32 bit fields into sets of bits
        return sum(1 << b for b in value)
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, uuid.UUID):  # kafka-python's uuids; ours are the 16 raw bytes
        return value.bytes
    return value


def restrict(value, fields, version):
    """Keep only the fields present in ``version`` (ours hold defaults for the others)."""
    out = {}
    for f in fields:
        if not _in(f.versions, version) or f.name not in value:
            continue
        v = value[f.name]
        if f.fields is not None and v is not None:
            if f.is_array:
                v = [restrict(e, f.fields, version) for e in v]
            else:
                v = restrict(v, f.fields, version)
        out[f.name] = v
    return out
