"""DescribeLogDirs (API 35, v1-v4) through kafka-python's admin client and on the wire: a
broker with two log dirs lists both, each with the partitions it holds, their size on
disk, offset lag 0 and is_future_key false, and (v4) the file system's total and usable
bytes; asked for some partitions, only those are listed."""

from __future__ import annotations

import os

from kafka import KafkaAdminClient

from fastlog.protocol import ApiKey, Errors
from tests.server.test_confluent_kafka import create, produce
from tests.server.wire import Wire


def test_describe_log_dirs_lists_each_dir_and_its_partitions(broker_factory, tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    b = broker_factory({"log.dirs": ",".join(dirs)})
    create(b, "ld", partitions=4)
    produce(b, "ld", [b"x" * 100] * 10, partition=1)
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        (answer,) = admin.describe_log_dirs()
    finally:
        admin.close()
    results = {r["log_dir"]: r for r in answer["log_dirs"]}
    assert sorted(results) == sorted(os.path.abspath(d) for d in dirs)
    held = {}
    for d, r in results.items():
        assert r["error_code"] == 0
        assert r["total_bytes"] > 0 and 0 <= r["usable_bytes"] <= r["total_bytes"]
        for t in r["topics"]:
            for p in t["partitions"]:
                assert p["offset_lag"] == 0 and p["is_future_key"] is False
                if t["name"] == "ld":
                    held[p["partition_index"]] = (d, p["partition_size"])
    assert sorted(held) == [0, 1, 2, 3]
    assert {d for d, _ in held.values()} == set(results)  # spread over both dirs
    assert held[1][1] > 1000 and held[0][1] == 0
    assert os.path.isdir(os.path.join(held[1][0], "ld-1"))

    w = Wire(b)
    try:
        r = w.call(ApiKey.DESCRIBE_LOG_DIRS, 1, {"topics": [{"topic": "ld", "partitions": [1]}]})
        listed = [(res.log_dir, t.name, p.partition_index)
                  for res in r.results for t in res.topics for p in t.partitions]
        assert listed == [(held[1][0], "ld", 1)]
        assert {res.error_code for res in r.results} == {Errors.NONE}
    finally:
        w.close()
