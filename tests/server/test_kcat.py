"""kcat (Debian's, librdkafka 2.0.2) against a real fastlog-server: produce with every
codec, consume from the beginning and from an offset, metadata listing."""

import json
import shutil
import subprocess

import pytest

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make system-deps)")


def kcat(broker, *args, input=None, timeout=30):
    r = subprocess.run([KCAT, "-b", broker.bootstrap, *args], input=input,
                       capture_output=True, timeout=timeout)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_every_codec(broker, codec):
    topic = f"kcat-{codec}"
    lines = [f"line-{i}-{'w' * (i % 20)}" for i in range(100)]
    kcat(broker, "-P", "-t", topic, "-p", "0", "-z", codec,
         input=("\n".join(lines) + "\n").encode())
    out = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q")
    assert out.decode().splitlines() == lines


def test_consume_from_offset_with_keys(broker):
    topic = "kcat-offset"
    data = "".join(f"k{i}:v{i}\n" for i in range(20))
    kcat(broker, "-P", "-t", topic, "-p", "0", "-K", ":", input=data.encode())
    out = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", "15", "-e", "-q",
               "-f", "%o %k %s\n")
    assert out.decode().splitlines() == [f"{i} k{i} v{i}" for i in range(15, 20)]


def test_metadata_listing(broker):
    kcat(broker, "-P", "-t", "kcat-meta", "-p", "0", input=b"x\n")
    md = json.loads(kcat(broker, "-L", "-J"))
    assert md["brokers"] == [{"id": 0, "name": broker.bootstrap}]
    topics = {t["topic"]: t for t in md["topics"]}
    assert topics["kcat-meta"]["partitions"][0]["leader"] == 0


def test_offsets_by_timestamp_query_and_consume(broker):
    import time

    topic = "kcat-time"
    kcat(broker, "-P", "-t", topic, "-p", "0", input=b"a\nb\n")
    time.sleep(0.05)
    mid = int(time.time() * 1000)
    time.sleep(0.05)
    kcat(broker, "-P", "-t", topic, "-p", "0", input=b"c\nd\n")
    out = kcat(broker, "-Q", "-t", f"{topic}:0:{mid}").decode()
    assert "offset 2" in out, out
    out = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", f"s@{mid}", "-e", "-q")
    assert out.decode().splitlines() == ["c", "d"]
    out = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", "-1", "-e", "-q")
    assert out.decode().splitlines() == ["d"]
