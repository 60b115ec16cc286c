# fastlog/cli/reassign_partitions.py: `fastlog reassign-partitions`, the ZooKeeper-era
# kafka-reassign-partitions.sh of fastlog.
#
# Reads a plan in Kafka's JSON ({"version":1,"partitions":[{"topic","partition",
# "replicas":[...]}]}), checks it against the cluster (topics, partitions, registered
# brokers, no repeated replica), and with --execute writes it to
# /admin/reassign_partitions, where the active controller moves the replicas
# (fastlog/zk/controller.py); it prints the current assignment first, to keep for a
# rollback. --verify says, per partition, whether the move is complete. Talks to
# ZooKeeper directly (--zookeeper, as Kafka's tool did before 2.5), or to the brokers
# (--bootstrap-server, as Kafka's tool does since: fastlog.client.Admin's
# AlterPartitionReassignments and ListPartitionReassignments, KIP-455), which also
# cancels moves (--cancel: each partition back on the replicas it had). Runs on the
# CLI's main thread; kazoo calls block, the Admin path runs its own loop.

from __future__ import annotations

import json
import logging
import sys

from fastlog.cli.main import CliError, add_client_config_options, client_security
from fastlog.client.sync import run_async
from fastlog.fileio import FileTooLargeError, read_capped
from fastlog.server.config import check_zk_connect

# A plan lists partitions and replica ids: even a large cluster's is a few MiB. The cap
# keeps /dev/zero or a wrong file from being read without end.
MAX_PLAN_BYTES = 16 << 20


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "reassign-partitions", help="move partition replicas between brokers",
        description="Move partition replicas between brokers with a JSON plan "
                    "(like kafka-reassign-partitions.sh).")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", metavar="CONNECT",
                       help="the cluster's zookeeper.connect (host:port[/chroot])")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT",
                       help="a broker of the cluster (the Admin API's reassignments)")
    add_client_config_options(p)
    p.add_argument("--reassignment-json-file", required=True, metavar="FILE",
                   help='{"version":1,"partitions":[{"topic":..,"partition":..,'
                        '"replicas":[..]}]}')
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", dest="action", action="store_const", const="execute",
                        help="start the reassignment")
    action.add_argument("--verify", dest="action", action="store_const", const="verify",
                        help="say whether each partition's reassignment is complete")
    action.add_argument("--cancel", dest="action", action="store_const", const="cancel",
                        help="with --bootstrap-server: stop the plan's moves, each "
                             "partition back on the replicas it had")
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


def _current(plan, assignment_of) -> dict[tuple[str, int], list[int]]:
    """The replicas each partition of the plan has now; assignment_of(topic) gives
    {partition: replicas}, or None for a topic that does not exist."""
    current = {}
    for topic in sorted({t for t, _ in plan}):
        parts = assignment_of(topic)
        if parts is None:
            raise CliError(f"topic {topic!r} does not exist")
        for (t, p) in plan:
            if t == topic:
                if p not in parts:
                    raise CliError(f"topic {topic!r} has no partition {p}")
                current[(t, p)] = list(parts[p])
    return current


def _check_targets(plan, brokers) -> None:
    for tp, target in sorted(plan.items()):
        if not target or len(set(target)) != len(target):
            raise CliError(f"{tp[0]}-{tp[1]}: replicas {target} are empty or repeated")
        unknown = [b for b in target if b not in brokers]
        if unknown:
            raise CliError(f"{tp[0]}-{tp[1]}: brokers {unknown} are not registered")


def _write_rollback(current, out) -> None:
    out.write("Current partition replica assignment\n\n")
    out.write(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r}
        for (t, p), r in sorted(current.items())]}) + "\n\n")
    out.write("Save this to use as the --reassignment-json-file option during rollback\n")


def run(args, out=None) -> int:
    from fastlog.zk import paths
    from fastlog.zk.client import KafkaZkClient

    out = out or sys.stdout
    if args.bootstrap_server is not None:
        security = client_security(args)
        return run_async(_run_admin(args, _read_plan(args.reassignment_json_file),
                                    security, out))
    if args.action == "cancel":
        raise CliError("--cancel needs --bootstrap-server (cancelling is the brokers' work)")
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
        current = _current(plan, lambda topic: getattr(zk.get_topic_assignment(topic),
                                                       "partitions", None))
        if args.action == "verify":
            done = True
            for tp, target in sorted(plan.items()):
                ok = current[tp] == target
                done = done and ok
                out.write(f"Reassignment of partition {tp[0]}-{tp[1]} is "
                          f"{'completed' if ok else 'still in progress'}.\n")
            return 0 if done else 1
        _check_targets(plan, set(zk.get_broker_ids()))
        if zk.exists(paths.REASSIGN_PARTITIONS):
            raise CliError("a reassignment is already in progress "
                           f"({paths.REASSIGN_PARTITIONS} exists)")
        _write_rollback(current, out)
        zk.kazoo.create(paths.REASSIGN_PARTITIONS, paths.encode_reassignment(plan),
                        makepath=True)
        out.write("Successfully started partition reassignments for "
                  + ",".join(f"{t}-{p}" for t, p in sorted(plan)) + "\n")
        return 0
    finally:
        zk.close()


async def _run_admin(args, plan, security, out) -> int:
    from fastlog.client import Admin, TopicPartition
    from fastlog.client import errors as client_errors

    async with Admin(args.bootstrap_server, client_id="fastlog-reassign-partitions",
                     security=security) as admin:
        async def assignment_of(topic):
            try:
                (info,) = await admin.describe_topics([topic])
            except client_errors.UnknownTopic:
                return None
            return {p: list(info.partitions[p].replicas) for p in info.partitions}

        assignments = {t: await assignment_of(t) for t in {t for t, _ in plan}}
        current = _current(plan, assignments.get)
        tps = {tp: TopicPartition(*tp) for tp in plan}
        if args.action == "verify":
            ongoing = await admin.list_partition_reassignments(list(tps.values()))
            done = True
            for tp, target in sorted(plan.items()):
                name = f"{tp[0]}-{tp[1]}"
                if tps[tp] in ongoing:
                    out.write(f"Reassignment of partition {name} is still in progress.\n")
                elif current[tp] == target:
                    out.write(f"Reassignment of partition {name} is completed.\n")
                    continue
                else:
                    out.write(f"There is no active reassignment of partition {name}, but "
                              f"replica set is {current[tp]} rather than {target}.\n")
                done = False
            return 0 if done else 1
        if args.action == "execute":
            _check_targets(plan, set(admin.cluster.brokers))
            _write_rollback(current, out)
            moves = {tps[tp]: target for tp, target in plan.items()}
        else:
            moves = {tps[tp]: None for tp in plan}
        failed = {tp: e for tp, e in (await admin.alter_partition_reassignments(moves)).items()
                  if e is not None}
        if failed:
            verb = "reassigning" if args.action == "execute" else "cancelling reassignment of"
            raise client_errors.FastlogError(f"error {verb} " + "; ".join(
                f"{tp}: {e.name}" + (f" ({e.broker_message})" if e.broker_message else "")
                for tp, e in sorted(failed.items(), key=lambda item: str(item[0]))))
        names = ",".join(f"{t}-{p}" for t, p in sorted(plan))
        out.write(f"Successfully started partition reassignments for {names}\n"
                  if args.action == "execute" else
                  f"Successfully cancelled partition reassignments for: {names}\n")
    return 0
