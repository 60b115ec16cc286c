"""Kafka's topic-name rule (fastlog/protocol/topics.py), shared by broker, zk and CLI."""

import pytest

from fastlog.protocol.topics import MAX_TOPIC_NAME, topic_name_problem, validate_topic


def test_legal_names_pass():
    for good in ("orders.v1_x-2", "a", "x" * MAX_TOPIC_NAME, "__consumer_offsets"):
        assert topic_name_problem(good) is None
        assert validate_topic(good) == good


def test_illegal_names_say_why_in_kafkas_words():
    assert topic_name_problem("") == "Topic name is illegal, it can't be empty"
    assert topic_name_problem(".") == 'Topic name cannot be "." or ".."'
    assert topic_name_problem("..") == 'Topic name cannot be "." or ".."'
    assert topic_name_problem("x" * 250) == (
        "Topic name is illegal, it can't be longer than 249 characters, topic name: " + "x" * 250)
    assert topic_name_problem("a/b") == (
        'Topic name "a/b" is illegal, it contains a character other than '
        "ASCII alphanumerics, '.', '_' and '-'")
    assert topic_name_problem(None) is not None


def test_validate_topic_raises_value_error_with_the_reason():
    for bad in ("", ".", "..", "a/b", "x" * 250, "spa ce", "é"):
        with pytest.raises(ValueError) as e:
            validate_topic(bad)
        assert str(e.value) == topic_name_problem(bad)
