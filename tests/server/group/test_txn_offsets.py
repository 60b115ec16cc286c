"""Transactional offset commits in the group coordinator (TxnOffsetCommit, KIP-98 and
KIP-447), driven directly over an in-memory __consumer_offsets: pending per producer
until the marker, visible on commit, dropped on abort, unstable for require_stable
fetches meanwhile, and rebuilt from transactional batches and markers on load."""

from fastlog.protocol.errors import Errors
from fastlog.server.group.offsets import TxnControl
from fastlog.server.group.schemas import OffsetAndMetadata
from tests.server.group.test_coordinator import run, started

P1, P2 = 1001, 1002


def offsets(**tps):
    return {(t, int(p)): OffsetAndMetadata(o) for (t, p), o in
            ((k.rsplit("_", 1), v) for k, v in tps.items())}


async def fetched(c, group, tps):
    err, got = await c.fetch_offsets(group, tps)
    assert err == Errors.NONE
    return {tp: (om.offset if om is not None else None) for tp, om in got.items()}


def test_pending_until_the_marker_then_visible_or_dropped():
    async def main():
        c = await started()
        p = c.partition_for("g")
        assert await c.commit_txn_offsets("g", P1, 0, "", None, -1, offsets(t_0=5)) == {
            ("t", 0): Errors.NONE}
        assert await c.commit_txn_offsets("g", P2, 0, "", None, -1, offsets(t_1=9)) == {
            ("t", 1): Errors.NONE}
        assert await fetched(c, "g", [("t", 0), ("t", 1)]) == {("t", 0): None, ("t", 1): None}
        assert c.unstable_offsets("g", [("t", 0), ("t", 1), ("t", 2)]) == {("t", 0), ("t", 1)}
        c.complete_txn_offsets(P1, [p + 1], True)          # another partition: no change
        assert c.unstable_offsets("g", [("t", 0)]) == {("t", 0)}
        c.complete_txn_offsets(P1, [p], True)
        c.complete_txn_offsets(P2, [p], False)
        assert await fetched(c, "g", [("t", 0), ("t", 1)]) == {("t", 0): 5, ("t", 1): None}
        assert c.unstable_offsets("g", [("t", 0), ("t", 1)]) == set()
        # a member id or generation the group does not have (v3, KIP-447)
        assert await c.commit_txn_offsets("g", P1, 0, "ghost", None, -1, offsets(t_0=6)) == {
            ("t", 0): Errors.UNKNOWN_MEMBER_ID}
        assert await c.commit_txn_offsets("g", P1, 0, "", None, 3, offsets(t_0=6)) == {
            ("t", 0): Errors.ILLEGAL_GENERATION}
    run(main())


def test_load_rebuilds_committed_aborted_and_open_transactions():
    async def main():
        c = await started()
        p = c.partition_for("g")
        await c.commit_offsets("g", "", None, -1, offsets(t_0=1, t_1=1, t_2=1))
        await c.commit_txn_offsets("g", P1, 0, "", None, -1, offsets(t_0=10))
        await c.commit_txn_offsets("g", P2, 0, "", None, -1, offsets(t_1=20))
        await c.commit_txn_offsets("g", 1003, 0, "", None, -1, offsets(t_2=30))
        # a group with nothing but an open transaction's offsets
        only = next(g for g in (f"only-{i}" for i in range(100)) if c.partition_for(g) == p)
        await c.commit_txn_offsets(only, 1003, 0, "", None, -1, offsets(t_3=40))
        store = c.store
        # the markers, as the log holds them after the data
        store.partitions[p] += [TxnControl(P1, True), TxnControl(P2, False)]
        await c.shutdown()
        c2 = await started(store)
        assert await fetched(c2, "g", [("t", 0), ("t", 1), ("t", 2)]) == {
            ("t", 0): 10, ("t", 1): 1, ("t", 2): 1}
        assert c2.unstable_offsets("g", [("t", 0), ("t", 1), ("t", 2)]) == {("t", 2)}
        assert c2.unstable_offsets(only, [("t", 3)]) == {("t", 3)}
        c2.complete_txn_offsets(1003, [p], True)
        assert (await fetched(c2, "g", [("t", 2)]))[("t", 2)] == 30
        assert (await fetched(c2, only, [("t", 3)]))[("t", 3)] == 40
        await c2.shutdown()
    run(main())


def test_a_failed_write_leaves_nothing_pending():
    async def main():
        c = await started()
        c.store.fail_with = Errors.NOT_COORDINATOR
        assert await c.commit_txn_offsets("g2", P1, 0, "", None, -1, offsets(t_0=5)) == {
            ("t", 0): Errors.NOT_COORDINATOR}
        assert c.unstable_offsets("g2", [("t", 0)]) == set()
    run(main())
