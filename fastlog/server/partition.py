# fastlog/server/partition.py — Partition: one hosted replica and its role (Kafka's Partition).
#
# Owns, for one (topic, partition) on this broker: the Log, the role (leader of the
# partition, follower of another broker, or neither while it is offline), the leader epoch
# and the partition epoch (the version of its ZooKeeper state znode, which conditional ISR
# updates must match), the replica list and the in-sync replicas, and, as leader, what each
# follower has shown by its fetches: its log end offset and when it was last caught up.
# The high watermark lives in the Log (consumers read below it); this class moves it:
# as leader to the smallest log end offset over the ISR, never backwards; as follower to
# min(own log end, the leader's high watermark from the last fetch answer).
# A replica whose log dir failed is `offline`: it keeps its last state, and serves nothing.
# Decisions only, no I/O: ZooKeeper writes, purgatory wake-ups and fetching are the
# ReplicaManager's and the fetcher's. Called from the broker's asyncio loop only.
# Also here, PartitionCounts: the replica manager's gauges (leaders, under-replicated,
# offline, led partitions by ISR size per topic for under-min-ISR) kept up to date as
# partitions change role, ISR or log dir, so a metrics scrape reads a few integers instead
# of walking every Partition with the interpreter lock held. Each hosted Partition holds
# what it adds to the counts (`counted`); `recount()` replaces that with what its state
# adds now, so a count is always the sum over the hosted partitions as of their last
# recount. Whatever changes `offline`, `isr`, `replicas`, `leader_id` or `local_id` calls
# it (make_leader and make_follower do; the ReplicaManager where it sets them itself and
# where it hosts or drops a partition). Updated on the loop, read by the scrape's thread.
"""A hosted partition: role, leader epoch, ISR, follower positions, high watermark."""

from __future__ import annotations

import dataclasses

from fastlog.server.producer_state import ProducerStateManager

NO_LEADER = -1


@dataclasses.dataclass
class ReplicaState:
    """What the leader knows of one follower (Kafka's Replica): its log end offset as
    shown by its last fetch offset, and the last time it was caught up with the leader."""

    broker_id: int
    log_end_offset: int = -1
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0
    # leader's log end at the previous fetch from this follower and that fetch's time:
    # a follower that reached the end seen then was caught up at that time (Kafka's rule)
    last_fetch_leader_leo: int = -1
    last_fetch_prev_ms: int = 0


