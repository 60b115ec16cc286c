# fastlog/cli/transactions.py: `fastlog transactions`, the list and describe of Kafka's
# kafka-transactions.sh.
#
# --list prints every transactional id the brokers coordinate (ListTransactions on each
# broker; --state keeps those in one of Kafka's states), one line each under a header:
# TransactionalId, Coordinator, ProducerId, TransactionState. --describe prints one id as
# its transaction coordinator answers DescribeTransactions: CoordinatorId, TransactionalId,
# ProducerId, ProducerEpoch, TransactionState, TransactionTimeoutMs,
# CurrentTransactionStartTimeMs, TransactionDurationMs, TopicPartitions (the columns of
# Kafka's tool). Carried out with fastlog.client.Admin; refusals (an unknown id) are one
# sentence on stderr and a non-zero exit through the dispatcher in fastlog/cli/main.py.
# Runs on the CLI's main thread with its own event loop.

from __future__ import annotations

import sys
import time

from fastlog.cli.main import (
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    client_security,
    group_id,
)
from fastlog.client.sync import run_async

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
    p.add_argument("--transactional-id", type=group_id, metavar="ID",
                   help="with --describe: the transactional id")
    p.add_argument("--state", action="append", choices=STATES, default=[],
                   help="with --list: only ids in this state; repeatable")
    p.set_defaults(run=run)


def run(args) -> int:
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
        if args.action == "list":
            rows = [["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]]
            rows += [[t.transactional_id, str(t.coordinator), str(t.producer_id), t.state]
                     for t in await admin.list_transactions(args.state or None)]
            sys.stdout.write(_table(rows))
            return 0
        d = await admin.describe_transaction(args.transactional_id)
        started = d.start_time_ms >= 0 and d.state in ("Ongoing", "PrepareCommit",
                                                       "PrepareAbort")
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
