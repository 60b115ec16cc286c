"""`fastlog reassign-partitions` with a bad --zookeeper, a plan file that is too large or
not JSON, an unreachable ZooKeeper, or --cancel without the brokers: one short sentence on
stderr, never a traceback."""

import json
import os

import pytest

PLAN = {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}


def _one_sentence(r, status=2):
    assert r.returncode == status, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("fastlog reassign-partitions: ")
    return lines[0]


@pytest.fixture
def plan_file(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(PLAN))
    return path


@pytest.mark.parametrize("connect, needle", [
    ("", "must name at least one host:port"),
    ("127.0.0.1:abc", "must give ports between 1 and 65535"),
    ("127.0.0.1:99999", "must give ports between 1 and 65535"),
    (":99999", "must give a host in each host:port entry"),
    ("127.0.0.1:2181/a//b", "must have a chroot like /kafka"),
])
def test_malformed_zookeeper_connect_is_refused(fastlog, plan_file, connect, needle):
    line = _one_sentence(fastlog("reassign-partitions", "--zookeeper", connect,
                                 "--reassignment-json-file", plan_file, "--verify"))
    assert f"--zookeeper {needle}" in line


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_endless_plan_file_is_refused_at_the_size_cap(fastlog, closed_port):
    line = _one_sentence(fastlog("reassign-partitions", "--zookeeper", f"127.0.0.1:{closed_port}",
                                 "--reassignment-json-file", "/dev/zero", "--verify"))
    assert "larger than 16 MiB" in line


@pytest.mark.parametrize("content", [
    b"this is not json " * 200,
    bytes(range(256)) * 12,
    b"[" * 100_000,
])
def test_non_json_plan_gives_a_short_sentence_without_its_bytes(fastlog, tmp_path,
                                                                closed_port, content):
    path = tmp_path / "plan.json"
    path.write_bytes(content)
    line = _one_sentence(fastlog("reassign-partitions", "--zookeeper", f"127.0.0.1:{closed_port}",
                                 "--reassignment-json-file", path, "--verify"))
    assert "is not a reassignment plan" in line
    assert "not json" not in line and "\\x" not in line
    assert len(line) < 250 + len(str(path))


def test_plan_with_long_bad_value_is_told_briefly(fastlog, tmp_path, closed_port):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": ["x" * 5000]}]}))
    line = _one_sentence(fastlog("reassign-partitions", "--zookeeper", f"127.0.0.1:{closed_port}",
                                 "--reassignment-json-file", path, "--verify"))
    assert "'replicas' must be a list of integers" in line
    assert len(line) < 250 + len(str(path))


def test_unreachable_zookeeper_is_one_sentence_without_kazoo_noise(fastlog, plan_file,
                                                                   closed_port):
    line = _one_sentence(fastlog("reassign-partitions", "--zookeeper", f"127.0.0.1:{closed_port}",
                                 "--reassignment-json-file", plan_file, "--verify"))
    assert f"cannot connect to ZooKeeper at 127.0.0.1:{closed_port}" in line


def test_cancel_needs_the_brokers_and_one_place_is_named(fastlog, plan_file, closed_port):
    line = _one_sentence(fastlog("reassign-partitions", "--zookeeper", f"127.0.0.1:{closed_port}",
                                 "--reassignment-json-file", plan_file, "--cancel"))
    assert "--cancel needs --bootstrap-server" in line
    line = _one_sentence(fastlog("reassign-partitions", "--zookeeper", f"127.0.0.1:{closed_port}",
                                 "--bootstrap-server", f"127.0.0.1:{closed_port}",
                                 "--reassignment-json-file", plan_file, "--verify"))
    assert "not allowed with argument" in line
