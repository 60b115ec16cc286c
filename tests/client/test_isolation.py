"""isolation.drop_aborted on real record batches: Kafka's read_committed walk (aborted
transactions listed by first offset, ended by their ABORT marker), interleaved producers,
a producer whose later transaction commits, and nothing copied when nothing is aborted."""

from fastlog import _codec
from fastlog.client.consumer import decode_records
from fastlog.client.isolation import drop_aborted


def _data(base, pid, values, txn=True):
    return _codec.build_batch([(1, None, v) for v in values], base_offset=base,
                              producer_id=pid, producer_epoch=0, base_sequence=base,
                              is_transactional=txn)


def _marker(base, pid, commit):
    return _codec.build_control_batch(commit, pid, 0, base, 1)


def _log():
    """0 a1 (pid 1, aborted at 3) | 1 b1 (pid 2, committed at 4) | 2 a2 (pid 1) |
    3 ABORT 1 | 4 COMMIT 2 | 5 plain | 6 a3 (pid 1 again, committed at 7) | 7 COMMIT 1."""
    return b"".join([_data(0, 1, [b"a1"]), _data(1, 2, [b"b1"]), _data(2, 1, [b"a2"]),
                     _marker(3, 1, False), _marker(4, 2, True),
                     _data(5, -1, [b"plain"], txn=False), _data(6, 1, [b"a3"]),
                     _marker(7, 1, True)])


def _values(buf):
    return [bytes(r.value) for r in _codec.read_records(buf)]


def test_aborted_batches_are_dropped_until_their_marker():
    buf = _log()
    batches = _codec.scan_batches(buf).batches
    kept = drop_aborted(buf, batches, [(1, 0)])
    assert _values(kept) == [b"b1", b"plain", b"a3"]
    # the markers stay, so a reader's position still steps over them
    assert [h.base_offset for h in _codec.scan_batches(kept).batches] == [1, 3, 4, 5, 6, 7]
    records, nxt = decode_records(buf, 0, True, [(1, 0)])
    assert [bytes(r.value) for r in records] == [b"b1", b"plain", b"a3"] and nxt == 8


def test_nothing_aborted_returns_the_buffer_itself():
    buf = _log()
    batches = _codec.scan_batches(buf).batches
    assert drop_aborted(buf, batches, []) is buf
    assert drop_aborted(buf, batches, None) is buf
    # an aborted transaction listed for another producer drops nothing either
    assert drop_aborted(buf, batches, [(9, 0)]) is buf
    assert _values(buf) == [b"a1", b"b1", b"a2", b"plain", b"a3"]


def test_a_partial_trailing_batch_is_left_out():
    buf = _log() + _data(8, 1, [b"cut"])[:30]
    batches = _codec.scan_batches(buf, verify_crc=False).batches
    assert _values(drop_aborted(buf, batches, [(1, 0)])) == [b"b1", b"plain", b"a3"]
