"""perf/bench_authorizer.py runs on a small ACL set and prints its figures (no speed is
asserted: only that the script works and its decisions agree with the scan it compares to)."""

import json
import pathlib
import random
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "perf"))

import bench_authorizer  # noqa: E402

from fastlog.security.acl import ResourceType  # noqa: E402
from fastlog.security.authorizer import AclAuthorizer  # noqa: E402


def test_script_prints_its_figures():
    r = subprocess.run([sys.executable, str(ROOT / "perf" / "bench_authorizer.py"), "--acls", "300",
                        "--seconds", "0.02", "--repeat", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    assert figures["acls"] == 300
    assert all(figures[k] > 0 for k in ("empty_ns", "hit_ns", "miss_ns", "scan_ns"))


def test_the_cached_decisions_agree_with_a_scan_of_every_acl():
    rng = random.Random(7)
    acls = bench_authorizer.make_acls(3_000, 50, rng)
    authorizer = AclAuthorizer()
    authorizer.load(acls)
    bindings = [(p, e) for p, v in acls.items() for e in v.entries]
    qs = bench_authorizer.questions(2_000, 50, rng)
    got = [authorizer.authorize(p, h, o, ResourceType.TOPIC, n) for p, h, o, n in qs]
    assert got == [bench_authorizer.scan_authorize(bindings, p, h, o, n) for p, h, o, n in qs]
    assert any(got) and not all(got)
