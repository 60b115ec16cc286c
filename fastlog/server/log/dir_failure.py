# fastlog/server/log/dir_failure.py — LogDirFailureChannel: the log dirs that have failed
# (Kafka's LogDirFailureChannel).
#
# An I/O error in a log dir (EIO, EROFS, ... from an append, roll, flush, index write,
# checkpoint write or a background read) takes the whole dir offline, as Kafka's JBOD
# handling does. A full disk is NOT a failed dir: ENOSPC (and the process-wide EMFILE /
# ENFILE, which say nothing about a disk) only refuse the write, and the dir stays online
# (see log_manager.py's space reserve). The first failure of a dir logs one ERROR line
# naming the dir and the error and calls the listeners (the broker, which hands the dir
# to its loop: ReplicaManager.handle_log_dir_failure, then LogManager's); a dir already
# offline only gets a rate-limited line.
# Any thread may report: the loop thread (appends, rolls), the I/O worker (flushes,
# checkpoints), the cleaner and the verifier. `offline` changes at once, so background
# work can skip a failed dir before the loop has handled it; listeners run on the thread
# that reported first.
"""Failed log dirs: report an I/O error once, then keep away from the dir."""

from __future__ import annotations

import errno
import logging
import threading

from fastlog.logs import report_limited

logger = logging.getLogger(__name__)

# Errors that refuse one write without saying the dir is broken.
NOT_DIR_FAILURES = frozenset({errno.ENOSPC, errno.EMFILE, errno.ENFILE})


def is_dir_failure(exc: BaseException) -> bool:
    """True for an OSError that takes a log dir offline (not a full disk)."""
    return isinstance(exc, OSError) and exc.errno not in NOT_DIR_FAILURES


class LogDirFailureChannel:
    """The set of offline log dirs and who to tell when one fails (see module comment)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._offline: frozenset[str] = frozenset()
        self._listeners: list = []

    @property
    def offline(self) -> frozenset[str]:
        return self._offline

    def is_offline(self, log_dir: str) -> bool:
        return log_dir in self._offline

    def add_listener(self, fn) -> None:
        """fn(log_dir) is called once per failed dir, on the reporting thread."""
        self._listeners.append(fn)

    def report(self, log_dir: str, what: str, exc: BaseException) -> bool:
        """`what` (e.g. "t-0: append") failed in `log_dir` with `exc`. A dir failure takes
        the dir offline (True); anything else (a full disk) is left to the caller (False)."""
        if not is_dir_failure(exc):
            return False
        with self._lock:
            first = log_dir not in self._offline
            if first:
                self._offline = self._offline | {log_dir}
        if not first:
            report_limited(logger, logging.ERROR, ("offline-dir", log_dir),
                           "%s: offline log dir still failing (%s: %s)", log_dir, what, exc)
            return True
        logger.error("%s: log dir failed (%s: %s): taking it offline; its partitions answer "
                     "KAFKA_STORAGE_ERROR until the broker restarts with the dir readable",
                     log_dir, what, exc.strerror or exc)
        for fn in list(self._listeners):
            try:
                fn(log_dir)
            except Exception:  # noqa: BLE001 - one listener must not stop the others
                logger.exception("%s: log dir failure listener failed", log_dir)
        return True
