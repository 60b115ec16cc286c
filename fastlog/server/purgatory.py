# fastlog/server/purgatory.py — requests parked until something changes, or time is up.
#
# Owns: the watcher lists of delayed operations keyed by (topic, partition). A delayed
# fetch parks on the partitions it reads and is woken by an append (or a high-watermark
# move, a deletion); a delayed produce (acks=all in cluster mode) will park on the
# partition until its followers catch up. Waking is edge-triggered: the woken request
# re-checks its own completion condition (Kafka's tryComplete) and parks again if needed.
# Called from: the broker's asyncio API loop only (futures belong to that loop).
"""Delayed operations (fetch, produce) on the asyncio loop."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable


class Purgatory:
    def __init__(self, name: str):
        self.name = name
        # {key: parked futures}; empty when nothing is parked, so the produce path tests
        # it before a wake (most appends have nobody to wake)
        self.watchers: dict[Hashable, set[asyncio.Future]] = {}

    def __len__(self) -> int:
        return sum(len(w) for w in self.watchers.values())

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> bool:
        """Park until one of `keys` is completed via `check_and_complete`, or `timeout`
        seconds pass. Returns True when woken, False on timeout."""
        keys = list(keys)
        if timeout <= 0:
            return False
        fut = asyncio.get_running_loop().create_future()
        for k in keys:
            self.watchers.setdefault(k, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for k in keys:
                ws = self.watchers.get(k)
                if ws is not None:
                    ws.discard(fut)
                    if not ws:
                        del self.watchers[k]

    def check_and_complete(self, key: Hashable) -> int:
        """Wake every operation watching `key`; returns how many were woken."""
        ws = self.watchers.pop(key, None)
        if not ws:
            return 0
        n = 0
        for fut in ws:
            if not fut.done():
                fut.set_result(None)
                n += 1
        return n

    def wake_all(self) -> None:
        for key in list(self.watchers):
            self.check_and_complete(key)
