"""TransactionCoordinator driven directly (no network) over an in-memory
__transaction_state and a marker writer the test releases: Kafka's state machine and
error codes, KIP-360 epoch bumps, fencing, markers before Complete*, reload of a
transaction caught in PrepareCommit, timeouts, expiry, failed writes leaving nothing
behind, and partitions loading, resigned and elected again."""

import asyncio

from fastlog.protocol.errors import Errors
from fastlog.server.group.offsets import MemoryGroupStore
from fastlog.server.txn.coordinator import TransactionCoordinator
from fastlog.server.txn.schemas import (
    TxnRecord,
    TxnState,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)

TIMEOUT = 60000


class FakeBroker:
    def __init__(self, **overrides):
        self.config = {
            "transaction.state.log.num.partitions": 3,
            "transaction.max.timeout.ms": 900000,
            "transactional.id.expiration.ms": 604800000,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 3600_000,
            "transaction.remove.expired.transaction.cleanup.interval.ms": 3600_000,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.segment.bytes": 1 << 20,
        }
        self.config.update(overrides)
        self.producer_id_manager = self

    _next = 1000

    async def generate_producer_id(self):
        FakeBroker._next += 1
        return FakeBroker._next


class Markers:
    """Takes markers as the replica manager would, only while ``open`` is set; records
    each (producer id, epoch, committed, partitions) it wrote."""

    def __init__(self):
        self.open = asyncio.Event()
        self.open.set()
        self.written = []

    async def write(self, pid, epoch, committed, coordinator_epoch, partitions):
        await self.open.wait()
        self.written.append((pid, epoch, committed, sorted(partitions)))
        return dict.fromkeys(partitions, Errors.NONE)

    def partition_exists(self, topic, partition):
        return True

    async def close(self):
        pass


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def started(store=None, markers=None, **overrides):
    c = TransactionCoordinator(FakeBroker(**overrides), store or MemoryGroupStore(),
                               markers or Markers())
    await c.startup()
    for _ in range(100):
        if not c.loading:
            break
        await asyncio.sleep(0.01)
    return c


async def until(cond, what):
    for _ in range(400):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def states_written(store, txn_id):
    return [decode_txn_value(v).state if v is not None else None
            for k, v, *_ in sum(store.partitions.values(), [])
            if k[:2] == b"\x00\x00" and decode_txn_key(k) == txn_id]


def test_init_producer_id_new_bump_and_bad_timeouts():
    async def main():
        c = await started()
        r = await c.init_producer_id("t1", TIMEOUT)
        assert r.error == Errors.NONE and r.producer_epoch == 0
        again = await c.init_producer_id("t1", TIMEOUT)
        assert (again.producer_id, again.producer_epoch) == (r.producer_id, 1)
        assert (await c.init_producer_id("t1", 900001)).error == Errors.INVALID_TRANSACTION_TIMEOUT
        assert (await c.init_producer_id("t1", 0)).error == Errors.INVALID_TRANSACTION_TIMEOUT
        assert (await c.init_producer_id("", TIMEOUT)).error == Errors.INVALID_REQUEST
        assert states_written(c.store, "t1") == [TxnState.EMPTY, TxnState.EMPTY]
    run(main())


def test_kip360_bump_retry_fencing_and_exhaustion():
    async def main():
        c = await started()
        r = await c.init_producer_id("t2", TIMEOUT)
        pid = r.producer_id
        bumped = await c.init_producer_id("t2", TIMEOUT, pid, 0)
        assert (bumped.error, bumped.producer_epoch) == (Errors.NONE, 1)
        # the same request again (its answer was lost): the same epoch, no new bump
        retry = await c.init_producer_id("t2", TIMEOUT, pid, 0)
        assert (retry.error, retry.producer_id, retry.producer_epoch) == (Errors.NONE, pid, 1)
        assert (await c.init_producer_id("t2", TIMEOUT, pid + 7, 1)).error == Errors.PRODUCER_FENCED
        c.txns["t2"].producer_epoch = 32766   # exhausted: the next init rotates the id
        rotated = await c.init_producer_id("t2", TIMEOUT, pid, 32766)
        assert rotated.error == Errors.NONE and rotated.producer_id != pid
        assert rotated.producer_epoch == 0
    run(main())


