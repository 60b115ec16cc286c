# fastlog/cli/transactions.py: `fastlog transactions`, the list and describe of Kafka's
# kafka-transactions.sh.
#
# --list prints every transactional id the brokers coordinate (ListTransactions on each
# broker; --state keeps those in one of Kafka's states), one line each under a header:
# TransactionalId, Coordinator, ProducerId, TransactionState. --describe prints one id as
# its transaction coordinator answers DescribeTransactions: CoordinatorId, TransactionalId,
# ProducerId, ProducerEpoch, TransactionState, TransactionTimeoutMs,
# CurrentTransactionStartTimeMs, TransactionDurationMs, TopicPartitions (the columns of
# Kafka's tool).
#
# --describe-producers --topic T --partition P prints the partition leader's active producers
# (DescribeProducers): ProducerId, ProducerEpoch, LatestCoordinatorEpoch, LastSequence,
# LastTimestamp, CurrentTransactionStartOffset. --abort --topic T --partition P
# --start-offset N finds the producer whose open transaction starts at N there and writes an
# ABORT marker to the leader with WriteTxnMarkers (its epoch and latest coordinator epoch, as
# Kafka's Admin.abortTransaction); --producer-id, --producer-epoch and --coordinator-epoch
# name the transaction directly instead. --find-hanging --broker-id B lists the open transactions
# on the partitions B holds a replica of that are older than --max-transaction-timeout
# (minutes, Kafka's transaction.max.timeout.ms default of 15) and that no coordinator has
# as an ongoing transaction over that partition (ListTransactions by producer id, then
# DescribeTransactions): Topic, Partition, ProducerId, ProducerEpoch, CoordinatorEpoch,
# StartOffset, LastTimestamp, Duration(min). Carried out with fastlog.client.Admin; refusals (an unknown id) are one
# sentence on stderr and a non-zero exit through the dispatcher in fastlog/cli/main.py.
# Bad command lines (an option that does not go with the action) are refused the same way.
# Runs on the CLI's main thread with its own event loop.

from __future__ import annotations

import sys
import time

from fastlog.cli.main import (
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    bounded_int,
    client_security,
    group_id,
    offset_value,
    partition_index,
    topic_name,
)
from fastlog.client.errors import FastlogError
from fastlog.client.sync import run_async

OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
          "CompleteAbort", "Dead", "PrepareEpochFence")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "transactions", help="list and describe transactions",
        description="List the transactional ids the brokers coordinate and describe one "
                    "(like kafka-transactions.sh list and describe).")
    add_bootstrap_option(p)
    add_client_config_options(p)
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", dest="action", action="store_const", const="list",
                         help="list the transactional ids")
    actions.add_argument("--describe", dest="action", action="store_const", const="describe",
                         help="the state of --transactional-id")
    actions.add_argument("--describe-producers", dest="action", action="store_const",
                         const="describe-producers",
                         help="the active producers of --topic/--partition")
    actions.add_argument("--abort", dest="action", action="store_const", const="abort",
                         help="abort the transaction starting at --start-offset of "
                              "--topic/--partition")
    actions.add_argument("--find-hanging", dest="action", action="store_const",
                         const="find-hanging",
                         help="open transactions on --broker-id's partitions that no "
                              "coordinator knows")
    p.add_argument("--topic", type=topic_name, help="with --describe-producers, --abort")
    p.add_argument("--partition", type=partition_index,
                   help="with --describe-producers, --abort")
    p.add_argument("--start-offset", type=offset_value, metavar="N",
                   help="with --abort: the first offset of the transaction to abort")
    p.add_argument("--producer-id", type=bounded_int(0, INT64_MAX), metavar="PID",
                   help="with --abort instead of --start-offset: the producer whose "
                        "transaction to abort (with --producer-epoch, --coordinator-epoch)")
    p.add_argument("--producer-epoch", type=bounded_int(0, INT16_MAX), metavar="EPOCH",
                   help="with --abort --producer-id")
    p.add_argument("--coordinator-epoch", type=bounded_int(0, INT32_MAX), metavar="EPOCH",
                   help="with --abort --producer-id")
    p.add_argument("--broker-id", type=partition_index, metavar="B",
                   help="with --find-hanging: the broker whose partitions to search")
    p.add_argument("--max-transaction-timeout", type=bounded_int(0, INT32_MAX // 60_000), metavar="MINUTES",
                   help="with --find-hanging: transactions open longer than this are "
                        "candidates (default 15, Kafka's transaction.max.timeout.ms)")
    p.add_argument("--transactional-id", type=group_id, metavar="ID",
                   help="with --describe: the transactional id")
    p.add_argument("--state", action="append", choices=STATES, default=[],
                   help="with --list: only ids in this state; repeatable")
    p.set_defaults(run=run)


_NEEDS = {"describe-producers": ("topic", "partition"),
          "abort": ("topic", "partition"),
          "find-hanging": ("broker_id",)}
_BY_PRODUCER = ("producer_id", "producer_epoch", "coordinator_epoch")
_OPTIONAL = {"find-hanging": ("max_transaction_timeout",),
             "abort": ("start_offset", *_BY_PRODUCER)}
_ACTION_OPTIONS = ("topic", "partition", "start_offset", *_BY_PRODUCER, "broker_id",
                   "max_transaction_timeout")


def run(args) -> int:
    if args.action in _NEEDS:
        allowed = _NEEDS[args.action] + _OPTIONAL.get(args.action, ())
        for name in (*_ACTION_OPTIONS, "transactional_id"):
            flag = "--" + name.replace("_", "-")
            if getattr(args, name) is None and name in _NEEDS[args.action]:
                raise CliError(f"--{args.action} needs {flag}")
            if getattr(args, name) is not None and name not in allowed:
                raise CliError(f"{flag} does not apply to --{args.action}")
        if args.state:
            raise CliError("--state goes with --list")
        if args.action == "abort":
            given = [getattr(args, n) is not None for n in _BY_PRODUCER]
            if args.start_offset is not None and any(given):
                raise CliError("--start-offset and --producer-id/--producer-epoch/"
                               "--coordinator-epoch are two ways to name the transaction; "
                               "give one")
            if args.start_offset is None and not all(given):
                raise CliError("--abort needs --start-offset, or --producer-id, "
                               "--producer-epoch and --coordinator-epoch")
        return run_async(_run(args))
    for name in _ACTION_OPTIONS:
        if getattr(args, name) is not None:
            raise CliError(f"--{name.replace('_', '-')} does not apply to --{args.action}")
    if args.action == "describe" and not args.transactional_id:
        raise CliError("--describe needs --transactional-id")
    if args.action == "list" and args.transactional_id:
        raise CliError("--transactional-id does not apply to --list")
    if args.action == "describe" and args.state:
        raise CliError("--state goes with --list")
    return run_async(_run(args))


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                   + "\n" for r in rows)


