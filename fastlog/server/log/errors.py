# fastlog/server/log/errors.py — the exceptions storage raises to its callers (the replica
# manager and request handlers map each to a Kafka error code), and the rate-limited log
# line storage writes for a failure that may repeat (a full disk, a corrupt batch read
# again and again). Any thread.
"""Storage errors."""

import threading
import time

# A repeating storage failure is logged at most once per key in this many seconds.
REPORT_INTERVAL_S = 60.0
_reported: dict = {}
_report_lock = threading.Lock()


def report_limited(logger, level: int, key, msg: str, *args) -> bool:
    """Log `msg % args` unless the same `key` was logged in the last REPORT_INTERVAL_S;
    the next line says how many were left out. True if logged."""
    now = time.monotonic()
    with _report_lock:
        last, skipped = _reported.get(key, (None, 0))
        if last is not None and now - last < REPORT_INTERVAL_S:
            _reported[key] = (last, skipped + 1)
            return False
        _reported[key] = (now, 0)
        if len(_reported) > 4096:  # keys name files: never an unbounded dict
            _reported.clear()
    if skipped:
        msg += f" (and {skipped} more like it since)"
    logger.log(level, msg, *args)
    return True


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
