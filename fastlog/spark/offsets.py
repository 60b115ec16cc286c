# fastlog/spark/offsets.py: per-topic-partition offsets in the JSON shape of Spark's Kafka source.
#
# Owns the offset format kept in Spark's checkpoint (`offsets/<batch>`): a JSON object
# {"topic": {"partition": nextOffset, ...}, ...}, exactly like Kafka's JsonUtils, where
# nextOffset is one past the last record read. Spark compares these JSON strings, so the
# same offsets must always serialise identically: topics sorted by name, partitions
# numerically, partition ids as strings. Also parses the user's offset specs
# (startingOffsets / endingOffsets JSON with -2 = earliest, -1 = latest, the
# starting/endingOffsetsByTimestamp JSON of timestamps in ms, and `assign`).
# Pure functions; any thread, driver or executor.

from __future__ import annotations

import json

EARLIEST = -2
LATEST = -1


class OffsetSpecError(ValueError):
    """A user-given offsets JSON (or assign JSON) is malformed."""


def to_json_dict(offsets: dict[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """{(topic, partition): offset} -> Spark's nested dict, in the canonical order."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json_dict(data) -> dict[tuple[str, int], int]:
    """Spark's nested dict (as read back from the checkpoint) -> {(topic, partition): offset}."""
    if isinstance(data, str):
        data = json.loads(data)
    if not isinstance(data, dict):
        raise OffsetSpecError(f"expected a JSON object of topics, got {data!r}")
    out = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise OffsetSpecError(f"offsets of topic '{topic}' must be a JSON object")
        for partition, offset in parts.items():
            try:
                p = int(partition)
            except (TypeError, ValueError):
                raise OffsetSpecError(
                    f"partition '{partition}' of topic '{topic}' is not an integer") from None
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise OffsetSpecError(
                    f"offset of {topic}-{partition} must be an integer, got {offset!r}")
            out[(topic, p)] = offset
    return out


def _parse_spec(text: str, name: str, expected: str) -> dict[tuple[str, int], int]:
    try:
        data = json.loads(text)
    except ValueError:
        raise OffsetSpecError(f"option {name} must be {expected}, got {text!r}") from None
    try:
        values = from_json_dict(data)
    except OffsetSpecError as exc:
        raise OffsetSpecError(f"option {name}: {exc}") from None
    if not values:
        raise OffsetSpecError(f"option {name} names no partition")
    return values


def parse_offsets_spec(text: str, name: str) -> dict[tuple[str, int], int]:
    """A startingOffsets / endingOffsets JSON value -> {(topic, partition): offset or -1/-2}."""
    offsets = _parse_spec(text, name, "'earliest', 'latest' or a JSON object like "
                                      '{"topic":{"0":23,"1":-2}}')
    for (topic, p), off in offsets.items():
        if off < EARLIEST:
            raise OffsetSpecError(f"option {name}: offset {off} of {topic}-{p} is invalid "
                                  f"(use -2 for earliest, -1 for latest)")
    return offsets


def parse_timestamps_spec(text: str, name: str) -> dict[tuple[str, int], int]:
    """A startingOffsetsByTimestamp / endingOffsetsByTimestamp JSON value ->
    {(topic, partition): timestamp in ms since the epoch}."""
    stamps = _parse_spec(text, name, 'a JSON object like {"topic":{"0":1700000000000}}')
    for (topic, p), ts in stamps.items():
        if ts < 0:
            raise OffsetSpecError(f"option {name}: timestamp {ts} of {topic}-{p} is invalid "
                                  f"(milliseconds since the epoch, 0 or more)")
    return stamps


def parse_assign(text: str) -> list[tuple[str, int]]:
    """The `assign` option, JSON like {"topicA":[0,1],"topicB":[2]} -> sorted (topic, partition)."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not data:
        raise OffsetSpecError(
            f'option assign must be a JSON object like {{"topicA":[0,1]}}, got {text!r}')
    out = set()
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            raise OffsetSpecError(
                f"option assign: partitions of topic '{topic}' must be a list of "
                f"non-negative integers")
        out.update((topic, p) for p in parts)
    return sorted(out)
