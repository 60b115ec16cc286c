# fastlog/server/log/checkpoint.py — small text files storage keeps beside the data.
#
# Formats (Kafka's, so Kafka's tools read ours and vice versa):
#   offset checkpoints (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
#   `replication-offset-checkpoint`, one per log dir):  "0\n<count>\n<topic> <partition> <offset>\n..."
#   `leader-epoch-checkpoint` (one per partition dir):    "0\n<count>\n<epoch> <start offset>\n..."
#   `meta.properties` (one per log dir): Java properties, version/broker.id/cluster.id.
# Every write is atomic (fastlog.fileio.atomic_write); a crash leaves either the old or the
# new file, and at worst a stale `.tmp` that the next write replaces and readers ignore. Callers: LogManager (checkpoints; from its
# background worker) and Log (its epoch cache; owner thread). Files are only touched here,
# but for the first leader-epoch-checkpoint of new partitions, which LogManager.create_logs
# writes for many at once (fileio.atomic_write_many) from content().
"""Atomic, Kafka-format checkpoint files and meta.properties."""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Iterable, Mapping

from fastlog.fileio import atomic_write
from fastlog.logs import report_limited

_logger = logging.getLogger(__name__)

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
META_PROPERTIES = "meta.properties"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class CorruptCheckpointError(ValueError):
    """A checkpoint file that does not parse; the message says which file and line."""


def _read_entries(path: str, fields: int) -> list[list[str]] | None:
    """Parsed entry lines of a version-0 checkpoint, or None when the file is absent."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return None
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{path}: missing version or count line")
    try:
        version, count = int(lines[0]), int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(f"{path}: bad version/count line") from None
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"{path}: unknown version {version}")
    if count != len(lines) - 2:
        raise CorruptCheckpointError(f"{path}: count {count} but {len(lines) - 2} entries")
    out = []
    for n, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if len(parts) != fields:
            raise CorruptCheckpointError(f"{path}: line {n} has {len(parts)} fields: {line!r}")
        out.append(parts)
    return out


class OffsetCheckpointFile:
    """{(topic, partition): offset} in one log dir's checkpoint file."""

    def __init__(self, path: str):
        self.path = path

    def write(self, offsets: Mapping[tuple[str, int], int], sync: bool = True) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        atomic_write(self.path, ("\n".join(lines) + "\n").encode(), sync)

    def read(self) -> dict[tuple[str, int], int]:
        entries = _read_entries(self.path, 3)
        if entries is None:
            return {}
        try:
            return {(t, int(p)): int(o) for t, p, o in entries}
        except ValueError:
            raise CorruptCheckpointError(f"{self.path}: non-numeric partition/offset") from None


class LeaderEpochFileCache:
    """Which leader epoch began at which offset, for one partition, persisted to its
    `leader-epoch-checkpoint`. Epochs and start offsets both strictly increase. Owner
    thread only; every change rewrites the (tiny) file at once, as Kafka does."""

    def __init__(self, path: str | None, read: bool = True):
        """read=False: a new partition's cache, whose file is not there yet."""
        self.path = path
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        if path is not None and read:
            entries = _read_entries(path, 2)
            for epoch, offset in entries or ():
                self._epochs.append(int(epoch))
                self._offsets.append(int(offset))

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, write: bool = True) -> None:
        """Record that `epoch` starts at `start_offset` (no-op if already known).
        write=False: the caller writes the file (content()) before anyone relies on it."""
        if epoch < 0:
            return
        if self._epochs and self._epochs[-1] == epoch and self._offsets[-1] <= start_offset:
            return
        # A new leader may rewrite history: drop entries that conflict with this one.
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        if write:
            self.flush()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= requested, the offset where the next epoch starts) as in
        OffsetsForLeaderEpoch; (-1, -1) when unknown."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    def epoch_for_offset(self, offset: int) -> int:
        i = bisect.bisect_right(self._offsets, offset)
        return self._epochs[i - 1] if i else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int, loading: bool = False) -> None:
        """Forget epochs that start at or after end_offset (log truncated to it).
        loading (a log being loaded): a cache left empty is not written (an empty log's
        first epoch, that the next assign writes again whole; each load truncates the
        file's entries again), so a restart rewrites no fresh partition's file."""
        keep = bisect.bisect_left(self._offsets, end_offset)
        if keep < len(self._offsets):
            del self._epochs[keep:], self._offsets[keep:]
            if not (loading and keep == 0):
                self._flush_truncation()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly before start_offset; the one covering it now starts there."""
        i = bisect.bisect_right(self._offsets, start_offset)
        if i == 0:
            return
        if i - 1 == 0 and self._offsets[0] == start_offset:
            return
        del self._epochs[: i - 1], self._offsets[: i - 1]
        self._offsets[0] = start_offset
        self._flush_truncation()

    def clear(self) -> None:
        self._epochs.clear()
        self._offsets.clear()
        self._flush_truncation()

    def _flush_truncation(self) -> None:
        # A truncation must not fail on a full disk (retention and DeleteRecords are how
        # space comes back): the file may keep entries for a while, which is harmless, as
        # loading truncates the cache to the log's start and end offsets again. The next
        # change rewrites the whole file.
        try:
            self.flush()
        except OSError as e:
            report_limited(_logger, logging.ERROR, ("epoch-checkpoint", self.path),
                           "cannot rewrite %s (kept in memory, rewritten at the next "
                           "change): %s", self.path, e)

    def content(self) -> bytes:
        """The file's bytes for the entries as they are now."""
        lines = [str(CHECKPOINT_VERSION), str(len(self._epochs))]
        lines += [f"{e} {o}" for e, o in zip(self._epochs, self._offsets, strict=True)]
        return ("\n".join(lines) + "\n").encode()

    def flush(self) -> None:
        if self.path is None:
            return
        atomic_write(self.path, self.content())


def read_meta_properties(log_dir: str) -> dict[str, str] | None:
    """The dir's meta.properties as a dict, or None when absent."""
    path = os.path.join(log_dir, META_PROPERTIES)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise CorruptCheckpointError(f"{path}: line without '=': {line!r}")
        props[key.strip()] = value.strip()
    return props


def write_meta_properties(log_dir: str, props: Mapping[str, object]) -> None:
    lines: Iterable[str] = ["#fastlog meta.properties"] + [f"{k}={v}" for k, v in props.items()]
    atomic_write(os.path.join(log_dir, META_PROPERTIES), ("\n".join(lines) + "\n").encode())
