"""Micro-benchmark of fastlog.protocol: Metadata v8 and v12 responses with 100 partitions
(encode and decode), Produce v8 and v9 requests with 10 partitions (decode and encode) and
Fetch v11 and v12 responses with 10 partitions whose records are FileRegions (encode,
framed), in µs per message: the last non-flexible versions and the first flexible ones. The anchor, measured in the same run, is kafka-python's generated codec doing the
same work on the same bytes; the ratio column is kafka-python time / fastlog time.

    .venv/bin/python perf/bench_protocol.py [--seconds 0.5]
"""

import argparse
import tempfile
import time

from fastlog._codec import FileRegion, Reader, Writer
from fastlog.protocol import REQUESTS, RESPONSES, ApiKey, encode_response


def metadata_response():
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "cluster_id": "fastlog-cluster",
        "controller_id": 0,
        "topics": [{
            "error_code": 0, "name": f"topic-{t}", "is_internal": False,
            "partitions": [{"error_code": 0, "partition_index": p, "leader_id": 0,
                            "leader_epoch": 0, "replica_nodes": [0], "isr_nodes": [0],
                            "offline_replicas": []} for p in range(10)],
            "topic_authorized_operations": -2**31,
        } for t in range(10)],
        "cluster_authorized_operations": -2**31,
    }


def produce_request():
    batch = bytes(200)
    return {
        "transactional_id": None, "acks": -1, "timeout_ms": 30000,
        "topic_data": [{"name": "bench", "partition_data": [
            {"index": p, "records": batch} for p in range(10)]}],
    }


def fetch_response(records):
    return {"responses": [{"topic": "bench", "partitions": [
        {"partition_index": p, "high_watermark": 1000, "last_stable_offset": 1000,
         "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
         "records": records} for p in range(10)]}]}


def timeit(fn, seconds):
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(50):
            fn()
        n += 50
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / n * 1e6


def encoder(msg, version, value):
    enc = msg.encoder(version)

    def run():
        w = Writer()
        enc(w, value)
        return w.getvalue()
    return run


def decoder(msg, version, data):
    dec = msg.decoder(version)
    return lambda: dec(Reader(data))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=0.5)
    args = ap.parse_args()
    from kafka.protocol.consumer.fetch import FetchResponse
    from kafka.protocol.metadata.metadata import MetadataResponse
    from kafka.protocol.producer.produce import ProduceRequest

    md_msg, pr_msg = RESPONSES[ApiKey.METADATA], REQUESTS[ApiKey.PRODUCE]
    seg = tempfile.TemporaryFile()
    seg.write(bytes(4096))
    region = FileRegion(seg, 0, 4096)
    fetch_regions = fetch_response(region)
    cases = []
    # the last non-flexible versions, then the flexible ones (KIP-482) clients now use
    for md_v, pr_v, fetch_v in ((8, 8, 11), (12, 9, 12)):
        md_obj = md_msg.decoder(md_v)(Reader(encoder(md_msg, md_v, metadata_response())()))
        md_bytes = encoder(md_msg, md_v, md_obj)()
        pr_bytes = encoder(pr_msg, pr_v, produce_request())()
        pr_obj = pr_msg.decoder(pr_v)(Reader(pr_bytes))
        kp_md = MetadataResponse[md_v].decode(md_bytes)
        kp_md._header = None
        kp_pr = ProduceRequest[pr_v].decode(pr_bytes)
        kp_pr._header = None
        kp_fetch = FetchResponse[fetch_v].decode(encoder(RESPONSES[ApiKey.FETCH], fetch_v,
                                                         fetch_response(bytes(4096)))())
        kp_fetch._header = None
        cases += [
            (f"Metadata v{md_v} response, 100 partitions: encode (dict)",
             encoder(md_msg, md_v, metadata_response()),
             lambda kp_md=kp_md, v=md_v: kp_md.encode(version=v)),
            (f"Metadata v{md_v} response, 100 partitions: encode (struct)",
             encoder(md_msg, md_v, md_obj), lambda kp_md=kp_md, v=md_v: kp_md.encode(version=v)),
            (f"Metadata v{md_v} response, 100 partitions: decode",
             decoder(md_msg, md_v, md_bytes),
             lambda b=md_bytes, v=md_v: MetadataResponse[v].decode(b)),
            (f"Produce v{pr_v} request, 10 partitions: decode",
             decoder(pr_msg, pr_v, pr_bytes),
             lambda b=pr_bytes, v=pr_v: ProduceRequest[v].decode(b)),
            (f"Produce v{pr_v} request, 10 partitions: encode",
             encoder(pr_msg, pr_v, pr_obj), lambda kp_pr=kp_pr, v=pr_v: kp_pr.encode(version=v)),
            (f"Fetch v{fetch_v} response, 10 partitions: encode (FileRegions; anchor copies)",
             lambda v=fetch_v: encode_response(ApiKey.FETCH, v, 1, fetch_regions, framed=True),
             lambda kp_fetch=kp_fetch, v=fetch_v: kp_fetch.encode(version=v)),
        ]
    print(f"{'case':72s} {'fastlog µs':>10s} {'kafka-python µs':>16s} {'ratio':>6s}")
    for name, ours, theirs in cases:
        a = timeit(ours, args.seconds)
        b = timeit(theirs, args.seconds)
        print(f"{name:72s} {a:10.1f} {b:16.1f} {b / a:6.2f}")


if __name__ == "__main__":
    main()
