# fastlog/cli/reassign_partitions.py: `fastlog reassign-partitions`, the ZooKeeper-era
# kafka-reassign-partitions.sh of fastlog.
#
# Reads a plan in Kafka's JSON ({"version":1,"partitions":[{"topic","partition",
# "replicas":[...]}]}), checks it against the cluster (topics, partitions, registered
# brokers, no repeated replica), and with --execute writes it to
# /admin/reassign_partitions, where the active controller moves the replicas
# (fastlog/zk/controller.py); it prints the current assignment first, to keep for a
# rollback. --verify says, per partition, whether the move is complete. Talks to
# ZooKeeper directly (--zookeeper, as Kafka's tool did before 2.5). Runs on the CLI's
# main thread; kazoo calls block.

from __future__ import annotations

import json
import logging
import sys

from fastlog.cli.main import CliError
from fastlog.fileio import FileTooLargeError, read_capped
from fastlog.server.config import check_zk_connect

# A plan lists partitions and replica ids: even a large cluster's is a few MiB. The cap
# keeps /dev/zero or a wrong file from being read without end.
MAX_PLAN_BYTES = 16 << 20


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "reassign-partitions", help="move partition replicas between brokers",
        description="Move partition replicas between brokers with a JSON plan "
                    "(like kafka-reassign-partitions.sh with --zookeeper).")
    p.add_argument("--zookeeper", required=True, metavar="CONNECT",
                   help="the cluster's zookeeper.connect (host:port[/chroot])")
    p.add_argument("--reassignment-json-file", required=True, metavar="FILE",
                   help='{"version":1,"partitions":[{"topic":..,"partition":..,'
                        '"replicas":[..]}]}')
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", dest="action", action="store_const", const="execute",
                        help="start the reassignment")
    action.add_argument("--verify", dest="action", action="store_const", const="verify",
                        help="say whether each partition's reassignment is complete")
    p.set_defaults(run=run)


def _read_plan(path: str):
    from fastlog.zk import paths

    try:
        data = read_capped(path, MAX_PLAN_BYTES)
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from None
    except FileTooLargeError:
        raise CliError(f"{path} is larger than {MAX_PLAN_BYTES >> 20} MiB, "
                       "too large for a reassignment plan") from None
    # Parsed here first so that an error names the position, never the file's bytes.
    try:
        json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise CliError(f"{path} is not a reassignment plan: it is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise CliError(f"{path} is not a reassignment plan: {e.msg} at line {e.lineno} "
                       f"column {e.colno}") from None
    except RecursionError:
        raise CliError(f"{path} is not a reassignment plan: its JSON is nested too "
                       "deeply") from None
    try:
        plan = paths.decode_reassignment(path, data)
    except paths.ZkDataError as e:
        # Its message may quote a value from the file: keep the sentence short.
        reason = str(e).removeprefix(f"{path}: ")
        if len(reason) > 160:
            reason = reason[:157] + "..."
        raise CliError(f"{path} is not a reassignment plan: {reason}") from None
    if not plan:
        raise CliError(f"{path} names no partitions")
    return plan


def run(args, out=None) -> int:
    from fastlog.zk import paths
    from fastlog.zk.client import KafkaZkClient

    out = out or sys.stdout
    problem = check_zk_connect(args.zookeeper)
    if problem:
        raise CliError(f"--zookeeper {problem}, not {args.zookeeper!r}")
    plan = _read_plan(args.reassignment_json_file)
    # kazoo logs each failed connection attempt; the one sentence below says it all.
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    zk = KafkaZkClient(args.zookeeper, session_timeout=10.0, connection_timeout=10.0)
    try:
        zk.start()
    except Exception as e:  # noqa: BLE001 - one sentence for the operator
        raise CliError(f"cannot connect to ZooKeeper at {args.zookeeper}: {e}") from None
    try:
        current = {}
        for topic in sorted({t for t, _ in plan}):
            a = zk.get_topic_assignment(topic)
            if a is None:
                raise CliError(f"topic {topic!r} does not exist")
            for (t, p) in plan:
                if t == topic:
                    if p not in a.partitions:
                        raise CliError(f"topic {topic!r} has no partition {p}")
                    current[(t, p)] = list(a.partitions[p])
        if args.action == "verify":
            done = True
            for tp, target in sorted(plan.items()):
                ok = current[tp] == target
                done = done and ok
                out.write(f"Reassignment of partition {tp[0]}-{tp[1]} is "
                          f"{'completed' if ok else 'still in progress'}.\n")
            return 0 if done else 1
        brokers = set(zk.get_broker_ids())
        for tp, target in sorted(plan.items()):
            if not target or len(set(target)) != len(target):
                raise CliError(f"{tp[0]}-{tp[1]}: replicas {target} are empty or repeated")
            unknown = [b for b in target if b not in brokers]
            if unknown:
                raise CliError(f"{tp[0]}-{tp[1]}: brokers {unknown} are not registered")
        if zk.exists(paths.REASSIGN_PARTITIONS):
            raise CliError("a reassignment is already in progress "
                           f"({paths.REASSIGN_PARTITIONS} exists)")
        out.write("Current partition replica assignment\n\n")
        out.write(json.dumps({"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": r}
            for (t, p), r in sorted(current.items())]}) + "\n\n")
        out.write("Save this to use as the --reassignment-json-file option during rollback\n")
        zk.kazoo.create(paths.REASSIGN_PARTITIONS, paths.encode_reassignment(plan),
                        makepath=True)
        out.write("Successfully started partition reassignments for "
                  + ",".join(f"{t}-{p}" for t, p in sorted(plan)) + "\n")
        return 0
    finally:
        zk.close()
