"""Replication soak: the fault plan of reliability-anchors.md §6 T1/T2, longer than the
test suite's bounded loops. A real ZooKeeper and three fastlog brokers, a topic of 3
partitions (RF=3, min.insync.replicas=2), an idempotent acks=all producer of unique
increasing values at --rate rec/s; every --interval seconds a seeded nemesis picks a
partition and either SIGKILLs its leader (restarted after the election) or SIGSTOPs it
for longer than its ZooKeeper session (then SIGCONT); then heal, drain, and run the
checker of tests/replication/cluster.py. It lives beside the fault tests whose harness
(Cluster, Load, check) it drives; its figures are written up in perf/README.md.

Prints per run: seed, acked/failed counts, lost / duplicate / out-of-order / inconsistent
/ diverged counts (target 0), and per fault the unavailability of its partition (fault ->
first acknowledgement on that partition afterwards) and the election time (fault -> a new
leader recorded in ZooKeeper). Exit status 1 when the checker finds anything.

Usage: .venv/bin/python tests/replication/soak.py [--rounds 10] [--interval 15]
                                                  [--rate 300] [--seed 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fastlog.testing import ZooKeeperServer, make_chroot, zookeeper_available  # noqa: E402
from tests.replication.cluster import Cluster, Load, check  # noqa: E402

TOPIC = "soak"
PARTITIONS = 3


def _first_ack_after(load: Load, partition: int, since_values: set, timeout: float) -> float:
    """Seconds until a value not in since_values is acknowledged on `partition`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        with load._lock:
            fresh = any(p == partition and v not in since_values
                        for v, (p, _) in load.acked.items())
        if fresh:
            return time.monotonic() - start
        time.sleep(0.05)
    return float("inf")


def run(opts) -> dict:
    rng = random.Random(opts.seed)
    workdir = Path(tempfile.mkdtemp(prefix="fastlog-soak-"))
    zk = ZooKeeperServer(workdir / "zk").start()
    cluster = Cluster(workdir, make_chroot(zk.hosts))
    faults = []
    try:
        cluster.start()
        cluster.create_topic(TOPIC, PARTITIONS)
        load = Load(cluster.bootstrap, TOPIC, PARTITIONS, rate=opts.rate).start()
        load.wait_acked(opts.rate)
        for rnd in range(opts.rounds):
            partition = rng.randrange(PARTITIONS)
            kind = rng.choice(("kill", "pause"))
            victim = cluster.leader_of(TOPIC, partition)
            with load._lock:
                before = set(load.acked)
            t0 = time.monotonic()
            if kind == "kill":
                cluster.kill(victim)
            else:
                cluster.pause(victim)
            cluster.wait(lambda p=partition, v=victim: cluster.states(TOPIC, PARTITIONS)[p]
                         ["leader"] not in (v, -1), 60, "a new leader")
            election = time.monotonic() - t0
            unavailable = election + _first_ack_after(load, partition, before, 60)
            if kind == "kill":
                cluster.restart(victim)
            else:
                cluster.resume(victim)
            cluster.wait_full_isr(TOPIC, PARTITIONS, timeout=90)
            faults.append({"round": rnd, "fault": kind, "partition": partition,
                           "broker": victim, "election_s": round(election, 2),
                           "unavailable_s": round(unavailable, 2)})
            print(json.dumps(faults[-1]) if opts.json else f"  {faults[-1]}", flush=True)
            rest = opts.interval - (time.monotonic() - t0)
            if rest > 0:
                time.sleep(rest)
        load.stop()
        report = check(cluster, TOPIC, PARTITIONS, load)
    finally:
        cluster.close()
        zk.kill()

    def stat(key):
        vals = [f[key] for f in faults]
        return {"p50": round(statistics.median(vals), 2), "max": round(max(vals), 2)} \
            if vals else {}

    return {
        "seed": opts.seed, "rounds": opts.rounds, "rate": opts.rate,
        "acked": report.acked, "failed": len(load.failed), "read": report.read,
        "lost": len(report.lost), "duplicates": len(report.duplicates),
        "out_of_order": len(report.out_of_order), "inconsistent": len(report.inconsistent),
        "diverged": len(report.diverged), "election_s": stat("election_s"),
        "unavailable_s": stat("unavailable_s"), "ok": report.ok,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--interval", type=float, default=15.0, help="seconds between faults")
    ap.add_argument("--rate", type=int, default=300, help="records/s produced")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args(argv)
    if not zookeeper_available():
        print("replication_soak: ZooKeeper is not installed (scripts/install-system-deps.sh)",
              file=sys.stderr)
        return 2
    result = run(opts)
    print(json.dumps(result) if opts.json else
          "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
