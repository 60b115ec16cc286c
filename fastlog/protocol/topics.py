# fastlog/protocol/topics.py: Kafka's rules for topic names — which names are legal and
# which ones Kafka reserves for its own coordinators. One rule, shared by the broker
# (CreateTopics, Metadata auto-creation: the reason goes back in the response), the
# ZooKeeper layer (a name is checked before it becomes a znode path), and the command line
# (refused before a request is sent). Pure functions, callable from any thread.
"""Kafka's topic-name rule and internal topic names."""

from __future__ import annotations

import re

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# Kafka's Topic.MAX_NAME_LENGTH and legal characters.
MAX_TOPIC_NAME = 249
_LEGAL_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")


def topic_name_problem(name: str) -> str | None:
    """Why `name` is not a legal topic name (Kafka's Topic.validate wording), or None."""
    if not isinstance(name, str):
        return f"Topic name must be a string, not {type(name).__name__}"
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME:
        return (f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} "
                f"characters, topic name: {name}")
    if not _LEGAL_CHARS.match(name):
        return (f'Topic name "{name}" is illegal, it contains a character other than '
                "ASCII alphanumerics, '.', '_' and '-'")
    return None


def validate_topic(name: str) -> str:
    """`name` if it is a legal topic name, else ValueError with the reason."""
    problem = topic_name_problem(name)
    if problem is not None:
        raise ValueError(problem)
    return name
