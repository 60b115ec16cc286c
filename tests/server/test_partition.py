"""fastlog.server.partition: which ISR members the leader drops."""

from fastlog.server.partition import Partition, ReplicaState


def leader_of(replicas, isr, caught_up_ms):
    p = Partition("t", 0, None, 3, replicas, local_id=1)
    p.isr = list(isr)
    p.remote = {b: ReplicaState(b, 100, now, now) for b, now in caught_up_ms.items()}
    return p


def test_followers_behind_longer_than_the_lag_limit_are_out():
    p = leader_of([1, 2, 3], [1, 2, 3], {2: 10_000, 3: 1_000})
    assert p.out_of_sync_replicas(now_ms=12_000, max_lag_ms=5_000) == [3]
    assert p.out_of_sync_replicas(now_ms=12_000, max_lag_ms=20_000) == []


def test_isr_members_that_are_no_longer_replicas_are_out_even_if_caught_up():
    # A reassignment removed 3 while an ISR expansion naming it was being written: the
    # recorded ISR names it, and only the leader's shrink takes it out again.
    p = leader_of([1, 2], [1, 2, 3], {2: 10_000, 3: 11_000})
    assert p.out_of_sync_replicas(now_ms=12_000, max_lag_ms=5_000) == [3]


def test_the_leader_itself_is_never_out():
    p = leader_of([2, 3], [1, 2], {2: 10_000})
    assert p.out_of_sync_replicas(now_ms=12_000, max_lag_ms=5_000) == []