class Partition:
    """One hosted partition. `leader_epoch` is stamped into every batch the leader appends."""

    def __init__(self, topic: str, partition: int, log_, leader_epoch: int, replicas: list[int],
                 local_id: int | None = None):
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.log = log_
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas)
        self.isr = list(replicas)
        # None: single node (this broker leads and is the only replica; the high watermark
        # follows the log end exactly as before replication existed).
        self.local_id = local_id
        # Cluster mode: no role until make_leader / make_follower (so the first one always
        # counts as a change); single node: this broker, the only replica, leads.
        self.leader_id = NO_LEADER if local_id is not None else (replicas[0] if replicas else -1)
        self.partition_epoch = -1
        # Set when ZooKeeper says we no longer lead (an ISR update failed on the znode
        # version or the session expired): refuse writes and acknowledgements until the
        # next role change arrives.
        self.fenced = False
        self.remote: dict[int, ReplicaState] = {}
        # The log end offset when this leader's epoch began (ISR expansion needs a follower
        # to have reached it: only then does it hold everything of the current epoch).
        self.leader_epoch_start_offset = 0
        self.isr_update_in_flight = False
        # Bumped whenever this replica stops leading (its log may be truncated then): a
        # parked acks=all produce is only good while this stays what it was at append time.
        self.follower_transitions = 0
        self.producer_state = ProducerStateManager(topic, partition)
        # zstd may only go to Fetch >= 10: remember whether this log has any.
        self.has_zstd = False
        # map end offset of the last producer snapshot written
        self.snapshot_offset = -1
        # Its log dir failed (ReplicaManager.handle_log_dir_failure): no reads, no writes,
        # KAFKA_STORAGE_ERROR to clients, until a restart with the dir readable.
        self.offline = False
        # The PartitionCounts this partition is counted in while hosted (the replica
        # manager sets it), and what it adds to them now (PartitionCounts.contribution).
        self.counts: PartitionCounts | None = None
        self.counted: tuple | None = None

    def recount(self) -> None:
        """After a change of role, ISR, replicas or log dir: the counts follow it."""
        counts = self.counts
        if counts is not None:
            counts.update(self)

    # ------------------------------------------------------------------ role
    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def is_leader(self) -> bool:
        return self.local_id is None or self.leader_id == self.local_id

    @property
    def can_accept_writes(self) -> bool:
        # is_leader spelled out: this runs on every produce request.
        return (self.local_id is None or self.leader_id == self.local_id) and not self.fenced

    @property
    def replicated(self) -> bool:
        """True in cluster mode: the high watermark is driven by the ISR, not the log end."""
        return self.local_id is not None

    def make_leader(self, leader_epoch: int, isr: list[int], replicas: list[int],
                    partition_epoch: int, now_ms: int) -> bool:
        """Become (or stay) leader at `leader_epoch`. Returns True when this is a new
        leadership or a new epoch (the caller then wakes parked requests)."""
        changed = not self.is_leader or leader_epoch != self.leader_epoch or self.fenced
        self.leader_id = self.local_id
        self.replicas = list(replicas)
        if changed:
            self.isr = [b for b in isr if b in self.replicas] or [self.local_id]
            if self.local_id not in self.isr:
                self.isr.insert(0, self.local_id)
            self.partition_epoch = partition_epoch
        else:
            # Within an epoch the leader owns the ISR (its own conditional writes); a
            # recorded ISR handed back with the same epoch may predate the latest of them.
            self.isr = [b for b in self.isr if b in self.replicas or b == self.local_id]
            self.partition_epoch = max(self.partition_epoch, partition_epoch)
        self.fenced = False
        log_ = self.log
        log_.hw_follows_leo = False
        if changed:
            self.leader_epoch = leader_epoch
            self.leader_epoch_start_offset = log_.log_end_offset
            # The new epoch starts at our log end even before the first append, so that
            # OffsetForLeaderEpoch answers followers of older epochs correctly (KIP-101).
            if leader_epoch > log_.leader_epoch_cache.latest_epoch:
                log_.leader_epoch_cache.assign(leader_epoch, log_.log_end_offset)
            # Followers start from scratch: unknown positions, caught up "now" if they are
            # in the ISR, so the lag clock starts at the election (Kafka's reset).
            self.remote = {
                b: ReplicaState(b, -1, 0, now_ms if b in self.isr else 0)
                for b in self.replicas if b != self.local_id
            }
        else:
            for b in self.replicas:
                if b != self.local_id and b not in self.remote:
                    self.remote[b] = ReplicaState(b, -1, 0, now_ms if b in self.isr else 0)
            for b in list(self.remote):
                if b not in self.replicas:
                    del self.remote[b]
        self.recount()
        return changed

    def make_follower(self, leader_id: int, leader_epoch: int, replicas: list[int]) -> bool:
        """Follow `leader_id` (-1: offline) at `leader_epoch`. Returns True when the leader
        or the epoch changed (the fetcher must then truncate before fetching again)."""
        changed = (leader_id != self.leader_id or leader_epoch != self.leader_epoch
                   or self.fenced)
        if self.is_leader or changed:
            self.follower_transitions += 1
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas)
        self.isr = []
        self.remote = {}
        self.fenced = False
        self.log.hw_follows_leo = False
        self.recount()
        return changed

    # ------------------------------------------------------------------ leader side
    def update_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> None:
        """A follower fetched from `fetch_offset`: everything below it is in its log."""
        r = self.remote.get(replica_id)
        if r is None:
            r = self.remote[replica_id] = ReplicaState(replica_id)
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            r.last_caught_up_ms = max(r.last_caught_up_ms, now_ms)
        elif r.last_fetch_leader_leo >= 0 and fetch_offset >= r.last_fetch_leader_leo:
            r.last_caught_up_ms = max(r.last_caught_up_ms, r.last_fetch_prev_ms)
        r.last_fetch_leader_leo = leo
        r.last_fetch_prev_ms = now_ms
        r.log_end_offset = fetch_offset
        r.last_fetch_ms = now_ms

    def maybe_increment_high_watermark(self) -> bool:
        """Leader: HW = min log end offset over the ISR, never backwards. True if it moved."""
        log_ = self.log
        if self.local_id is None:   # not replicated: every append moves it
            if log_.high_watermark != log_.log_end_offset:
                log_.update_high_watermark(log_.log_end_offset)
                return True
            return False
        if not self.is_leader:
            return False
        low = log_.log_end_offset
        for b in self.isr:
            if b == self.local_id:
                continue
            r = self.remote.get(b)
            low = min(low, r.log_end_offset if r is not None else -1)
        if low > log_.high_watermark:
            log_.update_high_watermark(low)
            return True
        return False

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int) -> list[int]:
        """ISR followers not caught up within max_lag_ms (Kafka's replica.lag.time.max.ms),
        and ISR members that are no longer replicas (an expansion written while a
        reassignment removed them)."""
        out = []
        for b in self.isr:
            if b == self.local_id:
                continue
            r = self.remote.get(b)
            if (r is None or now_ms - r.last_caught_up_ms > max_lag_ms
                    or b not in self.replicas):
                out.append(b)
        return out

    def expand_candidates(self) -> list[int]:
        """Followers outside the ISR that now hold everything up to the high watermark and
        the start of the current epoch: they may rejoin the ISR."""
        out = []
        hw = self.log.high_watermark
        for b, r in self.remote.items():
            if b in self.isr or b not in self.replicas:
                continue
            if r.log_end_offset >= hw and r.log_end_offset >= self.leader_epoch_start_offset:
                out.append(b)
        return out

    # ------------------------------------------------------------------ follower side
    def update_follower_high_watermark(self, leader_hw: int) -> None:
        """Follower: HW = min(own log end, the leader's HW), never backwards here (a
        truncation lowers it through Log.truncate_to)."""
        log_ = self.log
        target = min(leader_hw, log_.log_end_offset)
        if target > log_.high_watermark:
            log_.update_high_watermark(target)

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition})"


