"""fastlog/server/log/_figures.pyx (LogFigures): the slot each listed log writes its figures
into (size, log end and start offsets, segments, high watermark) equals the log's own
figures after every kind of change, on real logs of a real LogManager: appends on both
paths (the compiled leader append and Log's own), rolls, truncations, retention,
DeleteRecords, the high watermark moved by a replica manager, a write-behind append, a
compaction swap, deletion and creation, a move to another log dir, a failed log dir;
the rows the scrape makes of the slots are the rows of the walk over the logs; and a
change that missed its slot is found by the scrape's check and written anew."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random

from fastlog.server._exposition import (
    GaugeRows,
    HostedWatermarks,
    add_figure_rows,
    add_log_rows,
    figure_mismatches,
    hosted_slots,
)
from fastlog.server.log._figures import LogFigures

from fastlog.server.broker import BrokerServer
from fastlog.server.log import LogConfig
from fastlog.server.log.log_manager import LogManager
from fastlog.server.metrics import BrokerMetrics, LabelHeads
from tests.replication.test_replica_manager import _config
from tests.server.log.conftest import make_batch, record_set
from tests.server.log.test_cleaner import _manager, clean_all, fill


def _noop():
    pass


def rows_of(lm) -> tuple[set, set]:
    """(rows from the slots, rows from a walk over the logs), each as a set of
    (topic, partition, size, log end, log start, segments)."""
    def as_set(rows, texts):
        text = b"".join(rows.text(c, b"m%d" % c, texts) for c in range(4)).decode()
        got: dict = {}
        for line in text.splitlines():
            name, rest = line.split("{", 1)
            labels, value = rest.rsplit("} ", 1)
            got.setdefault(labels, {})[name] = int(value)
        return {(labels, *(v[f"m{c}"] for c in range(4))) for labels, v in got.items()}

    figures = lm.figures
    slots = GaugeRows(4)
    pauses = []
    add_figure_rows(slots, figures, lambda: pauses.append(1), 4)
    assert len(pauses) == -(-len(slots) // 4)
    texts = [f'topic="{t}",'.encode() for t in figures.topics]
    walk, heads = GaugeRows(4), LabelHeads()
    add_log_rows(walk, heads.index, heads.maker(lambda t: f'topic="{t}",'), lm.all_logs(),
                 _noop, 16)
    return as_set(slots, texts), as_set(walk, heads.texts)


def agree(lm) -> None:
    logs = lm.all_logs()
    assert figure_mismatches(lm.figures, logs, _noop, 16) == 0
    assert lm.figures.in_use == len(logs)
    from_slots, from_walk = rows_of(lm)
    assert from_slots == from_walk


def _append(log, n=1, epoch=0, write_executor=None):
    buf, hs = record_set(make_batch(n, value_size=30))
    return log.append(buf, hs, leader_epoch=epoch, write_executor=write_executor)


def test_slots_equal_the_logs_after_random_changes(tmp_path):
    """1,200 random changes over real logs in two dirs (small segments, so appends roll):
    after each, every slot equals its log and the slot rows equal the walk's rows; both
    append paths were taken."""
    rng = random.Random(5)
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    lm = LogManager(dirs, LogConfig(segment_bytes=600, retention_bytes=1500,
                                    file_delete_delay_ms=0), cleaner_enable=False)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        keys = [(f"t{i % 3}", i) for i in range(9)]
        for key in keys[:6]:
            lm.get_or_create_log(*key)
        agree(lm)
        compiled = 0
        for _ in range(1200):
            key = rng.choice(keys)
            log = lm.get_log(*key)
            op = rng.randrange(10)
            if log is None:
                if op < 5:
                    lm.get_or_create_log(*key)
            elif op <= 3:
                before = log._fast.appends
                _append(log, rng.randint(1, 3), epoch=rng.choice([0, 0, 0, 1]))
                compiled += log._fast.appends - before
            elif op == 4:
                log.roll()
            elif op == 5 and log.log_end_offset > log.log_start_offset:
                log.truncate_to(rng.randint(log.log_start_offset, log.log_end_offset))
            elif op == 6:
                log.hw_follows_leo = False  # (as a replica manager does)
                log.update_high_watermark(rng.randint(0, log.log_end_offset))
                if log.high_watermark > log.log_start_offset:
                    log.delete_records_before(rng.randint(log.log_start_offset,
                                                          log.high_watermark))
            elif op == 7:
                lm.cleanup_logs()
            elif op == 8:
                _append(log, 2, write_executor=pool)  # write-behind, then settled
                log.settle()
            elif op == 9:
                if rng.random() < 0.5:
                    log.truncate_fully_and_start_at(log.log_end_offset + rng.randint(0, 5))
                else:
                    lm.delete_log(*key)
            agree(lm)
        assert compiled > 50
        # a move to the other dir (the future log takes the slot's place), then a failure
        key = next(k for k in keys if lm.get_log(*k) is not None)
        other = next(d for d in dirs if d != lm.log_dir_of(*key))
        future = lm.create_future_log(*key, other)
        future.append(*record_set(make_batch(1)), leader_epoch=0)
        agree(lm)
        for _ in range(3):  # (the future log's compiled append armed before its slot)
            _append(future)
        lm.promote_future_log(*key)
        assert lm.get_log(*key) is future
        agree(lm)
        for _ in range(3):
            _append(future)
        assert future._fast.appends > 0
        agree(lm)
        lm.handle_log_dir_failure(dirs[0])
        agree(lm)
    finally:
        pool.shutdown()
        lm.shutdown()


def test_slots_follow_a_compaction_swap(tmp_path, clock):
    lm = _manager(tmp_path, clock, LogConfig(segment_bytes=500, cleanup_policy=("compact",),
                                             file_delete_delay_ms=0))
    try:
        log = lm.get_or_create_log("c", 0)
        fill(log, clock, rounds=6, keys=5)
        agree(lm)
        size = log.size_in_bytes
        clean_all(lm)
        assert lm.cleaner.passes >= 1 and log.size_in_bytes < size
        agree(lm)
    finally:
        lm.shutdown()


def test_slots_are_reused_and_topic_ids_kept():
    figures = LogFigures()
    a = figures.take("a", 0)
    b = figures.take("b", 3)
    figures.put(b, 10, 20, 5, 2, 18)
    assert figures.get(b) == ("b", 3, 10, 20, 5, 2, 18)
    figures.release(a)
    figures.release(a)  # (twice: nothing more)
    assert figures.get(a) is None and figures.in_use == 1
    c = figures.take("c", 1)
    assert c == a and figures.get(c) == ("c", 1, 0, 0, 0, 0, 0)
    assert figures.topics == ["a", "b", "c"]  # ids stay their topic's
    figures.release(b)
    figures.put(b, 1, 1, 1, 1, 1)  # a released slot takes nothing
    assert figures.get(b) is None
    assert figures.take("b", 4) == b and figures.topics == ["a", "b", "c"]
    rows = GaugeRows(4)
    marks = HostedWatermarks()
    mask = hosted_slots(figures, {("b", 4): None, ("c", 1): None}, {("c", 1)}, _noop, 16)
    assert list(mask) == [0, 1]  # (slot a: "c" 1, offline; slot b: "b" 4)
    noted = add_figure_rows(rows, figures, _noop, 16, marks, mask)
    assert len(rows) == 2 and noted == 1 and marks.get("b", 4) == 0
    assert marks.get("c", 1) is None


def test_a_missed_figure_is_found_by_the_scrapes_check_and_written_anew(tmp_path, caplog):
    async def main():
        b = BrokerServer(_config(1, tmp_path / "d1"))
        await b.startup()
        try:
            await b.create_topic("t", 3, 1, {})
            lm = b.log_manager
            check = BrokerMetrics(b).collector._check_figures
            assert check(lm, lm.figures)
            log = lm.get_log("t", 1)
            _append(log, 3)
            assert check(lm, lm.figures)
            log.log_start_offset = 2  # no note
            with caplog.at_level(logging.WARNING, "fastlog.server.metrics"):
                assert not check(lm, lm.figures)
            assert "differ" in caplog.text
            await asyncio.sleep(0.05)  # the loop writes them anew
            assert check(lm, lm.figures)
            assert lm.figures.get(log._figure_slot)[4] == 2
        finally:
            await b.shutdown()

    asyncio.run(main())
