# fastlog/client/errors.py: the exceptions fastlog's client raises.
#
# Every failure a caller can act on is a FastlogError whose str() is one readable sentence,
# so the CLI can print it as is. Kafka error codes from responses become KafkaError with
# the Kafka name (looked up in fastlog.protocol when it knows the code). Any thread may
# raise or inspect these.

from __future__ import annotations

# Error codes the client itself reacts to (Kafka's numbering).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NETWORK_EXCEPTION = 13
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
TOPIC_ALREADY_EXISTS = 36
UNSUPPORTED_VERSION = 35
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
KAFKA_STORAGE_ERROR = 56
UNKNOWN_PRODUCER_ID = 59

# Codes after which the same request may succeed once metadata is refreshed or time passes.
RETRIABLE = frozenset({
    LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NETWORK_EXCEPTION,
    COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
    NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, KAFKA_STORAGE_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
})
# Codes that mean "our idea of who leads this partition is stale".
STALE_METADATA = frozenset({
    LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
    FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, KAFKA_STORAGE_ERROR,
})

# Names for the codes we may show before fastlog.protocol is importable.
_FALLBACK_NAMES = {
    -1: "UNKNOWN_SERVER_ERROR", 1: "OFFSET_OUT_OF_RANGE", 2: "CORRUPT_MESSAGE",
    3: "UNKNOWN_TOPIC_OR_PARTITION", 4: "INVALID_FETCH_SIZE", 5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT", 10: "MESSAGE_TOO_LARGE",
    13: "NETWORK_EXCEPTION", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR",
    17: "INVALID_TOPIC_EXCEPTION", 19: "NOT_ENOUGH_REPLICAS", 29: "TOPIC_AUTHORIZATION_FAILED",
    35: "UNSUPPORTED_VERSION", 36: "TOPIC_ALREADY_EXISTS", 37: "INVALID_PARTITIONS",
    38: "INVALID_REPLICATION_FACTOR", 40: "INVALID_CONFIG", 41: "NOT_CONTROLLER",
    42: "INVALID_REQUEST", 43: "UNSUPPORTED_FOR_MESSAGE_FORMAT", 44: "POLICY_VIOLATION",
    45: "OUT_OF_ORDER_SEQUENCE_NUMBER", 46: "DUPLICATE_SEQUENCE_NUMBER",
    47: "INVALID_PRODUCER_EPOCH", 59: "UNKNOWN_PRODUCER_ID", 69: "GROUP_ID_NOT_FOUND",
    74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH", 76: "UNSUPPORTED_COMPRESSION_TYPE",
    87: "INVALID_RECORD",
}


def error_name(code: int) -> str:
    """Kafka's name for an error code, e.g. 3 -> 'UNKNOWN_TOPIC_OR_PARTITION'."""
    try:
        from fastlog.protocol import Errors  # late: the protocol package may be partial
    except Exception:  # noqa: BLE001 - any import trouble falls back to our table
        Errors = None
    if Errors is not None:
        try:
            return Errors(code).name
        except Exception:  # noqa: BLE001 - unknown code or a differently shaped table
            pass
    return _FALLBACK_NAMES.get(code, f"ERROR_{code}")


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
        return self.code in RETRIABLE


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
