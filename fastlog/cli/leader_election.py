# fastlog/cli/leader_election.py: `fastlog leader-election`, kafka-leader-election.sh of
# fastlog.
#
#   fastlog leader-election --bootstrap-server B --election-type preferred --all-topic-partitions
#   fastlog leader-election --bootstrap-server B --election-type unclean --topic t --partition 0
#
# Asks the controller for a preferred election (the first replica leads again where it is
# live and in the ISR) or an unclean one (a partition without a live leader gets one, from
# outside the ISR if need be) through fastlog.client.Admin.elect_leaders (ElectLeaders).
# Prints Kafka's tool's sentences: the partitions elected, those whose valid replica
# already leads, and one line per failure; exit status 1 when any partition failed. Bad
# input is one sentence and exit status 2. Runs on the CLI's main thread with its own loop.

from __future__ import annotations

import sys

from fastlog.cli.main import (
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    client_security,
    partition_index,
    topic_name,
)
from fastlog.client.sync import run_async
from fastlog.protocol import Errors

ELECTION_NOT_NEEDED = int(Errors.ELECTION_NOT_NEEDED)
ELECTION_TYPES = ("preferred", "unclean")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "leader-election", help="elect preferred (or unclean) partition leaders",
        description="Elect partition leaders now (like kafka-leader-election.sh): the "
                    "preferred replica where it is live and in sync, or, unclean, any live "
                    "replica for a partition without a leader. Needs Alter on the cluster.")
    add_bootstrap_option(p)
    add_client_config_options(p)
    p.add_argument("--election-type", required=True, type=str.lower, choices=ELECTION_TYPES,
                   help="preferred or unclean")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--all-topic-partitions", action="store_true",
                      help="every partition of every topic")
    what.add_argument("--topic", type=topic_name, help="the topic (with --partition)")
    p.add_argument("--partition", type=partition_index, metavar="P",
                   help="the partition of --topic")
    p.set_defaults(run=run)


def run(args) -> int:
    if args.topic is not None and args.partition is None:
        raise CliError("--topic needs --partition")
    if args.partition is not None and args.topic is None:
        raise CliError("--partition goes with --topic")
    return run_async(_run(args))


async def _run(args) -> int:
    from fastlog.client import Admin
    from fastlog.client.errors import error_name

    unclean = args.election_type == "unclean"
    partitions = None if args.all_topic_partitions else [(args.topic, args.partition)]
    async with Admin(args.bootstrap_server, client_id="fastlog-leader-election",
                     security=client_security(args)) as admin:
        results = await admin.elect_leaders(unclean, partitions)
    kind = args.election_type.upper()
    elected = sorted(tp for tp, (code, _) in results.items() if code == 0)
    not_needed = sorted(tp for tp, (code, _) in results.items() if code == ELECTION_NOT_NEEDED)
    failed = sorted((tp, r) for tp, r in results.items() if r[0] not in (0, ELECTION_NOT_NEEDED))
    if elected:
        sys.stdout.write(f"Successfully completed leader election ({kind}) for partitions "
                         f"{_names(elected)}\n")
    if not_needed:
        sys.stdout.write(f"Valid replica already elected for partitions {_names(not_needed)}\n")
    if not results:
        sys.stdout.write("No partition needed an election\n")
    if failed:
        sys.stdout.write(f"Failed to elect leader for partitions "
                         f"{_names(tp for tp, _ in failed)}\n")
        for (t, p), (code, message) in failed:
            detail = f": {message}" if message else ""
            sys.stderr.write(f"Error completing leader election ({kind}) for partition "
                             f"{t}-{p}: {error_name(code)}{detail}\n")
        return 1
    return 0


def _names(tps) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)
