"""fastlog.security.quota: KIP-55's precedence and the metric tags each level shares, the
rate over quota.window.num samples and Kafka's throttle time, validation of keys, values,
entities and DescribeClientQuotas filters (pure functions, a clock the tests move)."""

from __future__ import annotations

import pytest

from fastlog.security.quota import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotas,
    QuotaError,
    Rate,
    check_quota_value,
    entity_from_parts,
    entity_parts,
    match_entities,
    principal_name,
)


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


# the 8 levels, most specific first, each with its own producer rate
LEVELS = [
    (("alice", "app"), 1),
    (("alice", DEFAULT), 2),
    (("alice", None), 3),
    ((DEFAULT, "app"), 4),
    ((DEFAULT, DEFAULT), 5),
    ((DEFAULT, None), 6),
    ((None, "app"), 7),
    ((None, DEFAULT), 8),
]


def test_precedence_follows_kip55_level_by_level():
    q = ClientQuotas()
    configs = {entity: {PRODUCER_BYTE_RATE: str(rate * 1000)} for entity, rate in LEVELS}
    for entity, rate in LEVELS:
        q.replace_all(configs)
        assert q.quota(PRODUCER_BYTE_RATE, "alice", "app")[0] == rate * 1000
        del configs[entity]   # the next level takes over
    q.replace_all(configs)
    assert q.quota(PRODUCER_BYTE_RATE, "alice", "app") is None
    assert not q.active


def test_metric_tags_say_who_shares_a_quota():
    q = ClientQuotas()
    q.replace_all({("alice", None): {PRODUCER_BYTE_RATE: "100"},
                   (None, DEFAULT): {PRODUCER_BYTE_RATE: "200"},
                   (DEFAULT, DEFAULT): {CONSUMER_BYTE_RATE: "300"}})
    # a user quota is shared by all the user's clients
    assert q.quota(PRODUCER_BYTE_RATE, "alice", "a")[1] == ("alice", "")
    assert q.quota(PRODUCER_BYTE_RATE, "alice", "b")[1] == ("alice", "")
    # a default client-id quota is per client id
    assert q.quota(PRODUCER_BYTE_RATE, "bob", "x") == (200.0, ("", "x"))
    # each quota key is looked up on its own
    assert q.quota(CONSUMER_BYTE_RATE, "alice", "a") == (300.0, ("alice", "a"))


def test_stored_config_of_a_user_keeps_only_quota_keys():
    q = ClientQuotas()
    q.replace_all({("alice", None): {"SCRAM-SHA-256": "salt=..,stored_key=..",
                                     PRODUCER_BYTE_RATE: "1024", "consumer_byte_rate": "x"}})
    assert q.entities() == {("alice", None): {PRODUCER_BYTE_RATE: 1024.0}}
    q.replace_all({("alice", None): {"SCRAM-SHA-256": "salt=.."}})
    assert not q.active


def test_rate_spans_at_least_the_full_windows_but_one():
    r = Rate(11, 1.0)
    r.record(10_000, 100.0)
    # one burst is judged over 10 windows, not over the instant it took
    assert r.measure(100.0) == pytest.approx(1000.0)
    assert r.window_size(100.5) == pytest.approx(10.0)
    # samples older than the window are forgotten
    assert r.measure(112.0) == 0.0


def test_throttle_time_brings_the_rate_back_to_the_quota():
    clock = Clock(500.0)
    q = ClientQuotas(samples=11, window_s=1.0, clock=clock)
    q.replace_all({(None, DEFAULT): {PRODUCER_BYTE_RATE: "1000"}})
    assert q.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "c", 9000) == 0   # 900 B/s: within
    ms = q.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "c", 6000)           # 1500 B/s over 10 s
    # Kafka: (rate - quota) / quota * window = 0.5 * 10 s
    assert ms == 5000
    # another client id has its own sensor
    assert q.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "d", 100) == 0
    assert q.throttle_ms_total == {(PRODUCER_BYTE_RATE, "ANONYMOUS", "c"): 5000}
    # bounded by the whole measured window
    assert q.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "c", 10**9) == 11_000


