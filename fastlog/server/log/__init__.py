# fastlog/server/log — storage: partitions as segmented logs on disk (Kafka's layout and
# formats). Layers below: fastlog._codec (batches), fastlog._index (mmap indexes). Knows
# nothing of the network. Threading model: see log.py and log_manager.py.
"""Storage engine: Log, LogSegment, LogManager, LogConfig and checkpoints."""

from .checkpoint import LeaderEpochFileCache, OffsetCheckpointFile
from .config import LogConfig, LogConfigError
from .errors import (
    CorruptSegmentError,
    KafkaStorageError,
    LogError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from .log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchDataInfo,
    Log,
    LogAppendInfo,
)
from .log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from .scheduler import InlineScheduler, IoWorker
from .segment import LogSegment
from .verifier import LogVerifier

__all__ = [
    "CLEAN_SHUTDOWN_FILE", "CorruptSegmentError", "LogManager", "LogVerifier",
    "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "FetchDataInfo",
    "InlineScheduler", "IoWorker", "KafkaStorageError", "LeaderEpochFileCache", "Log",
    "LogAppendInfo", "LogConfig", "LogConfigError", "LogError", "LogSegment",
    "OffsetCheckpointFile", "OffsetOutOfRangeError", "OffsetsOutOfOrderError",
    "RecordBatchTooLargeError", "UnexpectedAppendOffsetError",
]
