"""PartitionedCoordinator: what the group and the transaction coordinators share.

Each keeps its state in the partitions of an internal topic (``__consumer_offsets``,
``__transaction_state``) and serves the keys of the partitions this broker leads: on one
node all of them, in cluster mode those the replica manager reports through
``on_elected`` / ``on_resigned`` (Kafka's onElection / onResignation). This class owns
that bookkeeping: the owned partitions, the ones still loading (their keys answer
COORDINATOR_LOAD_IN_PROGRESS), an election counter per partition (a load finishes only if
its own election is still the current one, so a load that leadership moved under is
dropped), the background tasks, and one INFO line per batch of loads. Subclasses give
``TOPIC``, ``LOADED`` (what a load counts, for that line), ``load_partition`` and
``_forget_partition`` (drop the keys of a partition no longer led here). It also keeps how
long each partition's load took, for Kafka's ``partition-load-time-max`` / ``-avg``
(``partition_load_time``, read by the metrics scrape on the HTTP thread).

Event-loop thread only, like the coordinators.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import time
from typing import Any

from fastlog._net import _Resumed

log = logging.getLogger(__name__)

# Kafka's sensors sample over metrics.num.samples (2) windows of metrics.sample.window.ms
# (30 s): a load counts towards partition-load-time-max/avg for up to a minute.
LOAD_TIME_WINDOW_S = 60.0


class PartitionedCoordinator:
    TOPIC = ""
    LOADED = ""

    def __init__(self, broker: Any):
        self.broker = broker
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        # Bumped at every election and resignation: a load finishes only if its own
        # election is still the current one.
        self._elections: dict[int, int] = {}
        self.active = False
        self._tasks: set[asyncio.Task] = set()
        # (wall time the load ended, ms it took) of recent partition loads
        self._load_times: collections.deque[tuple[float, float]] = collections.deque(maxlen=256)

    # ---------------------------------------------------------------- subclasses
    async def load_partition(self, partition: int, election: int | None = None) -> int | None:
        """Install the keys of one partition from its records; how many, or None when
        leadership moved during the load."""
        raise NotImplementedError

    def _forget_partition(self, partition: int) -> None:
        """Drop the keys of a partition this broker no longer leads."""

    def partition_load_time(self, now: float | None = None) -> tuple[float, float]:
        """(max, avg) ms of the partition loads that ended in the last LOAD_TIME_WINDOW_S
        seconds; NaN for both when there was none, as Kafka's sensors answer. Any thread
        (the deque is copied in one step)."""
        now = time.time() if now is None else now
        recent = [ms for ended, ms in list(self._load_times)
                  if now - ended <= LOAD_TIME_WINDOW_S]
        if not recent:
            return math.nan, math.nan
        return max(recent), sum(recent) / len(recent)

    # ---------------------------------------------------------------- lifecycle
    def _own_led_partitions(self, load: bool) -> None:
        """Start serving: own every partition led here and load them in the background."""
        self.active = True
        partitions = [p for p in range(self.num_partitions) if self._leads(p)]
        self.owned.update(partitions)
        if load:
            self._start_loading(partitions)

    async def _stop(self) -> None:
        """Stop serving: cancel the background tasks and resign every partition."""
        self.active = False
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for p in list(self.owned):
            self.on_resigned(p)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _start(self, coro) -> asyncio.Task | None:
        """Background work started eagerly: ``coro`` runs now, up to its first real
        suspension, and only what is left then goes to a task (_spawn), as the socket
        server starts handlers (_net._Resumed). Work that never waits (a transaction's
        markers and Complete* on one node) costs no task; an exception it raises before
        suspending is logged, as a task's would be."""
        try:
            first = coro.send(None)
        except StopIteration:
            return None
        except Exception:
            log.exception("%s: background work failed", self.TOPIC)
            return None
        return self._spawn(_Resumed(coro, first))

    def _leads(self, partition: int) -> bool:
        """Whether this broker leads the partition (always, on one node)."""
        rm = getattr(self.broker, "replica_manager", None)
        if rm is None or getattr(self.broker, "cluster", None) is None:
            return True
        fn = getattr(rm, "is_leader", None)
        try:
            if fn is not None:
                return bool(fn(self.TOPIC, partition))
            p = rm.get_partition(self.TOPIC, partition)
            if p is None:
                return False
            leader = getattr(p, "is_leader", True)
            return bool(leader() if callable(leader) else leader)
        except Exception:  # noqa: BLE001 - unknown partition: not ours
            return False

    # ---------------------------------------------------------------- leadership
    def on_elected(self, partition: int) -> None:
        if not self.active or partition in self.owned:
            return
        self._elections[partition] = self._elections.get(partition, 0) + 1
        self.owned.add(partition)
        self._start_loading([partition])

    def on_resigned(self, partition: int) -> None:
        self._elections[partition] = self._elections.get(partition, 0) + 1
        self.owned.discard(partition)
        self.loading.discard(partition)
        self._forget_partition(partition)

    def _start_loading(self, partitions: list[int]) -> None:
        """Mark the partitions loading and load them in the background, each under the
        election current now (a later resignation or election voids that load)."""
        self.loading.update(partitions)
        self._spawn(self._load_partitions({p: self._elections.get(p, 0) for p in partitions}))

    async def _load_partitions(self, elections: dict[int, int]) -> None:
        """Load each partition in turn; one INFO line for the lot (each partition's own
        line is DEBUG: a fresh broker would otherwise print one per partition, 50)."""
        started = time.monotonic()
        loaded = keys = 0
        for p, election in elections.items():
            began = time.monotonic()
            try:
                installed = await self.load_partition(p, election)
            except Exception:
                log.exception("loading %s-%d failed", self.TOPIC, p)
            else:
                if installed is not None:
                    loaded += 1
                    keys += installed
                    self._load_times.append((time.time(),
                                             (time.monotonic() - began) * 1000.0))
            finally:
                if self._elections.get(p, 0) == election:   # else a newer load owns it
                    self.loading.discard(p)
        if loaded:
            log.info("loaded %d %s partition%s (%d %s%s) in %.1f s", loaded, self.TOPIC,
                     "" if loaded == 1 else "s", keys, self.LOADED, "" if keys == 1 else "s",
                     time.monotonic() - started)