def test_request_percentage_is_handler_time_per_window():
    clock = Clock()
    q = ClientQuotas(samples=2, window_s=1.0, clock=clock)
    q.replace_all({("bob", None): {REQUEST_PERCENTAGE: "10"}})   # 100 ms per second
    assert q.record(REQUEST_PERCENTAGE, "bob", "x", 50.0) == 0
    assert q.record(REQUEST_PERCENTAGE, "bob", "x", 100.0) > 0
    assert q.record(REQUEST_PERCENTAGE, "carol", "x", 10_000.0) == 0   # no quota


@pytest.mark.parametrize("key,value,problem", [
    (PRODUCER_BYTE_RATE, 1024.0, None),
    (REQUEST_PERCENTAGE, 12.5, None),
    (PRODUCER_BYTE_RATE, 10.5, "whole number"),
    (CONSUMER_BYTE_RATE, 0.0, "positive"),
    (CONSUMER_BYTE_RATE, -5.0, "positive"),
    (REQUEST_PERCENTAGE, float("nan"), "number"),
    ("connection_creation_rate", 10.0, "not supported"),
    ("retention.ms", 10.0, "not a client quota"),
])
def test_values_are_checked_as_kafka_types_them(key, value, problem):
    got = check_quota_value(key, value)
    if problem is None:
        assert got is None
    else:
        assert problem in got


def test_entities_from_the_wire_and_back():
    assert entity_from_parts([("user", "alice"), ("client-id", None)]) == ("alice", DEFAULT)
    assert entity_from_parts([("client-id", "c")]) == (None, "c")
    assert entity_parts(("alice", DEFAULT)) == [("user", "alice"), ("client-id", None)]
    for parts, words in [([], "no user"), ([("user", "a"), ("user", "b")], "Duplicate"),
                         ([("ip", "1.2.3.4")], "IP quotas"), ([("group", "g")], "Unknown"),
                         ([("user", "")], "empty")]:
        with pytest.raises(QuotaError, match=words):
            entity_from_parts(parts)


def test_principal_names():
    assert principal_name("User:alice") == "alice"
    assert principal_name(None) == "ANONYMOUS"
    assert principal_name("User:CN=a,O=b") == "CN=a,O=b"


ENTITIES = [("alice", None), ("alice", "app"), ("alice", DEFAULT), (DEFAULT, None),
            (None, "app"), (None, DEFAULT), ("bob", None)]


@pytest.mark.parametrize("components,strict,expected", [
    ([("user", MATCH_EXACT, "alice")], False, [("alice", None), ("alice", "app"), ("alice", DEFAULT)]),
    ([("user", MATCH_EXACT, "alice")], True, [("alice", None)]),
    ([("user", MATCH_DEFAULT, None)], True, [(DEFAULT, None)]),
    ([("user", MATCH_SPECIFIED, None)], True, [("alice", None), (DEFAULT, None), ("bob", None)]),
    ([("client-id", MATCH_SPECIFIED, None)], True, [(None, "app"), (None, DEFAULT)]),
    ([("user", MATCH_EXACT, "alice"), ("client-id", MATCH_DEFAULT, None)], True, [("alice", DEFAULT)]),
    ([], False, ENTITIES),
    ([], True, []),
])
def test_describe_filters(components, strict, expected):
    assert match_entities(ENTITIES, components, strict) == expected


def test_describe_filters_kafka_refuses():
    for components, words in [([("user", MATCH_EXACT, None)], "needs a name"),
                              ([("user", MATCH_DEFAULT, "x")], "names no entity"),
                              ([("user", 7, None)], "Unknown match type"),
                              ([("user", 1, None), ("user", 2, None)], "Duplicate"),
                              ([("topic", 2, None)], "not supported")]:
        with pytest.raises(QuotaError, match=words):
            match_entities(ENTITIES, components, False)
