"""The follower's side of a fetch session (replica_fetcher.FetchSessionHandler): a full
fetch first, then only changed and forgotten partitions, and a full fetch again after a
session error or a session the leader closed."""

from fastlog.protocol import Errors
from fastlog.server.replica_fetcher import FetchSessionHandler


def part(p, offset):
    return {"partition": p, "current_leader_epoch": 3, "fetch_offset": offset,
            "log_start_offset": 0, "partition_max_bytes": 1 << 20}


def test_full_then_incremental_then_full_after_an_error():
    h = FetchSessionHandler()
    wanted = {("t", 0): part(0, 5), ("t", 1): part(1, 7)}
    send, forgotten = h.build(wanted)
    assert (h.session_id, h.epoch) == (0, 0) and send == wanted and forgotten == []
    assert h.handle(Errors.NONE, 42)
    assert (h.session_id, h.epoch) == (42, 1)
    # nothing changed: an empty request; partition 0 moved: only it
    assert h.build(dict(wanted)) == ({}, [])
    assert h.handle(Errors.NONE, 42) and h.epoch == 2
    moved = {("t", 0): part(0, 9), ("t", 1): part(1, 7)}
    assert h.build(moved) == ({("t", 0): part(0, 9)}, [])
    assert h.handle(Errors.NONE, 42) and h.epoch == 3
    # partition 1 no longer fetched (backing off): forgotten
    assert h.build({("t", 0): part(0, 9)}) == ({}, [("t", [1])])
    assert h.handle(Errors.NONE, 42) and h.epoch == 4
    # the session was evicted at the leader: a full fetch that closes it and opens another
    h.build({("t", 0): part(0, 9)})
    assert not h.handle(Errors.FETCH_SESSION_ID_NOT_FOUND, 0)
    send, forgotten = h.build(wanted)
    assert (h.session_id, h.epoch) == (42, 0) and send == wanted
    assert h.handle(Errors.NONE, 77) and (h.session_id, h.epoch) == (77, 1)


def test_no_session_from_the_leader_keeps_full_fetches():
    h = FetchSessionHandler()
    wanted = {("t", 0): part(0, 1)}
    h.build(wanted)
    assert h.handle(Errors.NONE, 0)
    assert (h.session_id, h.epoch) == (0, 0) and h.build(wanted) == (wanted, [])
    # a session the leader closes on an incremental fetch: the answer counts, then full again
    assert h.handle(Errors.NONE, 5) and h.epoch == 1
    h.build(wanted)
    assert h.handle(Errors.NONE, 0) and h.epoch == 0
