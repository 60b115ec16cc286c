"""GroupMetadata state machine and protocol choice, without a broker."""

import pytest

from fastlog.server.group.group import (
    GroupMetadata,
    GroupState,
    IllegalStateTransition,
    MemberMetadata,
    parse_subscription_topics,
)
from fastlog.server.group.schemas import OffsetAndMetadata


def member(mid, protocols, instance=None):
    return MemberMetadata(mid, instance, "client", "/127.0.0.1", 30000, 10000, "consumer",
                          [(p, b"meta-" + p.encode()) for p in protocols])


def test_first_member_becomes_leader_and_sets_protocol_type():
    g = GroupMetadata("g")
    g.add(member("a", ["range"]))
    g.add(member("b", ["range"]))
    assert g.leader_id == "a" and g.protocol_type == "consumer"


def test_select_protocol_takes_the_one_all_members_support():
    g = GroupMetadata("g")
    g.add(member("kp", ["range", "roundrobin"]))
    g.add(member("aio", ["roundrobin"]))
    assert g.select_protocol() == "roundrobin"


def test_select_protocol_votes_by_preference():
    g = GroupMetadata("g")
    g.add(member("a", ["roundrobin", "range"]))
    g.add(member("b", ["range", "roundrobin"]))
    g.add(member("c", ["range", "roundrobin"]))
    assert g.select_protocol() == "range"


def test_supports_protocols_rejects_type_mismatch_and_no_common_protocol():
    g = GroupMetadata("g")
    assert g.supports_protocols("consumer", ["range"])
    g.add(member("a", ["range"]))
    assert not g.supports_protocols("connect", ["range"])
    assert not g.supports_protocols("consumer", ["roundrobin"])
    assert g.supports_protocols("consumer", ["roundrobin", "range"])
    assert not g.supports_protocols("consumer", [])


def test_valid_transitions_follow_kafka():
    g = GroupMetadata("g")
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.STABLE)
    g.transition_to(GroupState.PREPARING_REBALANCE)
    g.transition_to(GroupState.COMPLETING_REBALANCE)
    g.transition_to(GroupState.STABLE)
    g.transition_to(GroupState.PREPARING_REBALANCE)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.STABLE)
    g.transition_to(GroupState.DEAD)


def test_init_next_generation_empty_group_goes_empty():
    g = GroupMetadata("g")
    g.transition_to(GroupState.PREPARING_REBALANCE)
    g.init_next_generation()
    assert g.is_(GroupState.EMPTY) and g.generation_id == 1 and g.protocol_name is None


def test_init_next_generation_with_members_completes_rebalance():
    g = GroupMetadata("g")
    g.add(member("a", ["range"]))
    g.transition_to(GroupState.PREPARING_REBALANCE)
    g.init_next_generation()
    assert g.is_(GroupState.COMPLETING_REBALANCE) and g.protocol_name == "range"
    assert g.current_member_metadata() == [("a", None, b"meta-range")]


def test_removing_the_leader_elects_another():
    g = GroupMetadata("g")
    g.add(member("a", ["range"]))
    g.add(member("b", ["range"]))
    g.remove("a")
    assert g.leader_id == "b"
    g.remove("b")
    assert g.leader_id is None and g.is_empty()


def test_static_member_replacement_keeps_leadership():
    g = GroupMetadata("g")
    g.add(member("a", ["range"], instance="i1"))
    g.replace_static_member("i1", "a", "a2")
    assert g.leader_id == "a2" and g.static_member_id("i1") == "a2" and g.has("a2")


def test_offsets_expire_only_while_empty():
    g = GroupMetadata("g")
    g.current_state_timestamp = 1000
    g.commit_offset("t", 0, OffsetAndMetadata(5, commit_timestamp=1000))
    g.commit_offset("t", 1, OffsetAndMetadata(5, commit_timestamp=5000))
    assert g.expired_offsets(now=3000, retention_ms=1000) == [("t", 0)]
    g.add(member("a", ["range"]))
    g.transition_to(GroupState.PREPARING_REBALANCE)
    assert g.expired_offsets(now=10_000, retention_ms=1000) == []


def test_record_round_trip_restores_members_and_assignments():
    g = GroupMetadata("g")
    g.add(member("a", ["range"]))
    g.add(member("b", ["range"], instance="ib"))
    g.transition_to(GroupState.PREPARING_REBALANCE)
    g.init_next_generation()
    g.get("a").assignment = b"A"
    g.get("b").assignment = b"B"
    g.transition_to(GroupState.STABLE)
    back = GroupMetadata.from_record("g", g.to_record())
    assert back.is_(GroupState.STABLE) and back.generation_id == 1
    assert back.leader_id == "a" and back.protocol_name == "range"
    assert back.get("b").assignment == b"B" and back.static_member_id("ib") == "b"


def test_parse_subscription_topics():
    data = b"\x00\x01" + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x02bc" + b"\xff\xff\xff\xff"
    assert parse_subscription_topics(data) == ["a", "bc"]
    with pytest.raises(ValueError):
        parse_subscription_topics(b"\x00")
