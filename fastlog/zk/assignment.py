# Replica assignment for new topics and new partitions, as Kafka's brokers compute it
# (AdminUtils.assignReplicasToBrokers): partition leaders go round-robin over the brokers
# from a random start; each partition's followers sit at a shifting offset from its leader
# so replicas of consecutive partitions do not pile onto the same pairs; with racks, the
# broker list is first interleaved rack by rack so each partition spans as many racks as it
# can. Pure functions of their arguments (pass `rng` or fixed start indexes for determinism).

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence


class InvalidReplicationFactorError(ValueError):
    pass


class InvalidPartitionsError(ValueError):
    pass


class RackInformationError(ValueError):
    """Some brokers have a rack and others do not, in enforced rack-aware mode."""


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    # The j-th follower is 1..n-1 positions after the leader, never on the leader itself.
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered so that consecutive ones are on different racks while racks last:
    racks sorted by name, one broker (lowest id first) taken from each in turn."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(racks):
        for q in queues:
            if depth < len(q):
                out.append(q[depth])
        depth += 1
    return out


def assign_replicas(num_partitions: int, replication_factor: int,
                    brokers: Sequence[int] | Mapping[int, str | None], *,
                    rack_aware: str = "enforced", fixed_start_index: int = -1,
                    start_partition_id: int = -1, rng: random.Random | None = None
                    ) -> dict[int, list[int]]:
    """Partition id -> replica broker ids (the first is the preferred leader).

    `brokers` is a list of broker ids, or a mapping broker id -> rack (None for no rack).
    `rack_aware`: "enforced" refuses a mix of brokers with and without racks, "safe" falls
    back to rack-unaware assignment then, "disabled" ignores racks. `start_partition_id`
    numbers new partitions added to an existing topic."""
    if num_partitions <= 0:
        raise InvalidPartitionsError(f"number of partitions must be larger than 0, "
                                     f"got {num_partitions}")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(f"replication factor must be larger than 0, "
                                            f"got {replication_factor}")
    if isinstance(brokers, Mapping):
        racks = dict(brokers)
    else:
        racks = {b: None for b in brokers}
    if len(set(racks)) == 0 or replication_factor > len(racks):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} larger than the {len(racks)} "
            "available brokers")
    if rack_aware not in ("enforced", "safe", "disabled"):
        raise ValueError(f"rack_aware must be enforced, safe or disabled, got {rack_aware!r}")
    rng = rng or random.Random()
    with_rack = {b: r for b, r in racks.items() if r is not None}
    if rack_aware == "disabled" or not with_rack:
        return _rack_unaware(num_partitions, replication_factor, sorted(racks),
                             fixed_start_index, start_partition_id, rng)
    if len(with_rack) != len(racks):
        if rack_aware == "enforced":
            raise RackInformationError(
                "not all brokers have rack information for rack-aware replica assignment: "
                f"{sorted(set(racks) - set(with_rack))} have no broker.rack")
        return _rack_unaware(num_partitions, replication_factor, sorted(racks),
                             fixed_start_index, start_partition_id, rng)
    return _rack_aware(num_partitions, replication_factor, with_rack,
                       fixed_start_index, start_partition_id, rng)


def _rack_unaware(num_partitions, replication_factor, brokers, fixed_start, start_pid, rng):
    n = len(brokers)
    start = fixed_start if fixed_start >= 0 else rng.randrange(n)
    shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    out = {}
    pid = max(0, start_pid)
    for _ in range(num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1  # each full round moves the followers one further from the leader
        first = (pid + start) % n
        replicas = [brokers[first]]
        replicas += [brokers[_replica_index(first, shift, j, n)]
                     for j in range(replication_factor - 1)]
        out[pid] = replicas
        pid += 1
    return out


def _rack_aware(num_partitions, replication_factor, racks, fixed_start, start_pid, rng):
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    start = fixed_start if fixed_start >= 0 else rng.randrange(n)
    shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    out = {}
    pid = max(0, start_pid)
    for _ in range(num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                rack = racks[broker]
                # Take it unless its rack already has a replica while another rack has none,
                # or it already holds one while another broker holds none.
                if ((rack not in used_racks or len(used_racks) == num_racks)
                        and (broker not in used or len(used) == n)):
                    replicas.append(broker)
                    used_racks.add(rack)
                    used.add(broker)
                    break
        out[pid] = replicas
        pid += 1
    return out
