"""LeadershipTracker's passes over a hand-made metadata snapshot (no ZooKeeper): no role
before the controller wrote a partition's state, and a topic created again under the same
name (another topic id) loses its old log even when the deletion was never seen."""

from fastlog.metadata import PartitionState, TopicState
from fastlog.zk.leadership import LeadershipTracker


class FakeStore:
    def __init__(self):
        self.topics = {}

    def topic_names(self):
        return sorted(self.topics)

    def topic(self, name):
        return self.topics.get(name)

    def add_listener(self, fn):
        pass


class Recorder:
    def __init__(self):
        self.calls = []

    def become_leader(self, topic, partition, state):
        self.calls.append(("leader", topic, partition, state.leader_epoch))

    def become_follower(self, topic, partition, state):
        self.calls.append(("follower", topic, partition, state.leader))

    def stop_replica(self, topic, partition, delete):
        self.calls.append(("stop", topic, partition, delete))

    def session_changed(self, expired):
        self.calls.append(("session", expired))


def tracker():
    store, rec = FakeStore(), Recorder()
    return store, rec, LeadershipTracker(store, 1, rec, loop=None)


def test_no_role_until_the_controller_wrote_the_state():
    store, rec, t = tracker()
    store.topics["t"] = TopicState("t", "id-one", {0: PartitionState([1, 2], -1)}, {})
    t._pass()
    assert rec.calls == []
    store.topics["t"] = TopicState("t", "id-one", {0: PartitionState([1, 2], 1, 0, [1, 2], 0)}, {})
    t._pass()
    assert rec.calls == [("leader", "t", 0, 0)]
    # offline later (recorded state, leader -1): a follower of nobody, not "no role"
    store.topics["t"] = TopicState("t", "id-one", {0: PartitionState([1, 2], -1, 1, [1], 1)}, {})
    t._pass()
    assert rec.calls[-1] == ("follower", "t", 0, -1)


def test_same_name_new_topic_id_deletes_the_old_log_first():
    store, rec, t = tracker()
    store.topics["t"] = TopicState("t", "id-one", {0: PartitionState([1], 1, 0, [1], 0)}, {})
    t._pass()
    store.topics["t"] = TopicState("t", "id-two", {0: PartitionState([1], -1)}, {})
    t._pass()  # state not written yet: nothing happens
    assert rec.calls == [("leader", "t", 0, 0)]
    store.topics["t"] = TopicState("t", "id-two", {0: PartitionState([1], 1, 0, [1], 0)}, {})
    t._pass()
    assert rec.calls[1:] == [("stop", "t", 0, True), ("leader", "t", 0, 0)]
