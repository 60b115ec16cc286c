"""ZkMetadataStore.add_partitions / assign_new_partitions: a topic grows through the
controller's conditional assignment rewrite; every broker's cache sees the new partitions
with leaders, placed the way Kafka places them."""

import asyncio

import pytest

from fastlog.testing import wait_until
from tests.zk.test_metadata_store import nodes  # noqa: F401 - the fixture


def test_add_partitions_reaches_every_cache_with_leaders(nodes):  # noqa: F811
    n1, n2, n3 = nodes(1), nodes(2), nodes(3)
    wait_until(lambda: sorted(n1.store.brokers()) == [1, 2, 3], what="brokers")
    asyncio.run(n1.store.create_topic("grow", 2, [[1, 2], [2, 3]], {}))
    new = n2.store.assign_new_partitions("grow", 5)
    assert len(new) == 3 and all(len(set(r)) == 2 and set(r) <= {1, 2, 3} for r in new)
    # Kafka's placement: leaders go round the brokers from partition 0's leader, as if
    # the new partitions had been numbered with the rest from the start
    assert [r[0] for r in new] == [3, 1, 2]
    t = asyncio.run(n2.store.add_partitions("grow", new))
    assert sorted(t.partitions) == [0, 1, 2, 3, 4]
    assert [t.partitions[p].replicas for p in (2, 3, 4)] == new
    assert all(t.partitions[p].leader == new[p - 2][0] for p in (2, 3, 4))
    wait_until(lambda: len(n3.store.topic("grow").partitions) == 5 and all(
        ps.leader > 0 for ps in n3.store.topic("grow").partitions.values()),
        what="grown topic in another broker's cache")
    assert n3.store.topic("grow").topic_id == t.topic_id


def test_add_partitions_to_unknown_topic(nodes):  # noqa: F811
    n1 = nodes(1)
    with pytest.raises(KeyError):
        asyncio.run(n1.store.add_partitions("absent", [[1]]))
