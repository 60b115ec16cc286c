# fastlog/client/errors.py: the exceptions fastlog's client raises.
#
# Every failure a caller can act on is a FastlogError whose str() is one readable sentence,
# so the CLI can print it as is. Kafka error codes from responses become KafkaError with
# the Kafka name (looked up in fastlog.protocol when it knows the code). Any thread may
# raise or inspect these.

from __future__ import annotations

from fastlog.protocol import Errors

# Error codes the client itself reacts to, as plain ints (Kafka's numbering).
OFFSET_OUT_OF_RANGE = int(Errors.OFFSET_OUT_OF_RANGE)
UNKNOWN_TOPIC_OR_PARTITION = int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
LEADER_NOT_AVAILABLE = int(Errors.LEADER_NOT_AVAILABLE)
NOT_LEADER_OR_FOLLOWER = int(Errors.NOT_LEADER_OR_FOLLOWER)
COORDINATOR_LOAD_IN_PROGRESS = int(Errors.COORDINATOR_LOAD_IN_PROGRESS)
COORDINATOR_NOT_AVAILABLE = int(Errors.COORDINATOR_NOT_AVAILABLE)
NOT_COORDINATOR = int(Errors.NOT_COORDINATOR)
UNSUPPORTED_VERSION = int(Errors.UNSUPPORTED_VERSION)
TOPIC_ALREADY_EXISTS = int(Errors.TOPIC_ALREADY_EXISTS)
NOT_CONTROLLER = int(Errors.NOT_CONTROLLER)
OUT_OF_ORDER_SEQUENCE_NUMBER = int(Errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
DUPLICATE_SEQUENCE_NUMBER = int(Errors.DUPLICATE_SEQUENCE_NUMBER)
PRODUCER_FENCED = int(Errors.PRODUCER_FENCED)
INVALID_PRODUCER_EPOCH = int(Errors.INVALID_PRODUCER_EPOCH)
OPERATION_NOT_ATTEMPTED = int(Errors.OPERATION_NOT_ATTEMPTED)

# Codes that mean "our idea of who leads this partition is stale": refresh, then retry.
STALE_METADATA = frozenset(int(e) for e in (
    Errors.LEADER_NOT_AVAILABLE, Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.FENCED_LEADER_EPOCH,
    Errors.UNKNOWN_LEADER_EPOCH, Errors.KAFKA_STORAGE_ERROR, Errors.NOT_CONTROLLER,
))


def error_name(code: int) -> str:
    """Kafka's name for an error code, e.g. 3 -> 'UNKNOWN_TOPIC_OR_PARTITION'."""
    try:
        return Errors(code).name
    except ValueError:
        return f"ERROR_{code}"


class FastlogError(Exception):
    """Base of every error the client raises on purpose; str() is one sentence."""


class BrokerUnavailable(FastlogError):
    """No connection could be made (refused, unreachable, timed out, closed mid-request)."""


class ClientTimeout(FastlogError):
    """A request or an operation did not complete within its time budget."""


class ProtocolMismatch(FastlogError):
    """The broker speaks no version of an API that the client needs, or sent bad bytes."""


class KafkaError(FastlogError):
    """A broker answered with a Kafka error code."""

    def __init__(self, code: int, context: str = "", message: str | None = None):
        self.code = code
        self.name = error_name(code)
        self.context = context
        self.broker_message = message
        detail = f"{self.name}: {message}" if message else self.name
        super().__init__(f"{context} ({detail})" if context else detail)

    @property
    def retriable(self) -> bool:
        """Java's notion: the same request may succeed later (fastlog.protocol's table)."""
        return Errors.of(self.code).retriable


class UnknownTopic(KafkaError):
    """The topic (or partition) does not exist on the cluster."""

    def __init__(self, topic: str, partition: int | None = None):
        where = f"topic '{topic}'" if partition is None else f"partition {topic}-{partition}"
        super().__init__(UNKNOWN_TOPIC_OR_PARTITION, f"{where} does not exist")
        self.topic = topic

    def __str__(self) -> str:
        return self.context

    @property
    def retriable(self) -> bool:
        # Raised when fresh metadata says the topic is absent: retrying will not help.
        return False


def raise_for(code: int, context: str = "", message: str | None = None) -> None:
    """Raise KafkaError for a non-zero code; do nothing for 0."""
    if code:
        raise KafkaError(code, context, message)
