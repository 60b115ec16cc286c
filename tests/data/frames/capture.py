"""Development-time capture of real client request frames (golden frames).

Runs a tiny fake broker on 127.0.0.1 (free port) that answers just enough of the protocol,
with fastlog.protocol's own encoders, for kafka-python, aiokafka and confluent-kafka to
connect, produce (idempotent) and fetch from one topic. The first request frame of each
(api, version) a client sends is written, without its 4-byte size prefix, to
tests/data/frames/<client>/<api>_v<version>.bin. The committed .bin files are what the
tests read; re-run this only to refresh them:

    .venv/bin/python tests/data/frames/capture.py [kafka-python|aiokafka|confluent ...]
"""

import asyncio
import pathlib
import socket
import struct
import sys
import threading
import time

from fastlog import protocol
from fastlog.protocol import ApiKey

HERE = pathlib.Path(__file__).resolve().parent
TOPIC = "golden"
KEEP = {ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH,
        ApiKey.LIST_OFFSETS, ApiKey.INIT_PRODUCER_ID, ApiKey.FIND_COORDINATOR,
        ApiKey.OFFSET_FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FOR_LEADER_EPOCH}


class CaptureBroker:
    def __init__(self, client_name):
        self.dir = HERE / client_name
        self.dir.mkdir(exist_ok=True)
        self.seen = set()
        self.batches = []
        self.port = None
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.ready = threading.Event()

    def start(self):
        self.thread.start()
        self.ready.wait(5)
        return self

    def stop(self):
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    async def _shutdown(self):
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, sock=sock))
        self.ready.set()
        self.loop.run_forever()
        server.close()

    async def _serve(self, reader, writer):
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                parts = self._answer(frame)
                if parts is not None:
                    writer.write(b"".join(bytes(p) for p in parts))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _record(self, header, frame):
        key = (header.api_key, header.api_version)
        if key in self.seen or header.api_key not in KEEP:
            return
        self.seen.add(key)
        name = ApiKey(header.api_key).name.lower()
        (self.dir / f"{name}_v{header.api_version}.bin").write_bytes(frame)

    def _answer(self, frame):
        try:
            header, off = protocol.decode_request_header(frame)
        except protocol.UnsupportedVersionError as e:
            return protocol.unsupported_version_response(e.header, framed=True)
        self._record(header, frame)
        req = protocol.decode_request(header.api_key, header.api_version, frame, off)
        body = self._body(header, req)
        if body is None:
            return None
        return protocol.encode_response(header.api_key, header.api_version,
                                        header.correlation_id, body, framed=True)

    def _body(self, header, req):
        k = header.api_key
        if k == ApiKey.API_VERSIONS:
            return protocol.api_versions_response()
        if k == ApiKey.METADATA:
            return {"brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port}],
                    "cluster_id": "capture", "controller_id": 0,
                    "topics": [{"name": TOPIC, "partitions": [
                        {"partition_index": 0, "leader_id": 0, "replica_nodes": [0],
                         "isr_nodes": [0]}]}]}
        if k == ApiKey.INIT_PRODUCER_ID:
            return {"producer_id": 4242, "producer_epoch": 0}
        if k == ApiKey.PRODUCE:
            if req.acks == 0:
                return None
            out = []
            for t in req.topic_data:
                parts = []
                for p in t.partition_data:
                    parts.append({"index": p.index, "base_offset": len(self.batches)})
                    if p.records is not None:
                        self.batches.append(bytes(p.records))
                out.append({"name": t.name, "partition_responses": parts})
            return {"responses": out}
        if k == ApiKey.LIST_OFFSETS:
            return {"topics": [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "offset": 0, "timestamp": -1,
                 "old_style_offsets": [0]} for p in t.partitions]} for t in req.topics]}
        if k == ApiKey.FETCH:
            time.sleep(0.05)
            return {"responses": [{"topic": t.topic, "partitions": [
                {"partition_index": p.partition, "high_watermark": 0,
                 "last_stable_offset": 0, "log_start_offset": 0, "aborted_transactions": None,
                 "records": b""} for p in t.partitions]} for t in req.topics]}
        if k == ApiKey.FIND_COORDINATOR:
            return {"node_id": 0, "host": "127.0.0.1", "port": self.port}
        if k == ApiKey.OFFSET_FETCH:
            return {"topics": [{"name": t.name, "partitions": [
                {"partition_index": i, "committed_offset": -1, "metadata": ""}
                for i in t.partition_indexes]} for t in (req.topics or [])]}
        if k == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            return {"topics": []}
        if k == ApiKey.JOIN_GROUP:
            # A one-member group: the joiner leads and computes the assignment itself.
            proto = req.protocols[0]
            return {"generation_id": 1, "protocol_type": req.protocol_type,
                    "protocol_name": proto.name, "leader": "member-1", "member_id": "member-1",
                    "members": [{"member_id": "member-1", "group_instance_id": None,
                                 "metadata": proto.metadata}]}
        if k == ApiKey.SYNC_GROUP:
            mine = [a.assignment for a in req.assignments if a.member_id == req.member_id]
            return {"assignment": mine[0] if mine else b""}
        if k == ApiKey.OFFSET_COMMIT:
            return {"topics": [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index} for p in t.partitions]}
                for t in req.topics]}
        return {}


