"""Blocking wrappers: SyncAdmin / SyncProducer / SyncConsumer from plain threads."""

import threading

from fastlog.client import SyncAdmin, SyncConsumer, SyncProducer, TopicPartition


def test_sync_round_trip(bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 2, 1)
        assert topic_name in admin.list_topics()
    with SyncProducer(bootstrap, linger_ms=1) as producer:
        futures = [producer.send(topic_name, b"v%d" % i, partition=i % 2) for i in range(20)]
        producer.flush()
        meta = [f.result(10) for f in futures]
        assert sorted(m.offset for m in meta if m.partition == 0) == list(range(10))
        assert producer.send_and_wait(topic_name, b"last", partition=1).offset == 10
        base = producer.send_batch(topic_name, 1, [(5, None, b"bulk", [])] * 3).result(10)
        assert base == 11
    with SyncConsumer(bootstrap) as consumer:
        consumer.assign([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
        consumer.seek_to_beginning()
        got = {}
        for _ in range(50):
            for tp, records in consumer.poll(200).items():
                got.setdefault(tp.partition, []).extend(r.value for r in records)
            if sum(map(len, got.values())) >= 24:
                break
        assert got[0] == [b"v%d" % i for i in range(0, 20, 2)]
        assert got[1] == [b"v%d" % i for i in range(1, 20, 2)] + [b"last"] + [b"bulk"] * 3


def test_sync_producer_usable_from_several_threads(bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    with SyncProducer(bootstrap) as producer:
        futures = []
        lock = threading.Lock()

        def work(n):
            for i in range(50):
                f = producer.send(topic_name, b"%d-%d" % (n, i))
                with lock:
                    futures.append(f)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        producer.flush()
        offsets = sorted(f.result(10).offset for f in futures)
    assert offsets == list(range(200))
