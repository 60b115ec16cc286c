# The cluster.id check between a log dir's meta.properties and ZooKeeper's /cluster/id:
# a log dir written by a broker of one cluster must never be served in another (its
# partitions, offsets and leader epochs would be taken for this cluster's). Pure function;
# the storage side reads and writes meta.properties (fastlog/server/log/checkpoint.py).

from __future__ import annotations


class InconsistentClusterIdError(Exception):
    """A log dir belongs to another cluster than the one ZooKeeper names."""


def check_cluster_id(log_dir_meta_cluster_id: str | None, zk_cluster_id: str,
                     log_dir: str | None = None) -> str:
    """Return the cluster id to use for a log dir, or raise InconsistentClusterIdError.

    `log_dir_meta_cluster_id` is the dir's stored cluster.id (None or "" for a new dir,
    which then takes ZooKeeper's id)."""
    if not zk_cluster_id:
        raise ValueError("ZooKeeper's cluster id is empty")
    if log_dir_meta_cluster_id and log_dir_meta_cluster_id != zk_cluster_id:
        where = f"log dir {log_dir}" if log_dir else "a log dir"
        raise InconsistentClusterIdError(
            f"{where} belongs to cluster {log_dir_meta_cluster_id} (meta.properties) but "
            f"ZooKeeper's /cluster/id is {zk_cluster_id}: this broker is joining the wrong "
            "cluster; check zookeeper.connect (and its chroot) or use an empty log dir")
    return zk_cluster_id
