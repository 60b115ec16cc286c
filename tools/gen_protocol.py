"""Development-time generator for fastlog/protocol/messages.py.

Reads Kafka's JSON message specs (the copy vendored inside the kafka-python test dependency,
``kafka/protocol/schemas/resources/*.json``) and writes our own compact description of the
request/response versions fastlog serves. Only the versions in ``SERVED`` are kept: fields
that exist in none of them are dropped and version ranges are clipped to the served range,
so the generated module reads as what the broker actually speaks.

The generated module is committed; nothing at runtime needs kafka-python. Run from the
repo root after changing SERVED:  .venv/bin/python tools/gen_protocol.py
"""

import json
import pathlib
import re
import sys

# (spec file stem, api key) -> versions described (and so encodable/decodable) by fastlog.
SERVED = {
    "Produce": (0, 11),
    "Fetch": (4, 17),
    "ListOffsets": (1, 9),
    "Metadata": (0, 13),
    "OffsetCommit": (1, 9),
    "OffsetFetch": (1, 9),
    "FindCoordinator": (0, 4),
    "JoinGroup": (0, 9),
    "Heartbeat": (0, 4),
    "LeaveGroup": (0, 5),
    "SyncGroup": (0, 5),
    "DescribeGroups": (0, 5),
    "ListGroups": (0, 5),
    "ApiVersions": (0, 4),
    "CreateTopics": (2, 7),
    "DeleteTopics": (1, 6),
    "DeleteRecords": (0, 2),
    "InitProducerId": (0, 4),
    "OffsetForLeaderEpoch": (2, 4),
    "DescribeConfigs": (1, 4),
    "AlterConfigs": (0, 2),
    "IncrementalAlterConfigs": (0, 1),
    "DeleteGroups": (0, 2),
    "OffsetDelete": (0, 0),
    "CreatePartitions": (0, 3),
    "SaslHandshake": (0, 1),
    "SaslAuthenticate": (0, 2),
    "DescribeUserScramCredentials": (0, 0),
    "AlterUserScramCredentials": (0, 0),
    "DescribeAcls": (1, 3),
    "CreateAcls": (1, 3),
    "DeleteAcls": (1, 3),
    "AlterPartitionReassignments": (0, 0),
    "ListPartitionReassignments": (0, 0),
    "AddPartitionsToTxn": (0, 5),
    "AddOffsetsToTxn": (0, 3),
    "EndTxn": (0, 3),
    "TxnOffsetCommit": (0, 3),
    "WriteTxnMarkers": (0, 1),
    "DescribeTransactions": (0, 0),
    "ListTransactions": (0, 1),
    "DescribeProducers": (0, 0),
    "DescribeCluster": (0, 1),
    "ElectLeaders": (0, 2),
    "DescribeLogDirs": (1, 4),
    "AlterReplicaLogDirs": (1, 2),
    "DescribeClientQuotas": (0, 1),
    "AlterClientQuotas": (0, 1),
}

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fastlog" / "protocol" / "messages.py"


def spec_dir():
    import kafka.protocol.schemas as schemas  # development-time only

    return pathlib.Path(schemas.__file__).parent / "resources"


def load(path):
    text = path.read_text()
    text = re.sub(r"(?m)^\s*//.*$", "", text)
    return json.loads(text)


def parse_range(text):
    """'3+' -> (3, None); '0-12' -> (0, 12); '2' -> (2, 2); 'none' -> None."""
    if text is None or text == "none":
        return None
    text = text.strip()
    if text.endswith("+"):
        return int(text[:-1]), None
    if "-" in text:
        lo, hi = text.split("-")
        return int(lo), int(hi)
    return int(text), int(text)


def clip(rng, served):
    """Intersect a spec range with the served range; None if empty."""
    if rng is None:
        return None
    lo, hi = rng
    slo, shi = served
    hi = shi if hi is None else min(hi, shi)
    lo = max(lo, slo)
    if lo > hi:
        return None
    return lo, hi


def fmt_range(rng, served):
    lo, hi = rng
    if hi == served[1]:
        return f"{lo}+"
    if lo == hi:
        return f"{lo}"
    return f"{lo}-{hi}"


def snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def parse_default(ftype, raw):
    if raw is None:
        return None
    if isinstance(raw, bool | int):
        return raw
    if raw == "null":
        return "None"
    if ftype == "bool":
        return raw == "true"
    if ftype in ("int8", "int16", "int32", "int64", "uint16"):
        return int(raw, 0)
    if ftype == "float64":
        return float(raw)
    if ftype == "string":
        return raw
    raise ValueError(f"unhandled default {raw!r} for {ftype}")


def emit_fields(fields, served, indent, out, common=None):
    """Emit F(...) lines; an array of a struct the spec shares (its "commonStructs",
    e.g. AddPartitionsToTxnTopic) takes that struct's fields."""
    pad = " " * indent
    common = common or {}
    for f in fields:
        versions = clip(parse_range(f["versions"]), served)
        if versions is None:
            continue
        ftype = f["type"]
        args = [repr(snake(f["name"])), repr(ftype), repr(fmt_range(versions, served))]
        nullable = clip(parse_range(f.get("nullableVersions")), served)
        if nullable is not None:
            args.append(f"nullable={fmt_range(nullable, served)!r}")
        if "tag" in f:
            tagged = clip(parse_range(f.get("taggedVersions")), served)
            if tagged is None:
                continue  # tagged only in versions we do not serve
            args.append(f"tag={f['tag']}")
            args.append(f"tagged={fmt_range(tagged, served)!r}")
        if "flexibleVersions" in f:
            raise ValueError(f"field-level flexibleVersions in {f['name']} not handled")
        default = parse_default(ftype, f.get("default"))
        if default is not None:
            args.append("default=NULL" if default == "None" else f"default={default!r}")
        sub = f.get("fields")
        if sub is None and ftype.startswith("[]"):
            sub = common.get(ftype[2:])
        if sub is not None:
            out.append(f"{pad}F({', '.join(args)}, fields=(")
            emit_fields(sub, served, indent + 4, out, common)
            out.append(f"{pad})),")
        else:
            out.append(f"{pad}F({', '.join(args)}),")


def render():
    """The text of messages.py."""
    resources = spec_dir()
    out = [
        '"""Request/response descriptions for every API version fastlog serves.',
        "",
        "GENERATED by tools/gen_protocol.py from Kafka's JSON message specs (field order, types,",
        "versions, nullability, tags, defaults); do not edit by hand, edit SERVED in the generator",
        "and re-run it. The format is ours (see fastlog/protocol/schema.py): F(name, type,",
        "versions, nullable=, tag=, tagged=, default=, fields=) with snake_case names; version",
        "ranges are clipped to the served range, so 'N+' means 'from N to the highest served'.",
        "Pure data: imported once at startup, compiled into per-version plans by schema.py.",
        '"""',
        "",
        "from .schema import NULL, F, Message",
        "",
        "# fmt: off",
    ]
    names = []
    for stem, served in SERVED.items():
        for kind in ("Request", "Response"):
            spec = load(resources / f"{stem}{kind}.json")
            flex = parse_range(spec["flexibleVersions"])
            # The spec's first flexible version, even when above what we serve: the
            # request header of such a version (v2) must still be parsed correctly.
            flex_from = None if flex is None else flex[0]
            const = snake(stem).upper() + "_" + kind.upper()
            names.append(const)
            out.append("")
            out.append(
                f"{const} = Message({spec['apiKey']}, {kind.lower()!r}, {stem!r}, "
                f"valid={served!r}, flexible={flex_from!r}, fields=("
            )
            common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
            emit_fields(spec["fields"], served, 4, out, common)
            out.append("))")
    out.append("")
    out.append("# fmt: on")
    out.append("")
    out.append("ALL = (")
    for n in names:
        out.append(f"    {n},")
    out.append(")")
    return "\n".join(out) + "\n"


def main():
    text = render()
    OUT.write_text(text)
    print(f"wrote {OUT} ({text.count(' = Message(')} messages)", file=sys.stderr)


if __name__ == "__main__":
    main()
