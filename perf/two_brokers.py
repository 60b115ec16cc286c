"""Two brokers on one host against one, for a 2-partition workload, in the same run.

One fastlog process runs its request loop on one core (docs/many-cores.md). On a machine
with more cores the way to use them is more brokers: this script measures what a second
broker on the same host gives. It starts one real ZooKeeper (fastlog.testing) and two
clusters in their own chroots: "one" (broker 1 alone) and "two" (brokers 1 and 2, with
one broker.rack for the host, as docs/many-cores.md says), each with a topic of 2 partitions and
replication factor 1 (on "two", one partition led by each broker). Rep by rep, for each
cluster in turn, `fastlog perf produce` (librdkafka, --connections producers, 100-byte
records, --linger-ms, acks=1) writes --records records, then `fastlog perf consume`
(librdkafka) reads them all. Reported per run: records/s, the brokers' CPU per record
(utime+stime of every broker of the cluster, /proc) and the busiest broker's CPU over
the time the client moved records, in cores (an upper bound, as the client's start is
in the CPU and not in the time; near 1.0: that broker's loop was the limit). The last lines are the medians and
the ratios two/one. The client runs on the same machine and takes CPU too: on a 2-core
host, a second broker can only use what the client and the first broker leave.

    .venv/bin/python perf/two_brokers.py --reps 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402  (perf/compare.py: broker process helpers)

TOPIC = "two"


def start_cluster(workdir: Path, zk_hosts: str, name: str, ids) -> list:
    """Brokers `ids` in one ZooKeeper chroot, each on its own free port; returns them once
    every one is registered, with the topic created (partition p led by ids[p % n])."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from fastlog.testing import make_chroot

    hosts = make_chroot(zk_hosts, name)
    brokers = []
    try:
        for i in ids:
            brokers.append(compare.start_fastlog(workdir, f"{name}-{i}", (
                f"broker.id={i}", f"zookeeper.connect={hosts}", "broker.rack=host-1",
                "auto.create.topics.enable=false", "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=2", "group.initial.rebalance.delay.ms=0")))
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=10).brokers) < len(ids):
            if time.monotonic() > deadline:
                raise compare.RunError(f"cluster {name}: brokers did not all register")
            time.sleep(0.2)
        assignment = [[ids[p % len(ids)]] for p in range(2)]
        admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=-1,
                                      replica_assignment=assignment)])[TOPIC].result(30)
        while True:
            md = admin.list_topics(timeout=10).topics.get(TOPIC)
            if md is not None and all(md.partitions.get(p) is not None
                                      and md.partitions[p].leader == assignment[p][0]
                                      for p in range(2)):
                break
            if time.monotonic() > deadline:
                raise compare.RunError(f"cluster {name}: the topic's leaders were not elected")
            time.sleep(0.2)
    except BaseException:
        for b in brokers:
            b.stop()
        raise
    return brokers


def one_run(name: str, brokers: list, opts) -> dict:
    bootstrap = ",".join(b.bootstrap for b in brokers)
    out = {"cluster": name, "brokers": len(brokers)}
    for what, args in (
            ("produce", ["produce", "--topic", TOPIC, "--client", "confluent",
                         "--connections", opts.connections, "--linger-ms", opts.linger_ms,
                         "--record-size", 100, "--acks", "1"]),
            ("consume", ["consume", "--topic", TOPIC, "--client", "confluent"])):
        before = [b.cpu_seconds() for b in brokers]
        s = compare.fastlog_perf([*args[:1], "--bootstrap-server", bootstrap, *args[1:],
                                  "--num-records", opts.records], opts.timeout)
        spent = [b.cpu_seconds() - c for b, c in zip(brokers, before, strict=True)]
        records = s["records"] or 1
        out[f"{what}_records_per_s"] = s["records_per_s"]
        out[f"{what}_broker_cpu_us_per_record"] = round(sum(spent) / records * 1e6, 3)
        # how busy the busiest broker was (1.0: one core's worth) while the client moved
        # records (its CPU over the client process's life, over the client's own time)
        seconds = records / s["records_per_s"] if s["records_per_s"] else 0
        out[f"{what}_busiest_broker_cores"] = round(max(spent) / seconds, 3) if seconds else None
        out[f"{what}_records"] = s["records"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--records", type=int, default=1_000_000, help="records per run")
    ap.add_argument("--connections", type=int, default=2, help="producer instances")
    ap.add_argument("--linger-ms", type=int, default=5, help="producers' linger.ms")
    ap.add_argument("--timeout", type=float, default=600.0, help="per client run, seconds")
    opts = ap.parse_args(argv)
    if (not 1 <= opts.reps <= 20 or not 1000 <= opts.records <= 100_000_000
            or not 1 <= opts.connections <= 16 or not 10 <= opts.timeout <= 3600
            or not 0 <= opts.linger_ms <= 1000):
        print("two_brokers.py: --reps 1-20, --records 1,000-100,000,000, --connections 1-16, "
              "--timeout 10-3,600, --linger-ms 0-1,000", file=sys.stderr)
        return 2
    from fastlog.testing import ZooKeeperServer, zookeeper_available

    if not zookeeper_available():
        print("two_brokers.py: ZooKeeper is not installed (scripts/install-system-deps.sh)",
              file=sys.stderr)
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="fastlog-two-brokers-"))
    zk = ZooKeeperServer(workdir / "zk").start()
    clusters: dict[str, list] = {}
    runs: dict[str, list[dict]] = {}
    try:
        clusters["one"] = start_cluster(workdir, zk.hosts, "one", (1,))
        clusters["two"] = start_cluster(workdir, zk.hosts, "two", (1, 2))
        for rep in range(opts.reps):
            for name, brokers in clusters.items():
                r = one_run(name, brokers, opts)
                runs.setdefault(name, []).append(r)
                print(json.dumps({"rep": rep, **r}), flush=True)
    except compare.RunError as e:
        print(f"two_brokers.py: {e}", file=sys.stderr)
        return 1
    finally:
        for brokers in clusters.values():
            for b in brokers:
                b.stop()
        zk.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    keys = ("produce_records_per_s", "produce_broker_cpu_us_per_record",
            "produce_busiest_broker_cores", "consume_records_per_s",
            "consume_broker_cpu_us_per_record", "consume_busiest_broker_cores")
    med = {name: {k: statistics.median(r[k] for r in rs) for k in keys}
           for name, rs in runs.items()}
    for name in med:
        print(json.dumps({"cluster": name, **med[name]}))
    print(json.dumps({f"two_vs_one_{k}": round(med["two"][k] / med["one"][k], 3)
                      if med["one"][k] else None for k in keys}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
