# fastlog/server/log/errors.py — the exceptions storage raises to its callers (the replica
# manager and request handlers map each to a Kafka error code). Any thread.
"""Storage errors."""

class LogError(Exception):
    """Base class of storage errors."""


class OffsetOutOfRangeError(LogError):
    """A read or request for an offset outside [log_start_offset, log_end_offset]
    (Kafka's OFFSET_OUT_OF_RANGE)."""


class RecordBatchTooLargeError(LogError):
    """A batch larger than the topic's max.message.bytes (Kafka's MESSAGE_TOO_LARGE)."""


class OffsetsOutOfOrderError(LogError):
    """A replicated append whose batches do not carry increasing offsets."""


class UnexpectedAppendOffsetError(LogError):
    """A replicated append that starts below the log end offset."""


class KafkaStorageError(LogError):
    """A log dir or file that cannot be used (Kafka's KAFKA_STORAGE_ERROR)."""


class CorruptSegmentError(KafkaStorageError):
    """A read that starts in a range of a segment found corrupt (see verifier.py): never
    served as if good; a fetch answers KAFKA_STORAGE_ERROR for the partition."""
