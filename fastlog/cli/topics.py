# fastlog/cli/topics.py: `fastlog topics`, the kafka-topics.sh of fastlog.
#
# One action per invocation (--create, --list, --describe, --alter, --delete) carried out
# with fastlog.client.Admin; output follows kafka-topics.sh so scripts and habits carry
# over. Runs on the CLI's main thread with its own event loop.

from __future__ import annotations

import sys

from fastlog.cli.main import (
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    client_security,
    parse_key_value,
    partition_count,
    replication_factor,
    topic_name,
)
from fastlog.client.sync import run_async
from fastlog.protocol.topics import INTERNAL_TOPICS

ACTIONS = ("create", "list", "describe", "alter", "delete")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "topics", help="create, list, describe, alter and delete topics",
        description="Create, list, describe, alter and delete topics (like kafka-topics.sh).")
    add_bootstrap_option(p)
    add_client_config_options(p)
    actions = p.add_mutually_exclusive_group(required=True)
    for action in ACTIONS:
        actions.add_argument(f"--{action}", dest="action", action="store_const", const=action,
                             help=f"{action} topics" if action != "alter"
                             else "change the partition count or configs of a topic")
    p.add_argument("--topic", type=topic_name, help="topic name")
    p.add_argument("--partitions", type=partition_count, metavar="N",
                   help="number of partitions (create, or grow with --alter)")
    p.add_argument("--replication-factor", type=replication_factor, metavar="R",
                   help="replicas per partition (create)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="topic config override (create, alter); repeatable")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="remove a topic config override (alter); repeatable")
    p.add_argument("--if-not-exists", action="store_true",
                   help="with --create: do nothing if the topic exists")
    p.add_argument("--if-exists", action="store_true",
                   help="with --alter/--delete/--describe: do nothing if the topic is absent")
    p.add_argument("--exclude-internal", action="store_true",
                   help="with --list/--describe: leave out internal topics")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="with --describe: only partitions whose ISR is smaller than their "
                        "replica list")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="with --describe: only partitions without a leader")
    p.set_defaults(run=run)


# Option (dest) -> the actions it applies to. Any other action refuses it, as
# kafka-topics.sh does: ignoring it would hide a mistaken command line.
APPLIES_TO = {
    "topic": ("create", "describe", "alter", "delete"),
    "partitions": ("create", "alter"),
    "replication_factor": ("create",),
    "config": ("create", "alter"),
    "delete_config": ("alter",),
    "if_not_exists": ("create",),
    "if_exists": ("describe", "alter", "delete"),
    "exclude_internal": ("list", "describe"),
    "under_replicated_partitions": ("describe",),
    "unavailable_partitions": ("describe",),
}


def run(args) -> int:
    for dest, actions in APPLIES_TO.items():
        if getattr(args, dest) not in (None, False, []) and args.action not in actions:
            raise CliError(f"--{dest.replace('_', '-')} does not apply to --{args.action}")
    if args.action in ("create", "alter", "delete") and not args.topic:
        raise CliError(f"--{args.action} needs --topic")
    configs = dict(parse_key_value(c, "--config") for c in args.config)
    if args.action == "delete" and args.topic in INTERNAL_TOPICS:
        raise CliError(f"topic {args.topic} is internal to the brokers and cannot be deleted")
    if args.action == "alter" and not (args.partitions or configs or args.delete_config):
        raise CliError("--alter needs --partitions, --config or --delete-config")
    return run_async(_run(args, configs))


async def _run(args, configs) -> int:
    from fastlog.client import Admin, errors

    out = sys.stdout
    async with Admin(args.bootstrap_server, client_id="fastlog-topics",
                     security=client_security(args)) as admin:
        if args.action == "list":
            for name in await admin.list_topics(include_internal=not args.exclude_internal):
                out.write(name + "\n")
        elif args.action == "create":
            try:
                await admin.create_topic(args.topic, args.partitions or -1,
                                         args.replication_factor or -1, configs)
            except errors.KafkaError as exc:
                if args.if_not_exists and exc.code == errors.TOPIC_ALREADY_EXISTS:
                    return 0
                raise
            out.write(f"Created topic {args.topic}.\n")
        elif args.action == "delete":
            try:
                await admin.delete_topic(args.topic)
            except errors.UnknownTopic:
                if args.if_exists:
                    return 0
                raise
            out.write(f"Deleted topic {args.topic}.\n")
        elif args.action == "alter":
            try:
                info = (await admin.describe_topics([args.topic]))[0]
            except errors.UnknownTopic:
                if args.if_exists:
                    return 0
                raise
            if args.partitions:
                have = len(info.partitions)
                if args.partitions < have:
                    raise CliError(f"topic '{args.topic}' has {have} partitions; the count "
                                   f"can only grow")
                if args.partitions > have:
                    await admin.create_partitions(args.topic, args.partitions)
                    out.write(f"Topic {args.topic} now has {args.partitions} partitions.\n")
            if configs or args.delete_config:
                await admin.alter_configs(args.topic, configs, args.delete_config)
                out.write(f"Completed updating config for topic {args.topic}.\n")
        elif args.action == "describe":
            names = [args.topic] if args.topic else None
            try:
                topics = await admin.describe_topics(names)
            except errors.UnknownTopic:
                if args.if_exists:
                    return 0
                raise
            only = None
            if args.under_replicated_partitions or args.unavailable_partitions:
                def only(p, under=args.under_replicated_partitions,
                         unavailable=args.unavailable_partitions):
                    return (under and len(p.isr) < len(p.replicas)) or \
                        (unavailable and p.leader < 0)
            for info in topics:
                if args.exclude_internal and info.internal:
                    continue
                await _describe(admin, info, out, only)
    return 0


async def _describe(admin, info, out, only=None) -> None:
    """kafka-topics.sh --describe output; with `only` (a partition filter, as for
    --under-replicated-partitions) just the matching partition lines."""
    from fastlog.client import errors

    if only is not None:
        for p in (info.partitions[i] for i in sorted(info.partitions)):
            if only(p):
                _partition_line(info, p, out)
        return
    try:
        entries = await admin.describe_configs(info.name)
    except errors.FastlogError:
        entries = []
    overrides = ",".join(f"{c.name}={c.value}" for c in entries
                         if c.source == "DYNAMIC_TOPIC_CONFIG")
    parts = [info.partitions[p] for p in sorted(info.partitions)]
    rf = max((len(p.replicas) for p in parts), default=0)
    out.write(f"Topic: {info.name}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\t"
              f"Configs: {overrides}\n")
    for p in parts:
        _partition_line(info, p, out)


def _partition_line(info, p, out) -> None:
    out.write(f"\tTopic: {info.name}\tPartition: {p.partition}\tLeader: "
              f"{p.leader if p.leader >= 0 else 'none'}\t"
              f"Replicas: {','.join(map(str, p.replicas))}\t"
              f"Isr: {','.join(map(str, p.isr))}"
              + (f"\tOffline: {','.join(map(str, p.offline))}" if p.offline else "")
              + "\n")
