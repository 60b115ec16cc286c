"""Micro-benchmark of fastlog.protocol: Metadata v8 response with 100 partitions (encode
and decode) and Produce v8 request with 10 partitions (decode and encode), in µs per
message. The anchor, measured in the same run, is kafka-python's generated codec doing the
same work on the same bytes; the ratio column is kafka-python time / fastlog time.

    .venv/bin/python perf/bench_protocol.py [--seconds 0.5]
"""

import argparse
import time

from fastlog._codec import Reader, Writer

from fastlog.protocol import REQUESTS, RESPONSES, ApiKey


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
    from kafka.protocol.metadata.metadata import MetadataResponse
    from kafka.protocol.producer.produce import ProduceRequest

    md_msg, pr_msg = RESPONSES[ApiKey.METADATA], REQUESTS[ApiKey.PRODUCE]
    md_obj = md_msg.decoder(8)(Reader(encoder(md_msg, 8, metadata_response())()))
    md_bytes = encoder(md_msg, 8, md_obj)()
    pr_bytes = encoder(pr_msg, 8, produce_request())()
    pr_obj = pr_msg.decoder(8)(Reader(pr_bytes))
    kp_md = MetadataResponse[8].decode(md_bytes)
    kp_md._header = None
    kp_pr = ProduceRequest[8].decode(pr_bytes)
    kp_pr._header = None

    cases = [
        ("Metadata v8 response, 100 partitions: encode (dict)",
         encoder(md_msg, 8, metadata_response()), lambda: kp_md.encode(version=8)),
        ("Metadata v8 response, 100 partitions: encode (struct)",
         encoder(md_msg, 8, md_obj), lambda: kp_md.encode(version=8)),
        ("Metadata v8 response, 100 partitions: decode",
         decoder(md_msg, 8, md_bytes), lambda: MetadataResponse[8].decode(md_bytes)),
        ("Produce v8 request, 10 partitions: decode",
         decoder(pr_msg, 8, pr_bytes), lambda: ProduceRequest[8].decode(pr_bytes)),
        ("Produce v8 request, 10 partitions: encode",
         encoder(pr_msg, 8, pr_obj), lambda: kp_pr.encode(version=8)),
    ]
    print(f"{'case':58s} {'fastlog µs':>10s} {'kafka-python µs':>16s} {'ratio':>6s}")
    for name, ours, theirs in cases:
        a = timeit(ours, args.seconds)
        b = timeit(theirs, args.seconds)
        print(f"{name:58s} {a:10.1f} {b:16.1f} {b / a:6.2f}")


if __name__ == "__main__":
    main()