def test_add_partitions_and_end_txn_error_codes_and_markers():
    async def main():
        markers = Markers()
        c = await started(markers=markers)
        r = await c.init_producer_id("t3", TIMEOUT)
        pid, epoch = r.producer_id, r.producer_epoch
        parts = {("a", 0), ("b", 1)}
        assert await c.add_partitions("t3", pid + 1, epoch, parts) == Errors.INVALID_PRODUCER_ID_MAPPING
        assert await c.add_partitions("nope", pid, epoch, parts) == Errors.INVALID_PRODUCER_ID_MAPPING
        assert await c.add_partitions("t3", pid, epoch - 1, parts) == Errors.PRODUCER_FENCED
        assert await c.end_transaction("t3", pid, epoch, True) == Errors.INVALID_TXN_STATE
        assert await c.add_partitions("t3", pid, epoch, parts) == Errors.NONE
        assert await c.add_partitions("t3", pid, epoch, {("a", 0)}) == Errors.NONE
        assert c.txns["t3"].state is TxnState.ONGOING and c.txns["t3"].partitions == parts
        markers.open.clear()                       # markers cannot be written yet
        assert await c.end_transaction("t3", pid, epoch, True) == Errors.NONE
        assert c.txns["t3"].state is TxnState.PREPARE_COMMIT
        # while the markers are pending, as Kafka:
        assert await c.add_partitions("t3", pid, epoch, {("c", 0)}) == Errors.CONCURRENT_TRANSACTIONS
        assert await c.end_transaction("t3", pid, epoch, True) == Errors.CONCURRENT_TRANSACTIONS
        assert await c.end_transaction("t3", pid, epoch, False) == Errors.INVALID_TXN_STATE
        assert (await c.init_producer_id("t3", TIMEOUT)).error == Errors.CONCURRENT_TRANSACTIONS
        assert markers.written == []
        markers.open.set()
        await until(lambda: c.txns["t3"].state is TxnState.COMPLETE_COMMIT, "CompleteCommit")
        assert markers.written == [(pid, epoch, True, sorted(parts))]
        assert c.txns["t3"].partitions == set()
        assert await c.end_transaction("t3", pid, epoch, True) == Errors.NONE   # a retry
        assert await c.end_transaction("t3", pid, epoch, False) == Errors.INVALID_TXN_STATE
        assert states_written(c.store, "t3") == [
            TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
        # the next transaction starts from CompleteCommit with only its own partitions
        assert await c.add_partitions("t3", pid, epoch, {("c", 0)}) == Errors.NONE
        assert c.txns["t3"].partitions == {("c", 0)}
    run(main())


def test_init_during_ongoing_transaction_aborts_it_and_fences_the_old_producer():
    async def main():
        markers = Markers()
        c = await started(markers=markers)
        r = await c.init_producer_id("t4", TIMEOUT)
        pid, epoch = r.producer_id, r.producer_epoch
        assert await c.add_partitions("t4", pid, epoch, {("a", 0)}) == Errors.NONE
        assert (await c.init_producer_id("t4", TIMEOUT)).error == Errors.CONCURRENT_TRANSACTIONS
        await until(lambda: c.txns["t4"].state is TxnState.COMPLETE_ABORT, "CompleteAbort")
        assert markers.written == [(pid, epoch + 1, False, [("a", 0)])]
        new = await c.init_producer_id("t4", TIMEOUT)
        assert (new.error, new.producer_id, new.producer_epoch) == (Errors.NONE, pid, epoch + 2)
        assert await c.add_partitions("t4", pid, epoch, {("a", 0)}) == Errors.PRODUCER_FENCED
        assert await c.end_transaction("t4", pid, epoch, True) == Errors.PRODUCER_FENCED
    run(main())


def test_prepare_commit_found_at_load_is_completed():
    async def main():
        store = MemoryGroupStore()
        c = TransactionCoordinator(FakeBroker(), store, Markers())
        p = c.partition_for("t5")
        rec = TxnRecord(77, 3, TIMEOUT, TxnState.PREPARE_COMMIT, {("a", 0), ("a", 1)}, 1, 1)
        store.partitions[p] = [(encode_txn_key("t5"), encode_txn_value(rec)),
                               (encode_txn_key("gone"), encode_txn_value(rec)),
                               (encode_txn_key("gone"), None),
                               (b"\x00\x07junk", b"junk")]
        markers = Markers()
        c = await started(store, markers)
        await until(lambda: c.txns["t5"].state is TxnState.COMPLETE_COMMIT, "CompleteCommit")
        assert markers.written == [(77, 3, True, [("a", 0), ("a", 1)])]
        assert "gone" not in c.txns
        assert states_written(store, "t5")[-1] is TxnState.COMPLETE_COMMIT
    run(main())


def test_timed_out_transaction_is_aborted_and_producer_fenced():
    async def main():
        markers = Markers()
        c = await started(markers=markers)
        r = await c.init_producer_id("t6", 100)
        pid, epoch = r.producer_id, r.producer_epoch
        assert await c.add_partitions("t6", pid, epoch, {("a", 0)}) == Errors.NONE
        start = c.txns["t6"].start_ms
        assert await c.abort_timed_out_transactions(start + 50) == 0
        assert await c.abort_timed_out_transactions(start + 1000) == 1
        await until(lambda: c.txns["t6"].state is TxnState.COMPLETE_ABORT, "CompleteAbort")
        assert markers.written == [(pid, epoch + 1, False, [("a", 0)])]
        assert await c.end_transaction("t6", pid, epoch, True) == Errors.PRODUCER_FENCED
    run(main())


def test_idle_ids_expire_with_a_tombstone():
    async def main():
        c = await started(**{"transactional.id.expiration.ms": 1000})
        await c.init_producer_id("t7", TIMEOUT)
        r = await c.init_producer_id("t8", TIMEOUT)
        assert await c.add_partitions("t8", r.producer_id, r.producer_epoch, {("a", 0)}) == Errors.NONE
        last = c.txns["t7"].last_update_ms
        assert await c.expire_transactional_ids(last + 10) == 0
        assert await c.expire_transactional_ids(last + 5000) == 1   # t8 is Ongoing: kept
        assert c.describe("t7")[0] == Errors.TRANSACTIONAL_ID_NOT_FOUND
        assert c.describe("t8")[0] == Errors.NONE
        assert states_written(c.store, "t7")[-1] is None
    run(main())


def test_failed_writes_leave_nothing_behind():
    async def main():
        c = await started()
        c.store.fail_with = Errors.NOT_COORDINATOR
        assert (await c.init_producer_id("t9", TIMEOUT)).error == Errors.NOT_COORDINATOR
        assert c.describe("t9")[0] == Errors.TRANSACTIONAL_ID_NOT_FOUND
        c.store.fail_with = None
        r = await c.init_producer_id("t9", TIMEOUT)
        c.store.fail_with = Errors.COORDINATOR_NOT_AVAILABLE
        assert await c.add_partitions("t9", r.producer_id, r.producer_epoch,
                                      {("a", 0)}) == Errors.COORDINATOR_NOT_AVAILABLE
        txn = c.txns["t9"]
        assert (txn.state, txn.partitions, txn.pending) == (TxnState.EMPTY, set(), None)
    run(main())


def test_list_and_describe():
    async def main():
        c = await started()
        a = await c.init_producer_id("l1", TIMEOUT)
        await c.init_producer_id("l2", TIMEOUT)
        assert await c.add_partitions("l1", a.producer_id, 0, {("a", 0)}) == Errors.NONE
        err, txns = c.list_transactions({TxnState.ONGOING}, None)
        assert err == Errors.NONE and [t.transactional_id for t in txns] == ["l1"]
        err, txns = c.list_transactions(None, {a.producer_id})
        assert [t.transactional_id for t in txns] == ["l1"]
        assert len(c.list_transactions(None, None)[1]) == 2
        err, txn = c.describe("l1")
        assert txn.state is TxnState.ONGOING and txn.partitions == {("a", 0)}
    run(main())


class GatedStore(MemoryGroupStore):
    """Loads wait until ``loaded`` is set (a partition being loaded)."""

    def __init__(self):
        super().__init__()
        self.loaded = asyncio.Event()

    async def load(self, partition):
        await self.loaded.wait()
        async for chunk in super().load(partition):
            yield chunk


def test_loading_resigned_and_elected_partitions_answer_kafkas_codes():
    async def main():
        store = GatedStore()
        c = TransactionCoordinator(FakeBroker(), store, Markers())
        await c.startup()
        p = c.partition_for("t10")
        assert (await c.init_producer_id("t10", TIMEOUT)).error == \
            Errors.COORDINATOR_LOAD_IN_PROGRESS
        store.loaded.set()
        await until(lambda: not c.loading, "the load")
        r = await c.init_producer_id("t10", TIMEOUT)
        assert r.error == Errors.NONE
        c.on_resigned(p)                       # leadership moved away
        assert "t10" not in c.txns
        assert await c.add_partitions("t10", r.producer_id, 0, {("a", 0)}) == \
            Errors.NOT_COORDINATOR
        assert c.describe("t10")[0] == Errors.NOT_COORDINATOR
        c.on_elected(p)                        # and back: the id is read from the log again
        await until(lambda: not c.loading, "the reload")
        assert await c.add_partitions("t10", r.producer_id, 0, {("a", 0)}) == Errors.NONE
        await c.shutdown()
    run(main())


def test_a_reelected_partition_completes_a_transaction_whose_old_completion_was_cut():
    async def main():
        markers = Markers()
        c = await started(markers=markers)
        r = await c.init_producer_id("t11", TIMEOUT)
        assert await c.add_partitions("t11", r.producer_id, 0, {("a", 0)}) == Errors.NONE
        markers.open.clear()                   # the markers hang...
        assert await c.end_transaction("t11", r.producer_id, 0, True) == Errors.NONE
        await asyncio.sleep(0.05)              # (its completion now waits in the write)
        p = c.partition_for("t11")
        c.on_resigned(p)                       # ...leadership goes and comes back
        c.on_elected(p)
        await until(lambda: not c.loading and "t11" in c.txns, "the reload")
        assert c.txns["t11"].state is TxnState.PREPARE_COMMIT
        markers.open.set()
        await until(lambda: c.txns["t11"].state is TxnState.COMPLETE_COMMIT, "CompleteCommit")
        await c.shutdown()
    run(main())
