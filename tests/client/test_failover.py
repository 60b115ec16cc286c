"""The client rides over a broker restart: retries, reconnects, no loss, no duplicates."""

import asyncio

from fastlog.client import Admin, Consumer, Producer, TopicPartition
from fastlog.testing import BrokerProcess


def test_produce_and_consume_across_a_broker_restart(tmp_path, arun):
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        topic = "restart-topic"
        tp = TopicPartition(topic, 0)

        async def go():
            async with Admin(broker.bootstrap) as admin:
                await admin.create_topic(topic, 1, 1)
            async with Producer(broker.bootstrap, enable_idempotence=True, acks="all",
                                linger_ms=1, request_timeout_ms=5000,
                                delivery_timeout_ms=60000) as p:
                handles = [await p.send(topic, b"%d" % i) for i in range(300)]
                await p.flush()
                await asyncio.get_running_loop().run_in_executor(None, broker.restart)
                handles += [await p.send(topic, b"%d" % i) for i in range(300, 600)]
                await p.flush()
                offsets = [(await h).offset for h in handles]
            assert offsets == list(range(600))
            async with Consumer(broker.bootstrap) as c:
                c.assign([tp])
                await c.seek_to_beginning()
                values = []
                for _ in range(100):
                    values += [int(r.value) for r in (await c.getmany(200)).get(tp, [])]
                    if len(values) >= 600:
                        break
                # The consumer reconnects too.
                await asyncio.get_running_loop().run_in_executor(None, broker.restart)
                async with Producer(broker.bootstrap) as p:
                    await p.send(topic, b"600")
                for _ in range(100):
                    values += [int(r.value) for r in (await c.getmany(200)).get(tp, [])]
                    if len(values) >= 601:
                        break
            assert values == list(range(601))

        arun(go(), timeout=120)
    finally:
        broker.stop()
