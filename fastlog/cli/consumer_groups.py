# fastlog/cli/consumer_groups.py: `fastlog consumer-groups`, the kafka-consumer-groups.sh
# of fastlog.
#
# One action per invocation: --list (--state: with each group's state, or only the groups in
# the given states, ListGroups v4), --describe (members, assignment, committed offset, log
# end offset and lag per partition), --reset-offsets (dry run unless --execute) and
# --delete, carried out with fastlog.client.Admin (ListGroups, DescribeGroups, OffsetFetch,
# ListOffsets, OffsetCommit, DeleteGroups). Bad input and refusals (unknown group, a group
# that still has members, a bad date) are one sentence on stderr and a non-zero exit,
# through the dispatcher in fastlog/cli/main.py. Runs on the CLI's main thread with its
# own event loop.

from __future__ import annotations

import argparse
import datetime as dt
import sys

from fastlog.cli.main import (
    INT64_MAX,
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    bounded_int,
    client_security,
    group_id,
    partition_index,
    topic_name,
)
from fastlog.client.sync import run_async

ACTIONS = ("list", "describe", "reset-offsets", "delete")
INACTIVE_STATES = ("Empty", "Dead")
NO_OFFSET = "-"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "consumer-groups", help="list and describe consumer groups, reset their offsets",
        description="List, describe and delete consumer groups and reset their committed "
                    "offsets (like kafka-consumer-groups.sh).")
    add_bootstrap_option(p)
    add_client_config_options(p)
    actions = p.add_mutually_exclusive_group(required=True)
    for action in ACTIONS:
        actions.add_argument(f"--{action}", dest="action", action="store_const", const=action,
                             help={"list": "list the groups",
                                   "describe": "members, offsets and lag of --group",
                                   "reset-offsets": "move the committed offsets of --group",
                                   "delete": "delete --group (it must have no members)"}[action])
    p.add_argument("--group", type=group_id, help="consumer group id")
    p.add_argument("--topic", type=_topic_spec, action="append", default=[],
                   metavar="TOPIC[:P,P...]",
                   help="with --reset-offsets: topic (optionally some partitions); repeatable")
    p.add_argument("--all-topics", action="store_true",
                   help="with --reset-offsets: every topic the group has offsets for")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", dest="to", action="store_const", const=("earliest", None),
                    help="reset to the log start offset")
    to.add_argument("--to-latest", dest="to", action="store_const", const=("latest", None),
                    help="reset to the log end offset")
    to.add_argument("--to-offset", dest="to", type=lambda s: ("offset", _to_offset(s)),
                    metavar="N", help="reset to offset N")
    to.add_argument("--to-datetime", dest="to", type=lambda s: ("datetime", _datetime(s)),
                    metavar="YYYY-MM-DDTHH:MM:SS[.sss][Z|+HH:MM]",
                    help="reset to the first offset at or after this time (UTC if no zone)")
    to.add_argument("--shift-by", dest="to", type=lambda s: ("shift", _shift(s)),
                    metavar="N", help="move each committed offset by N (may be negative)")
    p.add_argument("--execute", action="store_true",
                   help="with --reset-offsets: commit the new offsets (default: only show them)")
    p.add_argument("--state", nargs="?", const="", type=_states, metavar="STATE[,STATE...]",
                   help="with --list: show each group's state; with states, only the groups "
                        "in one of them (e.g. Stable,Empty)")
    p.set_defaults(run=run)


# Kafka's classic group states (ConsumerGroupState), as --state takes them.
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")


def _states(text: str) -> list[str]:
    """--state's comma-separated list, each a group state in any case."""
    by_lower = {s.lower(): s for s in GROUP_STATES}
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if item.lower() not in by_lower:
            raise argparse.ArgumentTypeError(
                f"'{item}' is not a group state; use " + ", ".join(GROUP_STATES))
        out.append(by_lower[item.lower()])
    return out


# Offsets are Kafka's int64; a shift moves one by at most that much either way.
_to_offset = bounded_int(0, INT64_MAX)
_shift = bounded_int(-INT64_MAX, INT64_MAX)


def _topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """--topic TOPIC or TOPIC:P,P -> (topic, sorted partitions or None for all)."""
    topic, sep, parts = spec.partition(":")
    topic = topic_name(topic)
    if not sep:
        return topic, None
    try:
        return topic, sorted({partition_index(p.strip()) for p in parts.split(",")
                              if p.strip()})
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"bad partition in '{spec}': {exc}") from None


def _datetime(text: str) -> int:
    """Milliseconds since the epoch; a time without zone is UTC."""
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a date-time like 2024-01-31T12:00:00 or "
            "2024-01-31T12:00:00.000+01:00") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def run(args) -> int:
    if args.action != "list" and not args.group:
        raise CliError(f"--{args.action} needs --group")
    if args.action == "list" and args.group:
        raise CliError("--group does not apply to --list")
    if args.state is not None and args.action != "list":
        raise CliError("--state goes with --list")
    if args.action == "reset-offsets":
        if args.to is None:
            raise CliError("--reset-offsets needs one of --to-earliest, --to-latest, "
                           "--to-offset, --to-datetime or --shift-by")
        if not args.topic and not args.all_topics:
            raise CliError("--reset-offsets needs --topic or --all-topics")
    elif args.to is not None or args.topic or args.all_topics or args.execute:
        raise CliError("--topic, --all-topics, --to-* and --execute go with --reset-offsets")
    return run_async(_run(args))


