"""fastlog/server/group/_offset_figures.pyx (OffsetFigures, a group's committed offsets in
C memory for the metrics scrape): its entries follow every change of the group's dict
through GroupMetadata's offset methods, on every coordinator path that changes committed
offsets (commit, a transaction's commit and abort, OffsetDelete, expiry, the group's
deletion, the load from __consumer_offsets at a restart); the scrape's periodic check
(BrokerCollector._check_offset_figures) finds a change written to the dict alone and has
the loop write the figures anew; a scrape copying the entries without the interpreter lock
while the loop changes them sees each entry whole; and a real broker's group rows (read
from the figures) are its committed offsets through every path, a restart included."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from fastlog.server._exposition import GaugeRows, HostedWatermarks, add_offset_figure_rows
from fastlog.server.group._offset_figures import OffsetFigures

from fastlog.protocol import ApiKey
from fastlog.protocol.errors import Errors
from fastlog.server.group.group import GroupMetadata
from fastlog.server.group.offsets import MemoryGroupStore, TxnControl
from fastlog.server.group.schemas import OffsetAndMetadata
from fastlog.server.metrics import CHECK_COUNTS_EVERY, BrokerCollector, LabelHeads
from fastlog.testing import BrokerProcess, Wire, wait_until
from tests.server.group.test_coordinator import join, run, started
from tests.server.scrape import http_overrides, scrape
from tests.server.wire import create_topic


def kept(group) -> dict:
    """The group's OffsetFigures as {(topic, partition): offset}, checked to hold each
    key once."""
    entries = group.offset_figures.entries()
    out = {(t, p): o for t, p, o in entries}
    assert len(out) == len(entries)
    return out


def in_dict(group) -> dict:
    return {tp: om.offset for tp, om in group.offsets.items()}


def assert_in_step(c):
    for g in c.groups.values():
        assert kept(g) == in_dict(g), g.group_id
        assert g.offset_figures.mismatches(g.offsets, lambda: None, 4) == 0


def test_entries_follow_puts_removes_and_clears_and_topic_ids_stay():
    f = OffsetFigures()
    for i in range(40):  # (past the first array: grown twice)
        f.put(("a" if i % 3 else "b", i), i * 10)
    assert len(f) == 40 and f.topics == ["b", "a"]
    f.put(("a", 1), 7)  # a new offset of a committed partition
    f.remove(("b", 0))  # the first entry: the last takes its place
    f.remove(("b", 39))  # the last entry
    f.remove(("a", 1000))  # none: nothing
    expected = {("a" if i % 3 else "b", i): i * 10 for i in range(1, 39)}
    expected[("a", 1)] = 7
    assert {(t, p): o for t, p, o in f.entries()} == expected and len(f) == 38
    assert f.get(("a", 1)) == 7 and f.get(("b", 0)) is None
    assert f.topic_counts == [12, 26]
    f.clear()
    assert len(f) == 0 and f.entries() == [] and f.topic_counts == [0, 0]
    f.put(("c", 0), 1)
    f.put(("a", 0), 2)
    assert f.topics == ["b", "a", "c"]  # (ids are never reused)
    f.rebuild({("b", 5): OffsetAndMetadata(9)})
    assert f.entries() == [("b", 5, 9)] and f.topic_counts == [1, 0, 0]
    version = f.version
    for bad in (("d", "x"), ("d",), ("d", 1, 2)):  # refused before any change
        with pytest.raises((TypeError, ValueError)):
            f.put(bad, 1)
    assert f.entries() == [("b", 5, 9)] and f.version == version and f.topics == ["b", "a", "c"]


def test_mismatches_counts_what_the_dict_and_the_entries_disagree_on():
    f = OffsetFigures()
    offsets = {("t", i): OffsetAndMetadata(i) for i in range(10)}
    f.rebuild(offsets)
    pauses = []
    assert f.mismatches(offsets, lambda: pauses.append(1), 4) == 0
    assert len(pauses) == 3
    offsets[("t", 3)] = OffsetAndMetadata(99)  # another offset
    offsets[("u", 0)] = OffsetAndMetadata(1)  # a key without an entry
    del offsets[("t", 4)]  # an entry without its key
    assert f.mismatches(offsets, lambda: None, 4) == 3
    # an entry added meanwhile (between two pauses): nothing can be said
    assert f.mismatches(offsets, lambda: f.put(("v", len(f)), 0), 4) == -1
    with pytest.raises(ValueError):
        f.mismatches(offsets, lambda: None, 0)


def offsets(**tps):
    return {(t, int(p)): OffsetAndMetadata(o) for (t, p), o in
            ((k.rsplit("_", 1), v) for k, v in tps.items())}


def test_every_path_that_changes_committed_offsets_keeps_the_figures_in_step():
    async def main():
        store = MemoryGroupStore()
        c = await started(store, **{"offsets.retention.minutes": 1})
        p = c.partition_for("g")
        # commits: new partitions, then new offsets of committed ones
        await c.commit_offsets("g", "", None, -1, offsets(t_0=1, t_1=2, u_0=3))
        await c.commit_offsets("g", "", None, -1, offsets(t_1=5, t_2=6))
        assert kept(c.groups["g"]) == {("t", 0): 1, ("t", 1): 5, ("t", 2): 6, ("u", 0): 3}
        assert_in_step(c)
        # transactional commits: pending until the marker (not in the figures), then
        # visible on commit, dropped on abort
        await c.commit_txn_offsets("g", 11, 0, "", None, -1, offsets(t_0=10, v_0=4))
        await c.commit_txn_offsets("g", 12, 0, "", None, -1, offsets(t_1=20))
        await c.commit_txn_offsets("h", 12, 0, "", None, -1, offsets(t_0=30))
        assert kept(c.groups["g"]) == in_dict(c.groups["g"]) and ("v", 0) not in kept(
            c.groups["g"])
        c.complete_txn_offsets(11, [p], True)
        c.complete_txn_offsets(12, [p, c.partition_for("h")], False)
        # (the markers, as the log holds them after the data, for the restart below)
        store.partitions[p] += [TxnControl(11, True), TxnControl(12, False)]
        store.partitions[c.partition_for("h")].append(TxnControl(12, False))
        assert kept(c.groups["g"])[("t", 0)] == 10 and kept(c.groups["g"])[("v", 0)] == 4
        assert kept(c.groups["g"])[("t", 1)] == 5
        assert_in_step(c)
        # OffsetDelete (an Empty group: any topic)
        err, per = await c.delete_offsets("g", [("u", 0), ("t", 2), ("w", 0)])
        assert err == Errors.NONE and set(per.values()) == {Errors.NONE}
        assert set(kept(c.groups["g"])) == {("t", 0), ("t", 1), ("v", 0)}
        assert_in_step(c)
        # an open transaction's offsets, then a restart: the load rebuilds the committed
        # offsets (a committed marker in the log makes the pending ones committed)
        await c.commit_txn_offsets("g", 13, 0, "", None, -1, offsets(t_1=40))
        await c.commit_offsets("k", "", None, -1, offsets(t_0=7))
        store.partitions[p].append(TxnControl(13, True))
        await c.shutdown()
        c = await started(store, **{"offsets.retention.minutes": 1})
        assert kept(c.groups["g"]) == {("t", 0): 10, ("t", 1): 40, ("v", 0): 4}
        assert kept(c.groups["k"]) == {("t", 0): 7}
        assert_in_step(c)
        # expiry of some offsets (those committed long ago) keeps the group
        g = c.groups["g"]
        g.offsets[("t", 0)].commit_timestamp = 0
        g.offsets[("v", 0)].commit_timestamp = 0
        g.current_state_timestamp = 0
        now = 10 * 60_000
        for om in (g.offsets[("t", 1)], c.groups["k"].offsets[("t", 0)]):
            om.commit_timestamp = now
        assert await c.expire_offsets(now=now) == 2
        assert kept(c.groups["g"]) == {("t", 1): 40}
        assert_in_step(c)
        # the group's deletion: its figures are emptied with its dict
        g = c.groups["k"]
        assert (await c.delete_groups(["k"]))["k"] == Errors.NONE
        assert "k" not in c.groups and kept(g) == {} == in_dict(g)
        # a group whose members commit: the generation's commits go the same way
        r = await join(c, "m")
        await c.sync_group("m", r.generation_id, r.member_id, None, None, None, {})
        await c.commit_offsets("m", r.member_id, None, r.generation_id, offsets(t_5=5))
        assert kept(c.groups["m"]) == {("t", 5): 5}
        assert_in_step(c)
        await c.shutdown()
    run(main())


def test_the_scrape_check_finds_a_change_the_figures_missed_and_the_loop_mends_it(caplog):
    loop = asyncio.new_event_loop()
    try:
        collector = BrokerCollector(SimpleNamespace(), 0)
        collector.loop = loop
        good, bad = GroupMetadata("good"), GroupMetadata("bad")
        for g in (good, bad):
            for i in range(20):
                g.commit_offset("t", i, OffsetAndMetadata(i))
        assert collector._check_offset_figures([good, bad]) == 0
        bad.offsets[("t", 3)] = OffsetAndMetadata(300)  # written to the dict alone
        bad.offsets[("u", 0)] = OffsetAndMetadata(1)
        with caplog.at_level(logging.WARNING, logger="fastlog.server.metrics"):
            assert collector._check_offset_figures([good, bad]) == 1
        assert "differ from their offsets (bad: 2)" in caplog.text
        assert kept(bad) != in_dict(bad)
        loop.run_until_complete(asyncio.sleep(0))  # the loop's rebuild
        assert kept(bad) == in_dict(bad)
        assert collector._check_offset_figures([good, bad]) == 0
    finally:
        loop.close()


def test_a_scrape_copying_without_the_lock_sees_each_entry_whole_while_the_loop_changes():
    """The loop thread adds, moves (a removal puts the last entry in the removed one's
    place), drops and grows the entries while another thread copies them with the lock
    released: every row it writes is a real entry (offset = partition * 7 + topic's
    number) and each key once; a copy refused under changes retries or reports -1."""
    f = OffsetFigures()
    topics = ["a", "b", "c"]
    marks = HostedWatermarks()
    stop, problems, scrapes = threading.Event(), [], [0, 0]

    def scrape():
        deadline = time.monotonic() + 20
        while not stop.is_set() and time.monotonic() < deadline:
            current, lag, heads, sums = GaugeRows(1), GaugeRows(1), LabelHeads(), {}
            n = add_offset_figure_rows(current, lag, heads.index, heads.maker(
                lambda t: f'topic="{t}",'), f, marks, None, sums, lambda: None, 16)
            scrapes[0 if n >= 0 else 1] += 1
            if n < 0:
                continue
            text = current.text(0, b"o", heads.texts).decode()
            seen = set()
            for line in text.splitlines():
                topic = line.split('"')[1]
                partition = int(line.split('"')[3])
                offset = int(line.rsplit(" ", 1)[1])
                if offset != partition * 7 + topics.index(topic) or (topic, partition) in seen:
                    problems.append(line)
                seen.add((topic, partition))
            if len(seen) != n:
                problems.append(("rows", len(seen), n))

    reader = threading.Thread(target=scrape)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # (the threads take turns often)
    reader.start()
    try:
        for round_ in range(150):
            for i in range(round_ % 7, 3000, 3):
                t = round_ % 3
                f.put((topics[t], i), i * 7 + t)
            for i in range(round_ % 5, 3000, 4):
                f.remove((topics[(round_ + 1) % 3], i))
            if round_ % 50 == 49:
                f.clear()
            time.sleep(0)
    finally:
        stop.set()
        reader.join(30)
        sys.setswitchinterval(interval)
    assert not reader.is_alive()
    assert problems == []
    print("scrapes copied, refused:", scrapes)
    assert scrapes[0] > 0


def test_a_copy_refused_under_every_attempt_adds_nothing_and_says_so():
    """Entries added while the scrape makes its heads (Python, which may hand the lock to
    the loop) refuse the copy; after every attempt was refused nothing is added and -1
    returned (the collector then reads the group's dict), and the next call copies."""
    f = OffsetFigures()
    for i in range(5):
        f.put(("t", i), i)
    current, lag, heads, sums = GaugeRows(1), GaugeRows(1), LabelHeads(), {}
    marks = HostedWatermarks()
    marks.add("t", 0, 10)

    def changing_head(topic):  # (each call adds an entry of a topic not seen yet)
        f.put((f"z{len(f.topics)}", 0), 0)
        return heads.add(topic, f'topic="{topic}",')

    assert add_offset_figure_rows(current, lag, heads.index, changing_head, f, marks, None,
                                  sums, lambda: None, 16) == -1
    assert len(current) == len(lag) == 0 and sums == {}
    assert add_offset_figure_rows(current, lag, heads.index, heads.maker(
        lambda t: f'topic="{t}",'), f, marks, None, sums, lambda: None, 16) == len(f) == 8
    assert len(current) == 8 and len(lag) == 1 and sums == {"t": 10}


def group_rows(port: int) -> dict:
    """The broker's kafka_consumergroup_current_offset samples: {(group, topic,
    partition): offset}."""
    return {(dict(labels)["consumergroup"], dict(labels)["topic"],
             int(dict(labels)["partition"])): int(v)
            for (name, labels), v in scrape(port).items()
            if name == "kafka_consumergroup_current_offset"}


def committed(broker, groups) -> dict:
    """Every committed offset of the groups, by OffsetFetch (the group's dict):
    {(group, topic, partition): offset}."""
    w = Wire(broker)
    try:
        out = {}
        for group in groups:
            r = w.call(ApiKey.OFFSET_FETCH, 5, {"group_id": group, "topics": None})
            assert r.error_code == Errors.NONE
            out.update({(group, t.name, p.partition_index): p.committed_offset
                        for t in r.topics for p in t.partitions})
        return out
    finally:
        w.close()


def consumer_commits(broker, group: str, *commits: dict) -> None:
    """A consumer of `group` commits each {partition: offset} of topic "of" in turn."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        for offsets in commits:
            c.commit(offsets=[TopicPartition("of", p, o) for p, o in offsets.items()],
                     asynchronous=False)
    finally:
        c.close()


def test_a_brokers_group_rows_are_its_committed_offsets_through_every_path(tmp_path):
    """A real broker's scrape (which reads the kept figures) against OffsetFetch (which
    reads the groups' dicts) after commits from a consumer, a transaction's offsets
    committed and aborted, OffsetDelete, a group's deletion and a restart (the groups
    loaded from __consumer_offsets); then a run of scrapes through the periodic check,
    which finds nothing to report."""
    props, port = http_overrides()
    b = BrokerProcess(tmp_path / "data", {
        **props, "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "4", "transaction.state.log.num.partitions": "4"})
    b.start()
    groups = ["plain", "txn", "gone"]

    def in_step(what: str) -> dict:
        rows = group_rows(port)
        assert rows == committed(b, groups), what
        return rows

    try:
        create_topic(b, "of", partitions=4)
        consumer_commits(b, "plain", {p: 10 + p for p in range(4)}, {1: 30})
        consumer_commits(b, "gone", {0: 5})
        rows = in_step("commits")
        assert rows[("plain", "of", 1)] == 30 and len(rows) == 5
        # a transaction's offsets: invisible while pending, then committed or aborted
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "of-txn",
                      "linger.ms": 5})
        p.init_transactions(30)
        meta = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "txn",
                         "enable.auto.commit": False})
        try:
            for offset, commit in ((7, True), (9, False)):
                p.begin_transaction()
                p.produce("of", b"x", partition=2)
                p.send_offsets_to_transaction([TopicPartition("of", 2, offset)],
                                              meta.consumer_group_metadata(), 20)
                assert p.flush(10) == 0
                (p.commit_transaction if commit else p.abort_transaction)(30)
                wait_until(lambda: committed(b, ["txn"]).get(("txn", "of", 2)) == 7,
                           timeout=10, what="the transaction's offset")
                in_step(f"a transaction's offsets, {'committed' if commit else 'aborted'}")
        finally:
            meta.close()
        w = Wire(b)
        try:
            od = w.call(ApiKey.OFFSET_DELETE, 0, {"group_id": "plain", "topics": [
                {"name": "of", "partitions": [{"partition_index": 0},
                                              {"partition_index": 3}]}]})
            assert {q.error_code for t in od.topics for q in t.partitions} == {Errors.NONE}
            dl = w.call(ApiKey.DELETE_GROUPS, 1, {"groups_names": ["gone"]})
            assert dl.results[0].error_code == Errors.NONE
        finally:
            w.close()
        rows = in_step("OffsetDelete and DeleteGroups")
        assert set(rows) == {("plain", "of", 1), ("plain", "of", 2), ("txn", "of", 2)}
        b.restart()
        wait_until(lambda: committed(b, groups) == {
            ("plain", "of", 1): 30, ("plain", "of", 2): 12, ("txn", "of", 2): 7},
            timeout=20, what="the groups loaded")
        in_step("the restart's load")
        for _ in range(CHECK_COUNTS_EVERY):  # (through the periodic check)
            in_step("scrapes")
        assert "kept committed offsets" not in b.log_path.read_text(errors="replace")
    finally:
        if b.alive():
            assert b.stop() == 0, b.log_tail()