class PartitionCounts:
    """The replica manager's gauges over its hosted partitions (see the module comment):
    `leaders` (led and not offline), `under_replicated` (led, ISR smaller than the replica
    set), `offline_keys` (the (topic, partition) of each in a failed log dir; counted as
    nothing else), and `led_by_isr` (topic -> ISR size -> led partitions), from which
    under_min_isr counts the led partitions whose ISR is smaller than their topic's
    min.insync.replicas at the time asked (a config change needs no recount). `changes` counts the updates that changed
    anything (a reader comparing the counts with a walk of its own knows whether they
    moved meanwhile)."""

    __slots__ = ("leaders", "under_replicated", "offline_keys", "led_by_isr", "changes")

    def __init__(self):
        self.changes = 0
        self.leaders = 0
        self.under_replicated = 0
        self.offline_keys: set[tuple[str, int]] = set()
        self.led_by_isr: dict[str, dict[int, int]] = {}

    @staticmethod
    def contribution(p: Partition) -> tuple:
        """What `p` adds to the counts: (key, offline, leads, under-replicated, ISR size)."""
        if p.offline:
            return (p.key, True, False, False, 0)
        if p.local_id is not None and p.leader_id != p.local_id:
            return (p.key, False, False, False, 0)
        isr = len(p.isr)
        return (p.key, False, True, isr < len(p.replicas), isr)

    def host(self, p: Partition) -> None:
        """`p` is hosted now: counted from here on."""
        if p.counts is not None and p.counts is not self:
            p.counts.drop(p)
        p.counts = self
        self.update(p)

    def drop(self, p: Partition) -> None:
        """`p` is no longer hosted: what it added is taken out."""
        if p.counts is self:
            self.changes += 1
            self._add(p.counted, -1)
            p.counted = None
            p.counts = None

    def update(self, p: Partition) -> None:
        now = self.contribution(p)
        before = p.counted
        if now != before:
            self.changes += 1
            self._add(before, -1)
            self._add(now, 1)
            p.counted = now

    def _add(self, c: tuple | None, sign: int) -> None:
        if c is None:
            return
        key, offline, leads, under, isr = c
        if offline:
            if sign > 0:
                self.offline_keys.add(key)
            else:
                self.offline_keys.discard(key)
            return
        if not leads:
            return
        self.leaders += sign
        if under:
            self.under_replicated += sign
        topic = key[0]
        by_isr = self.led_by_isr.get(topic)
        if by_isr is None:
            by_isr = self.led_by_isr[topic] = {}
        n = by_isr.get(isr, 0) + sign
        if n:
            by_isr[isr] = n
        else:
            del by_isr[isr]
            if not by_isr:
                del self.led_by_isr[topic]

    def under_min_isr(self, min_isr_of) -> int:
        """Led partitions whose ISR is smaller than min_isr_of(their topic). Any thread
        (each dict is copied in one step first)."""
        under = 0
        for topic, by_isr in list(self.led_by_isr.items()):
            least = min_isr_of(topic)
            for isr, n in list(by_isr.items()):
                if isr < least:
                    under += n
        return under
