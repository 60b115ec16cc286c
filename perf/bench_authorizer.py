"""Micro-benchmark of the ACL authorizer (fastlog/security/authorizer.py): the cost of one
authorize() call with 10,000 ACLs loaded (70 % literal, 30 % prefixed, 1,000 principals,
some wildcard-principal and deny entries), in ns per call, against the anchor measured in
the same run: the same calls on an empty authorizer (no ACL: one dict probe and a default).

    .venv/bin/python perf/bench_authorizer.py [--acls 10000] [--seconds 1.0]

Rows: `hit` asks about 2,000 (principal, host, topic, operation) questions again and again
(the decision cache warm: the steady state of a broker); `miss` asks about a topic never
asked about before on every call (the cache entry built: literal, wildcard and prefix
probes); `scan` is what a cache-less authorizer would do, every ACL tested per call (the
cost the cache avoids; fewer calls). The last line is a JSON object with the figures and
the ratios hit/empty and miss/empty.
"""

import argparse
import json
import random
import time

from fastlog.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    VersionedAcls,
)
from fastlog.security.authorizer import AclAuthorizer

TOPIC = ResourceType.TOPIC
OPS = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)
HOSTS = ("10.0.0.1", "10.0.0.2", "*")
# Kafka's implications: the allowed operations that also allow the asked one.
IMPLIED_BY = {
    AclOperation.DESCRIBE: (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                            AclOperation.DELETE, AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
}


def make_acls(count, principals, rng):
    """{pattern: VersionedAcls}: `count` entries over topics team<t>-svc<s> (literal) and
    prefixes team<t>- / team<t>-svc<s%10> (prefixed)."""
    acls = {}
    for i in range(count):
        team = rng.randrange(200)
        if rng.random() < 0.7:
            pattern = ResourcePattern(TOPIC, f"team{team}-svc{rng.randrange(100)}", PatternType.LITERAL)
        elif rng.random() < 0.5:
            pattern = ResourcePattern(TOPIC, f"team{team}-", PatternType.PREFIXED)
        else:
            pattern = ResourcePattern(TOPIC, f"team{team}-svc{rng.randrange(10)}", PatternType.PREFIXED)
        principal = "User:*" if i % 97 == 0 else f"User:u{rng.randrange(principals)}"
        perm = AclPermissionType.DENY if i % 31 == 0 else AclPermissionType.ALLOW
        entry = AccessControlEntry(principal, rng.choice(HOSTS), rng.choice(OPS), perm)
        entries = acls.get(pattern, VersionedAcls(frozenset(), 0)).entries
        acls[pattern] = VersionedAcls(entries | {entry}, 0)
    return acls


def questions(n, principals, rng):
    return [(f"User:u{rng.randrange(principals)}", rng.choice(HOSTS[:2]), rng.choice(OPS),
             f"team{rng.randrange(200)}-svc{rng.randrange(100)}") for _ in range(n)]


def time_hits(authorizer, qs, seconds):
    authorize = authorizer.authorize
    n, start = 0, time.perf_counter()
    while True:
        for principal, host, op, name in qs:
            authorize(principal, host, op, TOPIC, name)
        n += len(qs)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / n * 1e9


def time_misses(authorizer, qs, seconds):
    authorize = authorizer.authorize
    n, start, k = 0, time.perf_counter(), 0
    while True:
        for principal, host, op, name in qs:
            k += 1
            authorize(principal, host, op, TOPIC, f"{name}-{k}")  # a name never asked before
        n += len(qs)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / n * 1e9


def scan_authorize(bindings, principal, host, op, name):
    """A cache-less reading of the same rules: every ACL tested."""
    allowed = denied = False
    for pattern, entry in bindings:
        if pattern.pattern_type == PatternType.LITERAL:
            if pattern.name != name and pattern.name != "*":
                continue
        elif not name.startswith(pattern.name):
            continue
        if entry.principal != principal and entry.principal != "User:*":
            continue
        if entry.host != host and entry.host != "*":
            continue
        if entry.permission_type == AclPermissionType.DENY:
            if entry.operation == op or entry.operation == AclOperation.ALL:
                denied = True
        elif entry.operation in IMPLIED_BY.get(op, (op,)) or entry.operation == AclOperation.ALL:
            allowed = True
    return allowed and not denied


def time_scan(acls, qs, seconds):
    bindings = [(p, e) for p, v in acls.items() for e in v.entries]
    n, start = 0, time.perf_counter()
    while True:
        for principal, host, op, name in qs[:20]:
            scan_authorize(bindings, principal, host, op, name)
        n += 20
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / n * 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--principals", type=int, default=1_000)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if args.acls < 1 or args.principals < 1 or args.seconds <= 0 or args.repeat < 1:
        parser.error("--acls, --principals, --repeat must be positive and --seconds above 0")
    rng = random.Random(42)
    acls = make_acls(args.acls, args.principals, rng)
    qs = questions(2_000, args.principals, rng)
    loaded = AclAuthorizer()
    start = time.perf_counter()
    loaded.load(acls)
    load_ms = (time.perf_counter() - start) * 1e3
    empty = AclAuthorizer()
    best = {"empty": [], "hit": [], "miss": []}
    for _ in range(args.repeat):  # alternate, take each one's median
        best["empty"].append(time_hits(empty, qs, args.seconds))
        best["hit"].append(time_hits(loaded, qs, args.seconds))
        best["miss"].append(time_misses(loaded, qs, args.seconds))
    med = {k: sorted(v)[len(v) // 2] for k, v in best.items()}
    scan = time_scan(acls, qs, args.seconds)
    allowed = sum(loaded.authorize(p, h, o, TOPIC, n) for p, h, o, n in qs)
    print(f"{args.acls} ACLs on {len(acls)} patterns, {args.principals} principals; "
          f"load {load_ms:.1f} ms; {allowed}/{len(qs)} questions allowed")
    print(f"{'case':<8}{'ns/call':>12}{'vs empty':>10}")
    for case in ("empty", "hit", "miss"):
        print(f"{case:<8}{med[case]:>12.0f}{med[case] / med['empty']:>10.2f}")
    print(f"{'scan':<8}{scan:>12.0f}{scan / med['empty']:>10.0f}")
    print(json.dumps({"acls": args.acls, "empty_ns": round(med["empty"]), "hit_ns": round(med["hit"]),
                      "miss_ns": round(med["miss"]), "scan_ns": round(scan),
                      "hit_vs_empty": round(med["hit"] / med["empty"], 2),
                      "miss_vs_empty": round(med["miss"] / med["empty"], 2)}))


if __name__ == "__main__":
    main()
