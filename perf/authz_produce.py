"""Broker CPU per produced record with the ACL authorizer on (10,000 ACLs) against a broker
without an authorizer, in the same run on the same machine.

Two fastlog-server processes (perf/compare.py's start_fastlog): `plain` (no
authorizer.class.name) and `acl` (Kafka's AclAuthorizer, its first log dir holding
10,000 ACLs made by perf/bench_authorizer.py's make_acls, plus what the producer needs:
All on its topic and Create on the cluster for User:ANONYMOUS, the PLAINTEXT listener's
principal). The producer topic is named like the generated ones (team<t>-svc<s>), so the
literal, wildcard and prefixed ACLs of its team apply to it. Each rep runs the same
`fastlog perf produce` (librdkafka, 100 B records, linger.ms=5, acks=1) against both,
interleaved, and reads the broker's utime+stime from /proc/PID/stat around it. Prints one
row per broker and rep, then a JSON line with the median CPU us/record of each and
`acl_vs_plain_throughput_per_cpu` = plain CPU per record / acl CPU per record (goal >= 0.9).

    .venv/bin/python perf/authz_produce.py [--records 300000] [--reps 3] [--acls 10000]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_authorizer  # noqa: E402
from compare import fastlog_perf, measure, start_fastlog  # noqa: E402

from fastlog.metadata.acl_store import ACL_FILE, FORMAT_VERSION  # noqa: E402
from fastlog.security.acl import (  # noqa: E402
    CLUSTER_NAME,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    VersionedAcls,
    entries_to_json,
)

ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


def write_acl_file(data_dir: Path, acls: dict) -> None:
    """The single-node store's file (fastlog/metadata/acl_store.py's format), written
    before the broker starts (one write instead of 10,000 CreateAcls updates)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    doc = {"version": FORMAT_VERSION, "resources": [
        {"resourceType": p.resource_type.kafka_name, "patternType": p.pattern_type.name,
         "name": p.name, "version": v.version, "acls": entries_to_json(v.entries)}
        for p, v in sorted(acls.items())]}
    (data_dir / ACL_FILE).write_text(json.dumps(doc))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--acls", type=int, default=10_000)
    opts = ap.parse_args(argv)
    rng = random.Random(1)
    acls = bench_authorizer.make_acls(opts.acls, 1_000, rng)
    anyone = "User:ANONYMOUS"
    topic_base = "team7-svc3"
    allow = AclPermissionType.ALLOW
    for pattern, op in ((ResourcePattern(ResourceType.TOPIC, topic_base, PatternType.PREFIXED),
                         AclOperation.ALL),
                        (ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME), AclOperation.CREATE)):
        entries = acls.get(pattern, VersionedAcls(frozenset(), 0)).entries
        acls[pattern] = VersionedAcls(entries | {AccessControlEntry(anyone, "*", op, allow)}, 0)
    rows = {"plain": [], "acl": []}
    with tempfile.TemporaryDirectory(prefix="fastlog-authz-perf-") as tmp:
        work = Path(tmp)
        write_acl_file(work / "acl-data", acls)
        brokers = [start_fastlog(work, "plain"),
                   start_fastlog(work, "acl", extra=(f"authorizer.class.name={ACL_AUTHORIZER}",))]
        try:
            for rep in range(opts.reps):
                for b in brokers:
                    topic = f"{topic_base}-{int(time.time())}-{rep}"
                    s, cpu, _ = measure(b, lambda b=b, topic=topic: fastlog_perf(
                        ["produce", "--bootstrap-server", b.bootstrap, "--topic", topic,
                         "--num-records", opts.records, "--record-size", 100,
                         "--linger-ms", 5, "--acks", "1", "--client", "confluent"], 600))
                    us = cpu / opts.records * 1e6
                    rows[b.name].append(us)
                    print(f"{b.name:6} rep {rep}: {s['records_per_s']:>10,.0f} rec/s  "
                          f"broker CPU {cpu:6.2f} s  {us:.3f} us/record  errors {s['errors']}", flush=True)
        finally:
            for b in brokers:
                b.stop()
    plain, acl = statistics.median(rows["plain"]), statistics.median(rows["acl"])
    print(json.dumps({"acls": len([e for v in acls.values() for e in v.entries]),
                      "records": opts.records, "reps": opts.reps,
                      "plain_cpu_us_per_record": round(plain, 4),
                      "acl_cpu_us_per_record": round(acl, 4),
                      "acl_vs_plain_throughput_per_cpu": round(plain / acl, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
