"""The torn-write suite: damage a log the ways a crash can, reopen it, and check that it
ends exactly at the last valid batch, that lookups match a clean build, and that no valid
batch before the damage is lost."""

import os
import random

import pytest

from fastlog._codec import scan_batches
from fastlog.server.log import Log, LogConfig
from tests.server.log.conftest import append_n, read_all

CFG = LogConfig(segment_bytes=6000, index_interval_bytes=300)
N_CALLS = 150  # x2 batches of 2 records: 300 batches, ~10 segments


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A cleanly closed log; returns (dir, files {name: bytes}, batches [(base, bytes)])."""
    root = tmp_path_factory.mktemp("pristine")
    path = root / "t-0"
    log = Log.open(str(path), CFG)
    for i in range(N_CALLS):
        append_n(log, 1, records=2, value_size=40 + i % 17, ts=lambda _, i=i: 10_000 + 7 * i,
                 epoch=i // 50)
        append_n(log, 1, records=1, value_size=5, ts=lambda _, i=i: 10_003 + 7 * i, epoch=i // 50)
    batches = read_all(log)
    assert len(batches) == 2 * N_CALLS and log.num_segments >= 5
    recovery_point = log.recovery_point
    assert recovery_point == log.active_segment.base_offset  # flushed at each roll
    log.close()
    files = {name: (path / name).read_bytes() for name in os.listdir(path)}
    return files, batches, recovery_point


def _restore(tmp_path, files, name="t-0"):
    path = tmp_path / name
    path.mkdir(exist_ok=True)
    for old in os.listdir(path):
        os.unlink(path / old)
    for fname, data in files.items():
        (path / fname).write_bytes(data)
    return path


def _segment_layout(files):
    """[(segment file name, [(position, size, base, last)])] oldest first."""
    out = []
    for name in sorted(n for n in files if n.endswith(".log")):
        hs = scan_batches(files[name]).batches
        out.append((name, [(h.position, h.size, h.base_offset, h.last_offset) for h in hs]))
    return out


def _check(log, batches, expected_end):
    """The log holds exactly the pristine batches below expected_end, readable at every
    offset, with timestamps found as in the clean log."""
    assert log.log_end_offset == expected_end
    keep = [b for b in batches if b[0] < expected_end]
    assert read_all(log) == keep
    for base, raw in keep[-6:]:
        info = log.read(base, 1)
        assert info.first_batch_offset == base and info.regions[0].read() == raw
    for seg in log.segments:
        seg.sanity_check()


def test_truncated_at_every_byte_of_the_last_two_batches(tmp_path, pristine):
    files, batches, rp = pristine
    name, layout = _segment_layout(files)[-1]
    data = files[name]
    (p1, _, b1, _), (p2, s2, b2, l2) = layout[-2], layout[-1]
    assert p2 + s2 == len(data)
    for cut in range(p1, len(data) + 1):
        damaged = dict(files)
        damaged[name] = data[:cut]
        path = _restore(tmp_path, damaged)
        log = Log.open(str(path), CFG, recovery_point=rp, clean_shutdown=False)
        expected = l2 + 1 if cut == len(data) else (b2 if cut >= p2 else b1)
        assert log.log_end_offset == expected, cut
        assert os.path.getsize(path / name) == (cut if cut in (p1, p2, len(data)) else
                                                (p2 if cut > p2 else p1))
        if cut in (p1, p1 + 1, p2, p2 + 7, len(data)):  # full checks on a sample: keeps it fast
            _check(log, batches, expected)
            # The log keeps working: appends continue from the recovered end.
            append_n(log, 1)
            assert log.log_end_offset == expected + 2
        log.close()


def test_one_bit_flipped_in_many_batches(tmp_path, pristine):
    files, batches, _ = pristine
    rng = random.Random(3)
    layout = _segment_layout(files)
    victims = [(name, b) for name, bs in layout for b in bs][5::11]
    assert len(victims) >= 25
    for name, (pos, size, base, _) in victims:
        # Bytes a CRC check or a size check covers: length, magic, crc and the whole body
        # from attributes on. (baseOffset and partitionLeaderEpoch sit outside the CRC in
        # Kafka's format, so no reader can detect a flip there.)
        byte = rng.choice([8, 11, 16, 17, 20] + list(range(21, size)))
        damaged = dict(files)
        buf = bytearray(files[name])
        buf[pos + byte] ^= 1 << rng.randrange(8)
        damaged[name] = bytes(buf)
        path = _restore(tmp_path, damaged)
        log = Log.open(str(path), CFG, recovery_point=0, clean_shutdown=False)
        _check(log, batches, base)
        # Everything after the damage is gone: later segments too.
        assert all(s.base_offset <= base for s in log.segments)
        log.close()


@pytest.mark.parametrize("kind", ["extended", "overwritten"])
def test_zero_filled_tail(tmp_path, pristine, kind):
    files, batches, rp = pristine
    name, layout = _segment_layout(files)[-1]
    damaged = dict(files)
    if kind == "extended":  # the inode grew but the blocks never got written
        damaged[name] = files[name] + bytes(4096)
        expected = layout[-1][3] + 1
    else:  # the last blocks read back as zeros
        damaged[name] = files[name][:-150] + bytes(150)
        expected = next(b[2] for b in layout if b[0] + b[1] > len(files[name]) - 150)
    path = _restore(tmp_path, damaged)
    log = Log.open(str(path), CFG, recovery_point=rp, clean_shutdown=False)
    _check(log, batches, expected)
    assert os.path.getsize(path / name) == next(
        b[0] for b in layout if b[2] == expected) if kind == "overwritten" else len(files[name])
    log.close()


@pytest.mark.parametrize("damage", ["delete_index", "delete_timeindex", "garbage_index",
                                    "garbage_timeindex", "zero_index", "short_index"])
def test_missing_or_garbage_index_is_rebuilt(tmp_path, pristine, damage):
    files, batches, rp = pristine
    layout = _segment_layout(files)
    seg_name = layout[2][0]
    stem = seg_name[:-4]
    damaged = dict(files)
    rng = random.Random(damage)
    if damage == "delete_index":
        del damaged[stem + ".index"]
    elif damage == "delete_timeindex":
        del damaged[stem + ".timeindex"]
    elif damage == "garbage_index":
        damaged[stem + ".index"] = rng.randbytes(len(files[stem + ".index"]))
    elif damage == "garbage_timeindex":
        damaged[stem + ".timeindex"] = rng.randbytes(len(files[stem + ".timeindex"]))
    elif damage == "zero_index":
        damaged[stem + ".index"] = bytes(len(files[stem + ".index"]))
    else:
        damaged[stem + ".index"] = files[stem + ".index"][:-3]
    path = _restore(tmp_path, damaged)
    log = Log.open(str(path), CFG, recovery_point=rp, clean_shutdown=True)
    _check(log, batches, batches[-1][0] + scan_batches(batches[-1][1]).batches[0].last_offset_delta + 1)
    seg = next(s for s in log.segments if s.base_offset == int(stem))
    clean = Log.open(str(_restore(tmp_path, files, "t-1")), CFG, recovery_point=rp)
    ref = next(s for s in clean.segments if s.base_offset == int(stem))
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == [
        ref.offset_index.entry(i) for i in range(ref.offset_index.entries)]
    for ts in (10_000, 10_350, 10_351, 10_700, 11_040):
        assert log.fetch_offset_by_timestamp(ts) == clean.fetch_offset_by_timestamp(ts)
    log.close()
    clean.close()


def test_half_written_checkpoint_temp_file_is_ignored(tmp_path, pristine):
    files, batches, rp = pristine
    damaged = dict(files)
    good = files["leader-epoch-checkpoint"]
    damaged["leader-epoch-checkpoint.tmp"] = good[: len(good) // 2]
    path = _restore(tmp_path, damaged)
    log = Log.open(str(path), CFG, recovery_point=rp, clean_shutdown=False)
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 150), (2, 300)]
    assert not (path / "leader-epoch-checkpoint.tmp").exists()
    _check(log, batches, len(batches) // 2 * 3)
    log.close()
