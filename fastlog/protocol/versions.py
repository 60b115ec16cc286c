"""The ApiVersions table fastlog advertises, and the replies built from it.

Ranges follow shared/reference/client-compatibility.md §3 and §5: Produce is advertised
from v0 although only v3+ is implemented (KAFKA-18659: librdkafka < 2.11.1 silently drops
compression unless it sees Produce v0), OffsetCommit from v1 (librdkafka 2.0.2 needs a
range overlapping 1-2). Which versions are flexible (KIP-482) is Kafka's, from the specs
(messages.py): of the APIs served before KIP-482 most stop at their last non-flexible
version; the APIs added since (SCRAM credentials, ACLs from v2, reassignments, the
transaction APIs, ...) are served with their flexible versions. WriteTxnMarkers keeps v0,
what Kafka brokers before 2.8 send. Pure data and small builders, any thread.
"""

from .api_keys import ApiKey
from .errors import Errors

SUPPORTED_VERSIONS = {
    ApiKey.PRODUCE: (0, 11),
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (1, 9),
    ApiKey.METADATA: (0, 13),
    ApiKey.OFFSET_COMMIT: (1, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
}

# Produce v0-2 are advertised and decodable, but a handler answers them with
# UNSUPPORTED_VERSION per partition, as Kafka 4 does (they carry magic 0/1 message sets).
PRODUCE_MIN_IMPLEMENTED = 3


def is_supported(api_key, api_version):
    rng = SUPPORTED_VERSIONS.get(api_key)
    return rng is not None and rng[0] <= api_version <= rng[1]


def api_versions_response(error_code=Errors.NONE, throttle_time_ms=0):
    """The ApiVersions response body (a dict for encode_response) listing our table."""
    return {
        "error_code": int(error_code),
        "api_keys": [
            {"api_key": int(k), "min_version": lo, "max_version": hi}
            for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
        ],
        "throttle_time_ms": throttle_time_ms,
    }
