"""Broker CPU of a fresh partition: creating it, its first write, and a later write.

Starts a fresh broker from each given source tree in turn (alternating per rep), creates
--topics topics (default 1) of --partitions partitions (one CreateTopics each;
`create_s` is the wall time of all), then writes one 100-byte record to each partition
(one acks=1 Produce per partition over one raw connection), then a second record to each.
Broker CPU (utime+stime from /proc) is read around each of the three steps and printed per
partition in ms; `first_extra_ms` is the first write's cost beyond the second's (what a
fresh partition's first write costs on top of an ordinary one). `files_created` and
`files_written` count the directory entries (partition dirs and their files, so inodes)
per partition after each of the first two steps: creating an inode is most of this CPU on
a file system that makes it slow (ext4 without a journal scans for inodes it may reuse,
`recently_deleted`), and the figures in ms move with the file system's state from one
minute to the next. One JSON line per run, then the medians per tree.

Where the inodes land matters most: ext4 without a journal will not reuse an inode freed
in the last few seconds (minutes while its inode table block is unwritten), and scans
past every such inode of the block group for each new one. A /tmp on which other work
deletes files all day costs ~0.3 ms of kernel CPU per new inode; a directory in a quiet
block group ~0.015 ms. `--dir` says where the brokers' data goes (default: the system's
temporary directory); every run's data stays until the end, so one run's deletions do
not tax the next one's creations.

    .venv/bin/python perf/fresh_partitions.py new=. [base=/tmp/base] --reps 3 [--dir D]
        [--partitions 1000 --topics 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402  (perf/compare.py: broker process helpers)

from fastlog import _codec  # noqa: E402
from fastlog.protocol import ApiKey  # noqa: E402
from fastlog.testing import Wire  # noqa: E402


def _produce_each(w: Wire, topic: str, partitions: int) -> None:
    value = b"x" * 100
    for p in range(partitions):
        batch = _codec.build_batch([(int(time.time() * 1000), None, value)])
        r = w.call(ApiKey.PRODUCE, 7, {
            "transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": p, "records": batch}]}]})
        err = r.responses[0].partition_responses[0].error_code
        if err:
            raise RuntimeError(f"produce to partition {p} answered error {err}")


def _entries(data: Path) -> int:
    """Partition dirs of the topic and the files in them."""
    return sum(1 + len(list(p.iterdir())) for p in data.glob("fresh*-*"))


def one_run(tree: Path, name: str, n: int, workdir: Path, topics: int = 1) -> dict:
    d = tempfile.mkdtemp(prefix=f"{name}-", dir=workdir)
    data = Path(d) / f"{name}-data"
    broker = compare.start_fastlog(Path(d), name, tree=tree)
    try:
        w = compare.raw_connection(broker)
        w.sock.settimeout(300)  # thousands of fresh partitions on a busy machine
        try:
            time.sleep(1.0)  # let startup's background work settle
            names = [f"fresh{t}" for t in range(topics)]
            c0, t0 = broker.cpu_seconds(), time.monotonic()
            for t in names:
                compare.create_topic_raw(w, t, n)
            c1, create_s = broker.cpu_seconds(), time.monotonic() - t0
            created = _entries(data)
            for t in names:
                _produce_each(w, t, n)
            c2 = broker.cpu_seconds()
            written = _entries(data)
            for t in names:
                _produce_each(w, t, n)
            c3 = broker.cpu_seconds()
        finally:
            w.close()
    finally:
        broker.stop()
    create, first, second = ((b - a) * 1000 / (n * topics)
                             for a, b in ((c0, c1), (c1, c2), (c2, c3)))
    return {"tree": name, "create_s": round(create_s, 2),
            "create_ms": round(create, 3), "first_write_ms": round(first, 3),
            "second_write_ms": round(second, 3), "first_extra_ms": round(first - second, 3),
            "files_created": created / (n * topics), "files_written": written / (n * topics)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="+", metavar="NAME=PATH")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--topics", type=int, default=1)
    ap.add_argument("--dir", type=Path, default=None,
                    help="where the brokers' data goes (default: the temporary directory)")
    opts = ap.parse_args(argv)
    trees = compare.source_trees(opts.trees)
    if trees is None:
        return 2
    if not 1 <= opts.reps <= 20 or not 1 <= opts.partitions <= 5000 \
            or not 1 <= opts.topics <= 20:
        print("fresh_partitions.py: --reps 1-20, --partitions 1-5,000, --topics 1-20",
              file=sys.stderr)
        return 2
    per: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="fastlog-fresh-", dir=opts.dir) as workdir:
        for rep in range(opts.reps):
            for name, path in trees.items():
                r = one_run(path, name, opts.partitions, Path(workdir), opts.topics)
                per.setdefault(name, []).append(r)
                print(json.dumps({"rep": rep, **r}), flush=True)
    for name, runs in per.items():
        print(json.dumps({"tree": name, **{
            f"median_{k}": round(statistics.median(r[k] for r in runs), 3)
            for k in ("create_s", "create_ms", "first_write_ms", "second_write_ms",
                      "first_extra_ms",
                      "files_created", "files_written")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
