# fastlog/server/check_processes.py — CheckProcesses: the checks of large produce batches
# (decompressing and walking every record: ReplicaManager.check_records) in worker
# processes of lower CPU priority.
#
# Owns: one ProcessPoolExecutor (spawn context: no fork of a broker with threads) of
# `processes` workers, made on first use, each lowering its own priority by NICE when it
# starts. A worker has its own interpreter, so its work never holds the broker's
# interpreter lock, and on a machine whose cores are all busy the kernel runs the
# request loop before it (a check thread of the broker's own, at the loop's
# priority, took a core's time slices from it: perf/large_produce_latency.py).
# What crosses: the address and length of the record bytes, which stay in the request
# frame (the handler holds it until the check answers); the worker copies them into its
# own memory with process_vm_readv (Linux), at its own priority, so the broker spends
# neither loop time nor its interpreter lock on them. Where the kernel refuses that read
# (a ptrace policy such as Yama's ptrace_scope >= 1; a buffer without an address), the
# bytes are copied out of the frame on the loop and pickled through the pool's pipe,
# with one log line the first time. Back come the batch headers, the CodecError or the
# rule's sentence (check_records' answers, all picklable).
# A worker dies with the broker: the kernel kills it when the thread that started it (the
# broker's loop) ends, even by SIGKILL (PR_SET_PDEATHSIG), so no worker outlives it.
# Failure: a pool that cannot start or breaks (a worker killed, by the OOM killer or an
# operator) is logged (rate-limited) and the check runs on the caller's thread pool
# instead; the next check makes a new pool.
# Called from: ReplicaManager.check_produce on the broker's loop (check); close() at
# shutdown, on the loop.
"""Large produce batches checked in niced worker processes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import errno
import logging
import multiprocessing
import os
import signal
from concurrent.futures.process import BrokenProcessPool

from fastlog.logs import RateLimitedLog

log = logging.getLogger("fastlog.server.check_processes")

# Added to a worker's nice value (0..19; a worker at 10 gets about a tenth of a core
# against a busy thread at 0).
NICE = 10
_PR_SET_PDEATHSIG = 1
# process_vm_readv's errors that mean "never in this process" (a ptrace policy, no such
# call), as against one read that failed
_READ_REFUSED = (errno.EPERM, errno.EACCES, errno.ENOSYS)


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class RemoteReadError(Exception):
    """A worker could not read the record bytes out of the broker's memory."""

    def __init__(self, err: int):
        super().__init__(err, f"process_vm_readv: {os.strerror(err)}")
        self.errno = err

    def __reduce__(self):
        # raised in a worker and rebuilt in the broker: by its one argument (the default
        # would pass both of args and break the pool)
        return (RemoteReadError, (self.errno,))


def _address_of(records) -> int | None:
    """The address of a writable contiguous buffer's first byte (a request frame's
    memoryview), or None (bytes, or an empty or strided view)."""
    if (type(records) is not memoryview or records.readonly or not records.c_contiguous
            or records.nbytes == 0):
        return None
    return ctypes.addressof(ctypes.c_char.from_buffer(records))


def _read_broker_memory(pid: int, address: int, length: int) -> bytearray:
    """length bytes at address in process pid, copied into a new buffer (in a worker)."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = bytearray(length)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    done = 0
    while done < length:
        local = _IoVec(base + done, length - done)
        remote = _IoVec(address + done, length - done)
        n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if n <= 0:
            raise RemoteReadError(ctypes.get_errno() or errno.EFAULT)
        done += n
    return buf


def _check_in_place(pid: int, address: int, length: int, fn, *args):
    """In a worker: fn over the record bytes read out of the broker's memory."""
    return fn(_read_broker_memory(pid, address, length), *args)


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when the thread that started it ends (Linux;
    elsewhere a no-op)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def _worker_start(broker_pid: int) -> None:
    """In each worker: die with the broker, lower its priority; Ctrl-C and SIGTERM are
    the broker's to handle (it closes the pool on shutdown)."""
    die_with_parent()
    if os.getppid() != broker_pid:   # the broker ended before the line above
        os._exit(0)
    try:
        os.nice(NICE)
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class CheckProcesses:
    """See the module comment."""

    def __init__(self, processes: int):
        self.processes = max(1, processes)
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._closed = False
        self._failures = RateLimitedLog(log)
        # False once the kernel refused a worker's read of the broker's memory
        self.read_in_place = True

    def _get_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.processes, mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_start, initargs=(os.getpid(),))
        return self._pool

    def _broken(self, exc: BaseException) -> None:
        self._failures.log(logging.WARNING, "the batch check processes failed (%s): "
                           "large batches are checked on the broker's threads until a new "
                           "pool starts", exc)
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    async def check(self, fallback: concurrent.futures.Executor, fn, records, *args):
        """fn(records' bytes, *args) in a worker process, or fn(records, *args) on
        `fallback` when the processes cannot run it. `records` must stay unchanged until
        this returns (a worker may read it in place)."""
        loop = asyncio.get_running_loop()
        if not self._closed:
            try:
                address = _address_of(records) if self.read_in_place else None
                if address is not None:
                    try:
                        return await asyncio.wrap_future(self._get_pool().submit(
                            _check_in_place, os.getpid(), address, len(records), fn, *args))
                    except RemoteReadError as exc:
                        if exc.errno in _READ_REFUSED:
                            self.read_in_place = False
                            log.warning("the batch check processes cannot read the broker's "
                                        "memory (%s): record bytes go to them through a "
                                        "pipe instead", exc.args[1])
                future = self._get_pool().submit(fn, bytes(records), *args)
                return await asyncio.wrap_future(future)
            except (BrokenProcessPool, OSError, RuntimeError) as exc:
                # RuntimeError: a pool shut down meanwhile, or one that cannot start a
                # process at this point
                if not self._closed:
                    self._broken(exc)
        return await loop.run_in_executor(fallback, fn, records, *args)

    def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
