"""Replica assignment: Kafka's round-robin with shifting followers, rack-aware interleaving."""

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlog.zk.assignment import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    RackInformationError,
    assign_replicas,
    rack_alternated_brokers,
)

PROPS = settings(max_examples=150, deadline=None)


@st.composite
def cluster(draw):
    ids = draw(st.lists(st.integers(0, 2000), min_size=1, max_size=12, unique=True))
    rf = draw(st.integers(1, len(ids)))
    partitions = draw(st.integers(1, 60))
    seed = draw(st.integers(0, 2**32))
    return ids, rf, partitions, seed


def test_fixed_start_matches_kafkas_reference_assignment():
    got = assign_replicas(10, 3, [0, 1, 2, 3, 4], fixed_start_index=0)
    assert got == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                   5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


def test_rack_aware_matches_kafkas_reference_assignment():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    got = assign_replicas(7, 3, racks, fixed_start_index=0, start_partition_id=0)
    assert got == {0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0],
                   5: [2, 0, 3], 6: [0, 4, 2]}


@PROPS
@given(cluster())
def test_each_partition_gets_distinct_live_replicas(c):
    ids, rf, partitions, seed = c
    got = assign_replicas(partitions, rf, ids, rng=random.Random(seed))
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(ids)


@PROPS
@given(cluster())
def test_leaders_and_replicas_spread_evenly(c):
    ids, rf, partitions, seed = c
    got = assign_replicas(partitions, rf, ids, rng=random.Random(seed))
    leaders = Counter(r[0] for r in got.values())
    counts = [leaders.get(b, 0) for b in ids]
    assert max(counts) - min(counts) <= 1
    replicas = Counter(b for r in got.values() for b in r)
    per_broker = [replicas.get(b, 0) for b in ids]
    if partitions % len(ids) == 0:
        assert len(set(per_broker)) == 1  # full rounds: exactly even
    else:
        assert max(per_broker) - min(per_broker) <= rf


@PROPS
@given(st.integers(1, 5), st.integers(1, 4), st.integers(1, 40), st.integers(1, 4),
       st.integers(0, 2**32))
def test_rack_aware_spreads_each_partition_over_racks(num_racks, per_rack, partitions, rf, seed):
    racks = {}
    for r in range(num_racks):
        for i in range(per_rack):
            racks[100 + r * 10 + i] = f"rack-{r}"
    rf = min(rf, len(racks))
    got = assign_replicas(partitions, rf, racks, rng=random.Random(seed))
    for replicas in got.values():
        assert len(set(replicas)) == rf
        assert len({racks[b] for b in replicas}) == min(rf, num_racks)
    leaders = Counter(r[0] for r in got.values())
    counts = [leaders.get(b, 0) for b in racks]
    assert max(counts) - min(counts) <= 1
    if partitions % len(racks) == 0:  # equal racks, full rounds: every broker equally loaded
        assert len(set(Counter(b for r in got.values() for b in r).values())) == 1


def test_new_partitions_continue_the_numbering():
    got = assign_replicas(3, 2, [1, 2, 3], start_partition_id=4, rng=random.Random(1))
    assert sorted(got) == [4, 5, 6]


def test_invalid_requests_are_refused_clearly():
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2 available"):
        assign_replicas(1, 3, [1, 2])
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(1, 0, [1, 2])
    with pytest.raises(InvalidPartitionsError):
        assign_replicas(0, 1, [1, 2])
    with pytest.raises(RackInformationError, match=r"\[2\] have no broker.rack"):
        assign_replicas(2, 2, {1: "a", 2: None})
    # "safe" falls back to rack-unaware, "disabled" ignores racks
    assert len(assign_replicas(2, 2, {1: "a", 2: None}, rack_aware="safe")) == 2
    assert len(assign_replicas(2, 2, {1: "a", 2: "a"}, rack_aware="disabled")) == 2