async def _run(args) -> int:
    from fastlog.client import Admin

    async with Admin(args.bootstrap_server, client_id="fastlog-consumer-groups",
                     security=client_security(args)) as admin:
        if args.action == "list":
            if args.state is None:
                for g in await admin.list_groups():
                    sys.stdout.write(g.group_id + "\n")
                return 0
            groups = await admin.list_groups(args.state)
            width = max([len("GROUP")] + [len(g.group_id) for g in groups])
            sys.stdout.write(f"{'GROUP':<{width}} STATE\n")
            for g in groups:
                sys.stdout.write(f"{g.group_id:<{width}} {g.state}\n")
            return 0
        if args.action == "describe":
            return await _describe(admin, args.group)
        if args.action == "reset-offsets":
            return await _reset(admin, args)
        return await _delete(admin, args.group)


# -- describe ---------------------------------------------------------------------------

async def _group(admin, group_id: str):
    from fastlog.client.errors import KafkaError

    try:
        (desc,) = await admin.describe_groups([group_id])
    except KafkaError as exc:
        raise CliError(f"cannot describe consumer group '{group_id}': {exc.name}") from None
    return desc


async def _describe(admin, group_id: str) -> int:
    from fastlog.client import TopicPartition
    from fastlog.client.group_offsets import assigned_partitions, end_offsets

    desc = await _group(admin, group_id)
    committed = await admin.fetch_offsets(group_id)
    if desc.state == "Dead" and not committed:
        raise CliError(f"consumer group '{group_id}' does not exist")
    owner: dict[TopicPartition, object] = {}
    for m in desc.members:
        if desc.protocol_type == "consumer":
            for tp in assigned_partitions(m.assignment):
                owner[tp] = m
    tps = sorted(set(committed) | set(owner), key=lambda tp: (tp.topic, tp.partition))
    ends = await end_offsets(admin, tps)
    out = sys.stdout
    members = len(desc.members)
    out.write(f"Consumer group '{group_id}' is {desc.state} with {members} "
              f"member{'s' if members != 1 else ''}"
              + (f" (protocol {desc.protocol})" if desc.protocol else "") + ".\n\n")
    rows = [("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
             "CONSUMER-ID", "HOST", "CLIENT-ID")]
    for tp in tps:
        cur = committed.get(tp)
        end = ends.get(tp)
        lag = (end - cur[0]) if cur is not None and end is not None else None
        m = owner.get(tp)
        rows.append((group_id, tp.topic, str(tp.partition),
                     str(cur[0]) if cur is not None else NO_OFFSET,
                     str(end) if end is not None else NO_OFFSET,
                     str(lag) if lag is not None else NO_OFFSET,
                     m.member_id if m else NO_OFFSET, m.client_host if m else NO_OFFSET,
                     m.client_id if m else NO_OFFSET))
    for m in desc.members:
        if not any(owner.get(tp) is m for tp in tps):
            rows.append((group_id, NO_OFFSET, NO_OFFSET, NO_OFFSET, NO_OFFSET, NO_OFFSET,
                         m.member_id, m.client_host, m.client_id))
    _table(rows, out)
    return 0


def _table(rows, out) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


# -- reset ------------------------------------------------------------------------------

async def _reset(admin, args) -> int:
    from fastlog.client import TopicPartition
    from fastlog.client.errors import KafkaError, UnknownTopic
    from fastlog.client.group_offsets import reset_targets

    group_id = args.group
    desc = await _group(admin, group_id)
    if desc.state not in INACTIVE_STATES:
        raise CliError(f"consumer group '{group_id}' is still active ({desc.state}, "
                       f"{len(desc.members)} members); stop its consumers first")
    committed = await admin.fetch_offsets(group_id)
    tps: list[TopicPartition] = []
    if args.all_topics:
        tps = sorted(committed, key=lambda tp: (tp.topic, tp.partition))
    for topic, parts in args.topic:
        try:
            (info,) = await admin.describe_topics([topic])
        except UnknownTopic:
            raise CliError(f"topic '{topic}' does not exist") from None
        have = sorted(info.partitions)
        if parts is None:
            parts = have
        missing = [p for p in parts if p not in info.partitions]
        if missing:
            raise CliError(f"topic '{topic}' has no partition {missing[0]}")
        tps.extend(TopicPartition(topic, p) for p in parts if TopicPartition(topic, p) not in tps)
    if not tps:
        raise CliError(f"consumer group '{group_id}' has no offsets to reset")
    try:
        kind, value = args.to
        new = await reset_targets(admin, tps, kind, value, committed)
    except KafkaError as exc:
        raise CliError(f"cannot read the partitions' offsets: {exc}") from None
    if args.execute:
        await admin.commit_offsets(group_id, new)
    rows = [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
    rows += [(group_id, tp.topic, str(tp.partition), str(off)) for tp, off in new.items()]
    _table(rows, sys.stdout)
    if not args.execute:
        sys.stdout.write("\n(dry run: add --execute to commit these offsets)\n")
    return 0


# -- delete -----------------------------------------------------------------------------

async def _delete(admin, group_id: str) -> int:
    from fastlog.client import errors

    try:
        await admin.delete_groups([group_id])
    except errors.KafkaError as exc:
        if exc.name == "GROUP_ID_NOT_FOUND":
            raise CliError(f"consumer group '{group_id}' does not exist") from None
        if exc.name == "NON_EMPTY_GROUP":
            raise CliError(f"consumer group '{group_id}' still has members; "
                           "stop its consumers first") from None
        raise
    sys.stdout.write(f"Deleted consumer group '{group_id}'.\n")
    return 0
