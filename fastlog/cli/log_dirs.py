# fastlog/cli/log_dirs.py: `fastlog log-dirs --describe`, Kafka's kafka-log-dirs.sh.
#
# Asks each broker (all registered brokers, or --broker-list) for its log dirs
# (DescribeLogDirs through fastlog.client.Admin) and prints, after Kafka's two progress
# lines, one line of JSON in the layout of Kafka's tool:
#   {"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":"/data","error":null,
#    "partitions":[{"partition":"t-0","size":68,"offsetLag":0,"isFuture":false}]}]}]}
# "error" is the Java exception class Kafka's tool prints (KafkaStorageException for an
# offline dir), or null; --topic-list keeps only those topics' partitions. A broker id
# not in the cluster is one sentence and exit 2 through the dispatcher in
# fastlog/cli/main.py. Runs on the CLI's main thread with its own event loop.

from __future__ import annotations

import json
import sys

from fastlog.cli.main import (
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    client_security,
)
from fastlog.client.sync import run_async

# The Java exception Kafka's tool names for a log dir's error code.
JAVA_ERRORS = {"KAFKA_STORAGE_ERROR": "org.apache.kafka.common.errors.KafkaStorageException"}


def _ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliError(f"--broker-list must be broker ids separated by commas, not "
                       f"{text!r}") from None
    if not ids:
        raise CliError("--broker-list names no broker")
    return ids


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "log-dirs", help="describe the brokers' log dirs",
        description="Describe each broker's log dirs and the partitions in them: size, "
                    "offset lag, future copies (like kafka-log-dirs.sh --describe).")
    add_bootstrap_option(p)
    add_client_config_options(p)
    p.add_argument("--describe", action="store_true", required=True,
                   help="describe the log dirs (the only action)")
    p.add_argument("--broker-list", metavar="IDS",
                   help="comma-separated broker ids to ask (default: every broker)")
    p.add_argument("--topic-list", metavar="TOPICS",
                   help="comma-separated topics whose partitions are listed (default: all)")
    p.set_defaults(run=run)


def run(args) -> int:
    brokers = None if args.broker_list is None else _ids(args.broker_list)
    topics = {t for t in (args.topic_list or "").split(",") if t}
    return run_async(_run(args, brokers, topics))


async def _run(args, brokers, topics) -> int:
    from fastlog.client import Admin

    async with Admin(args.bootstrap_server, client_id="fastlog-log-dirs",
                     security=client_security(args)) as admin:
        known = set(admin.cluster.brokers)
        if brokers is not None and set(brokers) - known:
            missing = ",".join(str(b) for b in brokers if b not in known)
            raise CliError(f"The given brokers do not exist from --broker-list: {missing}. "
                           f"Current existent brokers: {','.join(map(str, sorted(known)))}")
        sys.stdout.write("Querying brokers for log directories information\n")
        found = await admin.describe_log_dirs(brokers)
    sys.stdout.write("Received log directory information from brokers "
                     f"{','.join(map(str, found))}\n")
    doc = {"version": 1, "brokers": [
        {"broker": node, "logDirs": [
            {"logDir": path, "error": JAVA_ERRORS.get(d.error, d.error),
             "partitions": [
                 {"partition": f"{tp.topic}-{tp.partition}", "size": r.size,
                  "offsetLag": r.offset_lag, "isFuture": r.is_future}
                 for tp, r in d.replicas.items() if not topics or tp.topic in topics]}
            for path, d in dirs.items()]}
        for node, dirs in found.items()]}
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0
