# fastlog/client/versions.py: which version range of each Kafka API this client speaks.
#
# The connection intersects these ranges with what the broker advertises in ApiVersions
# and with what fastlog.protocol can encode, and uses the highest common version. The
# ranges stop below each API's first flexible version (nothing we need lives there; the
# SCRAM credential, partition reassignment and DescribeProducers APIs are flexible from v0;
# ListGroups goes to v4, flexible, for its states filter; WriteTxnMarkers to v1, as Kafka's
# admin sends it; DescribeLogDirs to v4, flexible, for the disk's total and usable bytes;
# the ACL APIs start at v1, the first with pattern types) and
# start where the fields we rely on exist (Produce 3 = record batches v2, Metadata 1 =
# controller id, Fetch 4 = isolation level and last stable offset). Pure data, any thread.

from __future__ import annotations

from fastlog.protocol import SUPPORTED_VERSIONS, ApiKey

CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 8),
    ApiKey.FETCH: (4, 11),
    ApiKey.LIST_OFFSETS: (1, 5),
    ApiKey.METADATA: (1, 8),
    ApiKey.OFFSET_COMMIT: (2, 7),
    ApiKey.OFFSET_FETCH: (1, 5),
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 3),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.API_VERSIONS: (0, 2),
    ApiKey.CREATE_TOPICS: (2, 4),
    ApiKey.DELETE_TOPICS: (1, 3),
    ApiKey.DELETE_RECORDS: (0, 1),
    ApiKey.INIT_PRODUCER_ID: (0, 1),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_CONFIGS: (1, 3),
    ApiKey.ALTER_CONFIGS: (0, 1),
    ApiKey.CREATE_PARTITIONS: (0, 1),
    ApiKey.DELETE_GROUPS: (0, 1),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 0),
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_ACLS: (1, 1),
    ApiKey.CREATE_ACLS: (1, 1),
    ApiKey.DELETE_ACLS: (1, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.ELECT_LEADERS: (0, 1),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 0),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 0),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
}


def client_range(api_key: int) -> tuple[int, int]:
    """(min, max) version this client may send for api_key; (0, -1) if none."""
    lo, hi = CLIENT_VERSIONS.get(api_key, (0, -1))
    proto = SUPPORTED_VERSIONS.get(api_key)  # what fastlog.protocol can encode and decode
    if proto is None:
        return (0, -1)
    return max(lo, proto[0]), min(hi, proto[1])