def run_kafka_python(port):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    p = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", enable_idempotence=True,
                      acks="all", linger_ms=5)
    for i in range(3):
        p.send(TOPIC, key=b"k%d" % i, value=b"value-%d" % i)
    p.flush(10)
    p.close(5)
    c = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", enable_auto_commit=False,
                      group_id=None, fetch_max_wait_ms=50)
    tp = TopicPartition(TOPIC, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    c.poll(timeout_ms=1500)
    c.close()
    g = KafkaConsumer(TOPIC, bootstrap_servers=f"127.0.0.1:{port}", group_id="capture",
                      auto_offset_reset="earliest", fetch_max_wait_ms=50)
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        g.poll(timeout_ms=200)
    g.commit()
    g.close()


def run_aiokafka(port):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", enable_idempotence=True)
        await p.start()
        try:
            for i in range(3):
                await p.send_and_wait(TOPIC, key=b"k%d" % i, value=b"value-%d" % i)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", enable_auto_commit=False,
                             fetch_max_wait_ms=50)
        await c.start()
        try:
            tp = TopicPartition(TOPIC, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            await c.getmany(timeout_ms=1500)
        finally:
            await c.stop()
        g = AIOKafkaConsumer(TOPIC, bootstrap_servers=f"127.0.0.1:{port}", group_id="capture",
                             auto_offset_reset="earliest", fetch_max_wait_ms=50)
        await g.start()
        try:
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                await g.getmany(timeout_ms=200)
            await g.commit()
        finally:
            await g.stop()

    asyncio.run(main())


def run_confluent(port):
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True,
                  "linger.ms": 5})
    for i in range(3):
        p.produce(TOPIC, key=b"k%d" % i, value=b"value-%d" % i)
    p.flush(10)
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "capture",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        c.poll(0.2)
    c.close()
    g = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "capture-g",
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
    g.subscribe([TOPIC])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        g.poll(0.2)
    try:
        g.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
    except Exception as e:  # noqa: BLE001 - capture only; report and go on
        print("confluent commit:", e)
    g.close()


CLIENTS = {"kafka-python": run_kafka_python, "aiokafka": run_aiokafka,
           "confluent": run_confluent}


def main(names):
    for name in names or CLIENTS:
        broker = CaptureBroker(name).start()
        try:
            CLIENTS[name](broker.port)
        finally:
            broker.stop()
        print(name, sorted(f"{ApiKey(k).name}v{v}" for k, v in broker.seen))


if __name__ == "__main__":
    main(sys.argv[1:])
