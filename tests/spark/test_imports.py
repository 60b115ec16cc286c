"""What a Spark Python worker loads to run the fastlog source's read() and the sink's write().

Every Python worker Spark starts (executor tasks, the driver's streaming source runner)
unpickles the reader or writer and so imports fastlog.spark.source; the first micro-batch
waits for those imports. The executor side needs the cluster and connection of
fastlog.client, not its admin, producer, consumer or sync wrappers (the sink's writer
imports the producer when it writes, the reader the admin only after OFFSET_OUT_OF_RANGE).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Loaded by fastlog.client's package, as it was before its names were imported on use.
NOT_NEEDED = ["fastlog.client.admin", "fastlog.client.producer", "fastlog.client.consumer",
              "fastlog.client.sync", "fastlog.client.group", "fastlog.client.group_offsets",
              "fastlog.security.acl", "fastlog.security.quota"]


def _loaded_after(code: str) -> set[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        env=env, capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_unpickling_a_reader_loads_only_the_read_path():
    loaded = _loaded_after("import fastlog.spark.source, fastlog.spark.fetch, "
                           "fastlog.spark._arrow")
    assert "fastlog.client.cluster" in loaded and "fastlog.client.connection" in loaded
    assert sorted(m for m in NOT_NEEDED if m in loaded) == []


def test_client_names_still_resolve_on_use():
    loaded = _loaded_after("from fastlog.client import SyncAdmin, Producer, TopicPartition\n"
                           "import fastlog.client as c\n"
                           "assert c.Admin.__module__ == 'fastlog.client.admin'\n"
                           "assert sorted(c.__all__) == c.__all__ and 'Consumer' in dir(c)")
    assert {"fastlog.client.sync", "fastlog.client.producer", "fastlog.client.admin"} <= loaded