async def _run(args) -> int:
    from fastlog.client import Admin

    async with Admin(args.bootstrap_server, client_id="fastlog-transactions",
                     security=client_security(args)) as admin:
        if args.action == "describe-producers":
            return await _describe_producers(admin, args)
        if args.action == "abort":
            return await _abort(admin, args)
        if args.action == "find-hanging":
            return await _find_hanging(admin, args)
        if args.action == "list":
            rows = [["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]]
            rows += [[t.transactional_id, str(t.coordinator), str(t.producer_id), t.state]
                     for t in await admin.list_transactions(args.state or None)]
            sys.stdout.write(_table(rows))
            return 0
        d = await admin.describe_transaction(args.transactional_id)
        started = d.start_time_ms >= 0 and d.state in OPEN_STATES
        rows = [["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                 "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                 "TransactionDurationMs", "TopicPartitions"],
                [str(d.coordinator), d.transactional_id, str(d.producer_id),
                 str(d.producer_epoch), d.state, str(d.timeout_ms),
                 str(d.start_time_ms) if started else "None",
                 str(int(time.time() * 1000) - d.start_time_ms) if started else "None",
                 ",".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions)]]
        sys.stdout.write(_table(rows))
        return 0


async def _describe_producers(admin, args) -> int:
    from fastlog.client import TopicPartition

    tp = TopicPartition(args.topic, args.partition)
    rows = [["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
             "LastTimestamp", "CurrentTransactionStartOffset"]]
    rows += [[str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch),
              str(s.last_sequence), str(s.last_timestamp),
              str(s.current_txn_start_offset) if s.current_txn_start_offset >= 0 else "None"]
             for s in (await admin.describe_producers([tp]))[tp]]
    sys.stdout.write(_table(rows))
    return 0


async def _abort(admin, args) -> int:
    from fastlog.client import TopicPartition

    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is None:
        pid, epoch, coordinator_epoch = (args.producer_id, args.producer_epoch,
                                         args.coordinator_epoch)
        where = ""
    else:
        found = [s for s in (await admin.describe_producers([tp]))[tp]
                 if s.current_txn_start_offset == args.start_offset]
        if not found:
            raise FastlogError(f"no open transaction of {tp} starts at offset "
                               f"{args.start_offset}")
        pid, epoch = found[0].producer_id, found[0].producer_epoch
        coordinator_epoch = max(0, found[0].coordinator_epoch)
        where = f" starting at offset {args.start_offset}"
    await admin.abort_transaction(tp, pid, epoch, coordinator_epoch)
    sys.stdout.write(f"Aborted the transaction of producer {pid} (epoch {epoch}) on "
                     f"{tp}{where}\n")
    return 0


async def _find_hanging(admin, args) -> int:
    from fastlog.client import TopicPartition

    max_ms = 60_000 * (15 if args.max_transaction_timeout is None
                       else args.max_transaction_timeout)
    await admin.cluster.refresh_metadata([])
    if args.broker_id not in admin.cluster.brokers:
        raise FastlogError(f"broker {args.broker_id} is not in the cluster")
    tps = [TopicPartition(t.name, p.partition)
           for t in await admin.describe_topics() for p in t.partitions.values()
           if args.broker_id in p.replicas]
    now = int(time.time() * 1000)
    candidates = [(tp, s) for tp, states in (await admin.describe_producers(tps)).items()
                  for s in states
                  if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_ms]
    # A candidate is not hanging if its coordinator has it as an open transaction that
    # includes the partition, with the same producer epoch.
    pids = sorted({s.producer_id for _, s in candidates})
    known: dict[int, list] = {}
    if pids:
        for listing in await admin.list_transactions(producer_ids=pids):
            if listing.state in OPEN_STATES:
                known.setdefault(listing.producer_id, []).append(
                    await admin.describe_transaction(listing.transactional_id))
    rows = [["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
             "StartOffset", "LastTimestamp", "Duration(min)"]]
    for tp, s in sorted(candidates, key=lambda c: (c[0], c[1].producer_id)):
        if any(d.producer_id == s.producer_id and d.producer_epoch == s.producer_epoch
               and d.state in OPEN_STATES and tp in d.partitions
               for d in known.get(s.producer_id, ())):
            continue
        rows.append([tp.topic, str(tp.partition), str(s.producer_id), str(s.producer_epoch),
                     str(s.coordinator_epoch), str(s.current_txn_start_offset),
                     str(s.last_timestamp), str((now - s.last_timestamp) // 60_000)])
    sys.stdout.write(_table(rows))
    return 0
