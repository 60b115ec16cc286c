"""The web console over plain HTTP against a real broker: what it renders is escaped,
bad input and missing things are one sentence (never a traceback), every mutation needs
the CSRF token, --read-only refuses mutations on the server, and the charts' samples."""

import html
import json
import re
import time

from fastlog.client import SyncAdmin, SyncProducer, TopicPartition

HOSTILE = "<img src=x onerror=alert(1)>"


def _error(body: str) -> str:
    """The one sentence of an error page (unescaped)."""
    found = re.search(r'<p class="error" role="alert">(.*?)</p>', body, re.S)
    assert found, body[:2000]
    text = html.unescape(found.group(1))
    assert "Traceback" not in body and "\n" not in text
    return text


def test_keys_values_headers_and_group_ids_are_escaped(console, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
        with SyncProducer(bootstrap) as producer:
            producer.send(topic_name, HOSTILE.encode(), key=b"<script>k</script>",
                          headers=[("<h>", b"<i>v</i>")]).result(30)
        admin.commit_offsets(f"<b>{topic_name}</b>", {TopicPartition(topic_name, 0): 0})
    status, body, headers = console.get(f"/topics/{topic_name}/messages", partition=0)
    assert status == 200
    assert HOSTILE not in body and "<script>k" not in body and "<i>v</i>" not in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body
    assert "&lt;script&gt;k&lt;/script&gt;" in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    status, body, _ = console.get("/groups")
    assert f"<b>{topic_name}</b>" not in body and f"&lt;b&gt;{topic_name}&lt;/b&gt;" in body
    status, body, _ = console.get("/groups/view", id=f"<b>{topic_name}</b>")
    assert status == 200 and f"<b>{topic_name}" not in body


def test_bad_input_is_one_sentence(console, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    status, body, _ = console.get(f"/topics/{topic_name}/messages", partition=0,
                                  offset=99, **{"from": "offset"})
    assert status == 400
    assert "Offset 99 is beyond the end" in _error(body)
    status, body, _ = console.get(f"/topics/{topic_name}/messages", partition=7)
    assert status == 400 and "has no partition 7" in _error(body)
    status, body, _ = console.get(f"/topics/{topic_name}/messages", partition=0,
                                  timestamp="yesterday", **{"from": "timestamp"})
    assert status == 400 and "is not a time" in _error(body)
    for when, words in (("1969-12-31T23:59:59", "is before 1970"),
                        ("9" * 30, "must be between 0 and")):
        status, body, _ = console.get(f"/topics/{topic_name}/messages", partition=0,
                                      timestamp=when, **{"from": "timestamp"})
        assert status == 400 and words in _error(body)
    status, body, _ = console.get("/topics/no-such-topic-here")
    assert status == 404 and "no-such-topic-here" in _error(body)
    status, body, _ = console.get("/no/such/page")
    assert status == 404 and _error(body) == "There is no such page."
    token = console.csrf()
    status, body, _ = console.post(f"/topics/{topic_name}/produce",
                                   {"csrf": token, "value": "v", "headers": "{not json"})
    assert status == 400 and "headers are not valid JSON" in _error(body)
    status, body, _ = console.post("/topics", {"csrf": token, "name": "bad name!",
                                               "partitions": "1", "replication_factor": "1"})
    assert status == 400 and "is not a legal topic name" in _error(body)
    status, body, _ = console.post("/topics", {"csrf": token, "name": topic_name,
                                               "partitions": "x", "replication_factor": "1"})
    assert status == 400 and "must be a whole number" in _error(body)
    status, body, _ = console.post("/topics", {"csrf": token, "name": topic_name,
                                               "partitions": "1", "replication_factor": "1"})
    assert status == 502 and "already exists" in _error(body)


def test_mutations_need_the_csrf_token(console, bootstrap, topic_name):
    status, body, headers = console.post("/topics", {"name": topic_name, "partitions": "1",
                                                     "replication_factor": "1"})
    assert status == 403 and "security token" in _error(body)
    assert "Content-Security-Policy" in headers
    status, _, _ = console.post("/topics", {"csrf": "forged", "name": topic_name})
    assert status == 403
    with SyncAdmin(bootstrap) as admin:
        assert topic_name not in admin.list_topics()
    status, _, headers = console.post("/topics", {"csrf": console.csrf(), "name": topic_name,
                                                  "partitions": "2",
                                                  "replication_factor": "1"})
    assert status == 303 and headers["Location"].startswith(f"/topics/{topic_name}?")
    with SyncAdmin(bootstrap) as admin:
        (info,) = admin.describe_topics([topic_name])
        assert len(info.partitions) == 2


def test_read_only_refuses_every_mutation(read_only_console, console, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    status, body, _ = read_only_console.get("/topics")
    assert status == 200 and "Create topic" not in body and "name=csrf" not in body
    # Even with the token of a console that allows changes, and for every kind of change.
    token = console.csrf()
    for path, fields in (("/topics", {"name": topic_name + "-x"}),
                         (f"/topics/{topic_name}/delete", {"confirm": topic_name}),
                         (f"/topics/{topic_name}/partitions", {"count": "2"}),
                         (f"/topics/{topic_name}/configs", {"set": "retention.ms=1"}),
                         ("/groups/reset", {"id": "g", "to": "earliest", "action": "apply"}),
                         ("/acls/add", {}),
                         (f"/topics/{topic_name}/produce", {"value": "v"}),
                         ("/groups/delete", {"id": "g"}),
                         ("/users/add", {"user": "u", "mechanism": "SCRAM-SHA-256",
                                         "password": "p"})):
        status, body, _ = read_only_console.post(path, {"csrf": token, **fields})
        assert status == 403 and "read-only" in _error(body), path
    with SyncAdmin(bootstrap) as admin:
        assert topic_name in admin.list_topics()
        assert topic_name + "-x" not in admin.list_topics()
        got = admin.list_offsets({TopicPartition(topic_name, 0): -1})
        assert got[TopicPartition(topic_name, 0)].offset == 0


def _cells(body: str, table_class: str) -> list[list[str]]:
    """The text of each body row's cells in the table of that class (tags stripped)."""
    found = re.search(rf'<table class="{table_class}">.*?<tbody>(.*?)</tbody>', body, re.S)
    assert found, body[:2000]
    return [[html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", found.group(1), re.S)]


def test_topic_sizes_and_log_dirs(console, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 2, 1)
        with SyncProducer(bootstrap) as producer:
            for _ in range(3):
                producer.send(topic_name, b"v" * 1000, partition=1).result(30)
        (dirs,) = admin.describe_log_dirs().values()
    held = sum(d.replicas[TopicPartition(topic_name, 1)].size for d in dirs.values())
    assert held > 3000
    # Topics: the leaders' copies, and every copy (one broker: the same).
    status, body, _ = console.get("/topics", q=topic_name)
    assert status == 200
    ((name, partitions, rf, size, with_replicas, _),) = _cells(body, "topics")
    assert (name, partitions, rf) == (topic_name, "2", "1")
    assert size == with_replicas == f"{held / 1024:,.1f} KiB"
    # The topic: each partition's size, on its leader and per replica.
    status, body, _ = console.get(f"/topics/{topic_name}")
    rows = _cells(body, "partitions")
    assert [r[6:] for r in rows] == [["0 B", "0: 0 B"],
                                     [f"{held / 1024:,.1f} KiB", f"0: {held / 1024:,.1f} KiB"]]
    # Overview: the broker's log dir, online, with its disk's total and usable bytes.
    status, body, _ = console.get("/")
    ((broker, path, state, count, size, total, usable),) = _cells(body, "log-dirs")
    assert (broker, path, state) == ("0", next(iter(dirs)), "online")
    assert int(count) >= 2 and size.endswith("B")
    assert total.endswith("iB") and usable.endswith("iB")


def test_unavailable_features_are_not_errors(console):
    # The test broker has no authorizer: ACLs are a feature it does not offer.
    status, body, _ = console.get("/acls")
    assert status == 200 and "unavailable on this cluster" in body


def test_charts_sample_messages_per_second(console, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    with SyncProducer(bootstrap) as producer:
        deadline = time.monotonic() + 20
        data = {}
        while time.monotonic() < deadline:
            for f in [producer.send(topic_name, b"x") for _ in range(20)]:
                f.result(30)
            data = json.loads(console.get("/charts/data")[1])
            if any(v for v in data["topics"].get(topic_name, []) if v):
                break
            time.sleep(0.5)
    assert any(v for v in data["topics"][topic_name] if v), data
    assert len(data["t"]) == len(data["topics"][topic_name])
    status, body, _ = console.get("/charts")
    assert status == 200 and "uPlot.iife.min.js" in body
    status, js, _ = console.get("/static/vendor/uplot-1.6.32/uPlot.iife.min.js")
    assert status == 200 and "uPlot" in js[:200]


def test_browse_by_timestamp_formats_and_show_all(console, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    base = 1_700_000_000_000
    big = b"0123456789" * 500
    with SyncProducer(bootstrap) as producer:
        for i, value in enumerate((b"first", b"second", big)):
            producer.send(topic_name, value, partition=0, timestamp_ms=base + i * 1000).result(30)
    # From a time (ms, or ISO in UTC): the first message at or after it.
    for when in (str(base + 1000), "2023-11-14T22:13:21"):
        status, body, _ = console.get(f"/topics/{topic_name}/messages", partition=0,
                                      timestamp=when, **{"from": "timestamp"})
        assert status == 200
        offsets = re.findall(r'<tr data-offset="(\d+)">', body)
        assert offsets == ["1", "2"], (when, offsets)
    status, body, _ = console.get(f"/topics/{topic_name}/messages", partition=0,
                                  timestamp=str(base + 60_000), **{"from": "timestamp"})
    assert status == 200 and "No message at or after" in body
    # A chosen format; a long value is cut with a link to all of it.
    status, body, _ = console.get(f"/topics/{topic_name}/messages", partition=0,
                                  format="base64", limit=2)
    assert "Zmlyc3Q=" in body and "c2Vjb25k" in body  # base64 of first, second
    assert "Next page from offset 2" in body
    status, body, _ = console.get(f"/topics/{topic_name}/messages", partition=0, offset=2,
                                  **{"from": "offset"})
    assert f"{len(big) - 1024} more bytes" in body and "show all" in body
    status, body, _ = console.get(f"/topics/{topic_name}/message", partition=0, offset=2)
    assert status == 200 and big.decode() in body
    status, body, _ = console.get(f"/topics/{topic_name}/message", partition=0, offset=3)
    assert status == 400 and "has no message at offset 3" in _error(body)


def test_answers_only_to_loopback_names(console):
    port = console.base.rsplit(":", 1)[1]
    for host, status in ((f"localhost:{port}", 200), (f"127.0.0.1:{port}", 200),
                         (f"rebound.example:{port}", 421), ("rebound.example", 421)):
        got, body, _ = console.get("/topics", headers={"Host": host})
        assert got == status, (host, got)
        if status == 421:
            assert "name=csrf" not in body


def test_change_configs_and_delete_a_topic(console, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    token = console.csrf()
    status, _, _ = console.post(f"/topics/{topic_name}/configs",
                                {"csrf": token, "set": "retention.ms=3600000\nsegment.ms=600000\n"
                                                       "cleanup.policy=compact,delete"})
    assert status == 303
    _, body, _ = console.get(f"/topics/{topic_name}")
    assert "<td>retention.ms</td><td>3600000</td><td>DYNAMIC_TOPIC_CONFIG</td>" in body
    status, _, _ = console.post(f"/topics/{topic_name}/configs",
                                {"csrf": token, "delete": "retention.ms"})
    assert status == 303
    with SyncAdmin(bootstrap) as admin:
        overrides = {c.name: c.value for c in admin.describe_configs(topic_name)
                     if c.source == "DYNAMIC_TOPIC_CONFIG"}
    assert overrides == {"segment.ms": "600000", "cleanup.policy": "compact,delete"}
    status, body, _ = console.post(f"/topics/{topic_name}/configs", {"csrf": token,
                                                                    "set": "no equals sign"})
    assert status == 400 and "expected key=value" in _error(body)
    status, _, _ = console.post(f"/topics/{topic_name}/partitions", {"csrf": token,
                                                                     "count": "3"})
    assert status == 303
    status, body, _ = console.post(f"/topics/{topic_name}/partitions", {"csrf": token,
                                                                       "count": "2"})
    assert status == 400 and "can only be added to" in _error(body)
    with SyncAdmin(bootstrap) as admin:
        (info,) = admin.describe_topics([topic_name])
        assert len(info.partitions) == 3
    # Deleting needs the name typed again.
    status, body, _ = console.post(f"/topics/{topic_name}/delete",
                                   {"csrf": token, "confirm": "something else"})
    assert status == 400 and "type the topic's name" in _error(body)
    status, _, headers = console.post(f"/topics/{topic_name}/delete",
                                      {"csrf": token, "confirm": topic_name})
    assert status == 303 and headers["Location"].startswith("/topics?")
    with SyncAdmin(bootstrap) as admin:
        assert topic_name not in admin.list_topics()


def test_active_group_members_assignments_and_refused_reset(console, bootstrap, topic_name):
    from confluent_kafka import Consumer

    group = f"active-{topic_name}"
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 2, 1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "client.id": "console-test", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment(), "the consumer was never assigned its partitions"
        _, body, _ = console.get("/groups/view", id=group)
        assert '<dd id=state>Stable</dd>' in body
        assert "<td>console-test</td>" in body
        assert f"{topic_name}-0, {topic_name}-1" in body
        status, body, _ = console.post("/groups/reset", {"csrf": console.csrf(), "id": group,
                                                         "topic": topic_name,
                                                         "to": "earliest",
                                                         "action": "apply"})
        assert status == 400 and "is still active (Stable, 1 members)" in _error(body)
        status, body, _ = console.post("/groups/delete", {"csrf": console.csrf(), "id": group})
        assert status == 400 and "still has members" in _error(body)
    finally:
        consumer.close()
    # The charts follow the group's lag once it has committed offsets.
    with SyncAdmin(bootstrap) as admin:
        admin.commit_offsets(group, {TopicPartition(topic_name, 0): 0})
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        data = json.loads(console.get("/charts/data")[1])
        if group in data["groups"]:
            break
        time.sleep(0.5)
    assert data["groups"][group][-1] == 0


def test_only_the_console_puts_a_notice_on_a_page(console):
    status, body, _ = console.get("/topics", notice="Your cluster is lost: call 555-0100")
    assert status == 200 and "555-0100" not in body
    status, body, _ = console.get("/topics", notice="Deleted topic x.", sig="0" * 32)
    assert "Deleted topic x." not in body
