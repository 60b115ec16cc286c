"""Exactly-once under failures on one real fastlog-server (issue 20's tests of record): a
consume-transform-produce loop (tests/server/txn/eos.py, confluent-kafka's transactional
producer and a read_committed consumer, offsets sent in each transaction) copies 3,000
keyed records while the broker is SIGKILLed and restarted twice; and a zombie, an older
instance of the loop with the same transactional.id, is fenced by the newer one and its
open transaction aborted (scripted step by step, and with both instances running at once,
the older stopping once fenced). Every way the output read with read_committed holds every
input record exactly once."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from fastlog.testing import BrokerProcess, wait_until
from tests.server.group.clients import create_topic
from tests.server.txn.eos import CopyLoop, produce_input
from tests.server.txn.test_txn_clients import OVERRIDES, PARTITIONS, describe, fresh, read_confluent

N = 3000


def values_of(records) -> Counter:
    return Counter(v for _, v in records)


def expected_values(n: int = N) -> Counter:
    return Counter(b"%d" % i for i in range(n))


def setup_topics(broker):
    src, dst = fresh("eos-in"), fresh("eos-out")
    create_topic(broker.bootstrap, src, PARTITIONS)
    create_topic(broker.bootstrap, dst, PARTITIONS)
    ends = produce_input(broker.bootstrap, src, N)
    assert sum(ends.values()) == N and len(ends) == PARTITIONS, ends
    return src, dst, ends


class LoopThread(threading.Thread):
    """Runs a CopyLoop to its end on a daemon thread; join() re-raises its failure."""

    def __init__(self, loop: CopyLoop, budget: float):
        super().__init__(daemon=True)
        self.loop = loop
        self.deadline = time.monotonic() + budget
        self.failure: BaseException | None = None

    def run(self):
        try:
            self.loop.run(self.deadline)
        except BaseException as e:  # noqa: BLE001 - reported by join
            self.failure = e
        finally:
            self.loop.close()

    def wait_copied(self, n: int, timeout: float) -> None:
        """Until the loop has copied n records or ended."""
        try:
            wait_until(lambda: self.loop.copied >= n or not self.is_alive(), timeout,
                       what=f"{n} records copied")
        except TimeoutError as e:
            raise AssertionError(f"{e}: {self.loop.state()}") from None

    def join(self, timeout=None):
        super().join(timeout)
        assert not self.is_alive(), f"copy loop still running: {self.loop.state()}"
        if self.failure is not None:
            raise self.failure


# (seconds the broker stays down, the application's timeout of each client call): a short
# outage the clients ride out, and one past the application's timeouts, after which it
# starts new clients whose InitProducerId finds the old transaction Ongoing or committing.
OUTAGES = {"short-outage": ((0.1, 1.0), 20.0), "outage-past-client-timeouts": ((2.0, 3.0), 1.5)}


@pytest.mark.parametrize("outage", OUTAGES)
def test_copy_loop_is_exactly_once_across_two_broker_kills(tmp_path, outage):
    (down_min, down_max), timeout = OUTAGES[outage]
    with BrokerProcess(tmp_path / "data", overrides=OVERRIDES) as broker:
        src, dst, ends = setup_topics(broker)
        loop = CopyLoop(broker.bootstrap, fresh("eos-app"), fresh("eos-group"), src, dst,
                        ends, pause=0.1, timeout=timeout)
        runner = LoopThread(loop, budget=70)
        runner.start()
        rng = random.Random()
        kills = 0
        # kill at bounded random points of the copy: ~10-30% and ~55-80% through it
        for low, high in ((0.10, 0.30), (0.55, 0.80)):
            at = int(N * rng.uniform(low, high))
            runner.wait_copied(at, 40)
            if not runner.is_alive():
                break
            time.sleep(rng.uniform(0, 0.3))      # mid-transaction or between two
            broker.kill()
            kills += 1
            time.sleep(rng.uniform(down_min, down_max))
            broker.start()
        runner.join(75)
        assert kills == 2                       # both while the loop was copying
        if timeout < down_min:                  # the outage was felt: new clients
            assert loop.restarts >= 1, loop.state()
        got = read_confluent(broker, [dst], expect=N, timeout=30)
        assert values_of(got) == expected_values()


def test_zombie_is_fenced_and_its_open_transaction_aborted(tmp_path):
    with BrokerProcess(tmp_path / "data", overrides=OVERRIDES) as broker:
        zombie_run(broker)


def zombie_run(txn_broker):
    src, dst, ends = setup_topics(txn_broker)
    txn_id, group = fresh("eos-zombie"), fresh("eos-group")
    old = CopyLoop(txn_broker.bootstrap, txn_id, group, src, dst, ends)
    old.step()                                   # one committed transaction
    assert old.commits == 1 and old.copied == 100
    n = old.produce_batch()                      # the next one is open...
    assert n == 100 and old.producer.flush(20) == 0
    # ...when the application (thought dead) is started again with the same id
    new = CopyLoop(txn_broker.bootstrap, txn_id, group, src, dst, ends)
    new.start()
    d = describe(txn_broker, txn_id)
    assert d.producer_epoch > 0 and d.transaction_state in ("CompleteAbort", "Empty"), d
    assert sum(new.pos.values()) == 100          # rewound to the committed offsets
    runner = LoopThread(new, budget=60)
    runner.start()
    # the zombie wakes up and tries to commit: fenced, fatal; it stops
    try:
        old.producer.commit_transaction(20)
    except Exception as e:  # noqa: BLE001 - checked below
        err = e.args[0]
        assert err.fatal() or err.name() in ("_FENCED", "PRODUCER_FENCED",
                                              "INVALID_PRODUCER_EPOCH"), err
    else:
        raise AssertionError("the fenced producer committed")
    old.close()
    runner.join(65)
    got = read_confluent(txn_broker, [dst], expect=N, timeout=30)
    assert values_of(got) == expected_values()
    # the zombie's aborted batch is in the log, only not in read_committed output
    raw = read_confluent(txn_broker, [dst], isolation="read_uncommitted", expect=N + 100,
                         timeout=30)
    assert len(raw) == N + 100


def test_two_running_instances_the_older_stops_fenced(tmp_path):
    """Both instances run at once on their own threads: the newer one's InitProducerId
    fences the older, whatever it is doing at that moment (a batch, a commit under way)."""
    with BrokerProcess(tmp_path / "data", overrides=OVERRIDES) as broker:
        src, dst, ends = setup_topics(broker)
        txn_id, group = fresh("eos-twins"), fresh("eos-group")
        old = CopyLoop(broker.bootstrap, txn_id, group, src, dst, ends, pause=0.1)
        old_runner = LoopThread(old, budget=60)
        old_runner.start()
        old_runner.wait_copied(int(N * random.uniform(0.1, 0.4)), 40)
        new = CopyLoop(broker.bootstrap, txn_id, group, src, dst, ends)
        new_runner = LoopThread(new, budget=60)
        new_runner.start()
        old_runner.join(30)
        assert old.fenced, old.state()
        new_runner.join(65)
        assert not new.fenced and new.done(), new.state()
        got = read_confluent(broker, [dst], expect=N, timeout=30)
        assert values_of(got) == expected_values()
