# fastlog/server/authz.py — the request handlers' side of ACL authorization.
#
# Owns: building the broker's authorizer from Kafka's keys (authorizer.class.name,
# super.users, allow.everyone.if.no.acl.found) over the store of its mode (ZooKeeper's
# /kafka-acl znodes in cluster mode, `<first log dir>/fastlog-acls.json` on one node), and
# the checks a handler makes: authorize(ctx, operation, resource type, name) with the
# principal of the connection (conn.state["principal"], set by the authenticator) and its
# IP address. No authorizer configured: every check passes (Kafka's default). A denial is
# logged (principal, operation, resource, client address), at most once per
# fastlog.logs.REPORT_INTERVAL_S for one (principal, operation, resource type).
# The decisions are fastlog/security/authorizer.py's cached ones: a check is a dict hit.
# Called from: the broker's event loop (handlers of fastlog/server/apis.py and
# fastlog/server/group/apis.py). The blocking ACL changes (CreateAcls, DeleteAcls) go
# through `run_admin`, on a thread of their own, never on the loop.
"""ACL checks for the request handlers, and the broker's authorizer."""

from __future__ import annotations

import asyncio
import logging

from fastlog.logs import report_limited
from fastlog.protocol import Errors
from fastlog.security import ANONYMOUS
from fastlog.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePatternFilter,
    ResourceType,
)
from fastlog.security.authorizer import AclAuthorizer

log = logging.getLogger("fastlog.server.authz")

# Kafka's value of an authorized_operations field that was not asked for.
OPERATIONS_NOT_ASKED = -(1 << 31)

TOPIC = int(ResourceType.TOPIC)
GROUP = int(ResourceType.GROUP)
CLUSTER = int(ResourceType.CLUSTER)
TRANSACTIONAL_ID = int(ResourceType.TRANSACTIONAL_ID)

READ = int(AclOperation.READ)
WRITE = int(AclOperation.WRITE)
CREATE = int(AclOperation.CREATE)
DELETE = int(AclOperation.DELETE)
ALTER = int(AclOperation.ALTER)
DESCRIBE = int(AclOperation.DESCRIBE)
CLUSTER_ACTION = int(AclOperation.CLUSTER_ACTION)
DESCRIBE_CONFIGS = int(AclOperation.DESCRIBE_CONFIGS)
ALTER_CONFIGS = int(AclOperation.ALTER_CONFIGS)
IDEMPOTENT_WRITE = int(AclOperation.IDEMPOTENT_WRITE)


def build_authorizer(config, log_dirs, cluster) -> AclAuthorizer | None:
    """The broker's authorizer (None when authorizer.class.name is empty), its ACLs
    loaded and followed. Blocking (ZooKeeper or the file): call at startup, off the loop.
    The store is ZooKeeper's in cluster mode (`cluster`: the ZkClusterMember), the file
    in the first log dir on one node."""
    if not config["authorizer.class.name"].strip():
        return None
    if cluster is not None:
        from fastlog.zk.acl_store import ZkAclStore

        store = ZkAclStore(cluster.zk.kazoo)
    else:
        from fastlog.metadata.acl_store import FileAclStore

        store = FileAclStore(log_dirs[0])
    authorizer = AclAuthorizer.from_config(config.values, store)
    authorizer.start()
    log.info("ACL authorization on (%s), %d super user(s), allow.everyone.if.no.acl.found=%s",
             config["authorizer.class.name"].strip(), len(authorizer.super_users),
             str(authorizer.allow_everyone_if_no_acl_found).lower())
    return authorizer


def principal_and_host(ctx) -> tuple[str, str]:
    """The request's principal ("User:alice") and client IP address (set by KafkaApis at
    the connection's first request)."""
    state = getattr(ctx.connection, "state", None)
    if not state:
        return ANONYMOUS, ""
    return state.get("principal") or ANONYMOUS, state.get("host", "")


def authorize(ctx, operation: int, resource_type: int, name: str, log_denied: bool = True
              ) -> bool:
    """May the request's principal do `operation` on the resource? A denial is logged
    (rate-limited) unless log_denied is False (a filter, like Metadata's topic list)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    principal, host = principal_and_host(ctx)
    if authorizer.authorize(principal, host, operation, resource_type, name):
        return True
    if log_denied:
        log_denial(principal, host, operation, resource_type, name)
    return False


def authorize_cluster(ctx, operation: int, log_denied: bool = True) -> bool:
    return authorize(ctx, operation, CLUSTER, CLUSTER_NAME, log_denied)


def log_denial(principal: str, host: str, operation: int, resource_type: int,
               name: str) -> None:
    report_limited(log, logging.INFO, ("acl-denied", principal, operation, resource_type),
                   "Principal = %s is Denied Operation = %s from host = %s on resource = %s:%s",
                   principal, AclOperation.from_code(operation).kafka_name, host,
                   ResourceType.from_code(resource_type).kafka_name, name)


def authorized_operations(ctx, resource_type: int, name: str) -> int:
    """Kafka's authorized_operations bit field of the resource for the request's
    principal (every supported operation when no authorizer is configured)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.from_code(resource_type)])
    principal, host = principal_and_host(ctx)
    return authorizer.authorized_operations(principal, host, resource_type, name)


def cluster_authorized_operations(ctx) -> int:
    """Kafka's cluster_authorized_operations of Metadata v8 and DescribeCluster, when
    asked: the cluster's bit field for a principal that may Describe it, else 0."""
    if not authorize_cluster(ctx, DESCRIBE, log_denied=False):
        return 0
    return authorized_operations(ctx, CLUSTER, CLUSTER_NAME)


def authorize_by_resource_type(ctx, operation: int, resource_type: int) -> bool:
    """Kafka's authorizeByResourceType: may the principal do `operation` on at least one
    resource of the type? An applying ALLOW of the operation (or All) on some pattern
    that no applying DENY covers (a DENY on the literal "*" covers everything; one on a
    literal name covers that name; a prefixed DENY covers names starting with it). With
    no ACL of the type at all, allow.everyone.if.no.acl.found. Scans the type's ACLs:
    for rare requests only (InitProducerId)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    principal, host = principal_and_host(ctx)
    if principal in authorizer.super_users:
        return True
    bindings = authorizer.list(AclBindingFilter(ResourcePatternFilter(
        ResourceType.from_code(resource_type), None, PatternType.ANY)))
    if not bindings:
        return authorizer.allow_everyone_if_no_acl_found
    allows, denies = [], []
    for pattern, entry in bindings:
        if entry.principal not in (principal, WILDCARD_PRINCIPAL):
            continue
        if entry.host not in (host, WILDCARD_HOST):
            continue
        if entry.operation not in (operation, AclOperation.ALL):
            continue
        (denies if entry.permission_type == AclPermissionType.DENY else allows).append(pattern)

    def denied(pattern) -> bool:
        for d in denies:
            if d.pattern_type == PatternType.LITERAL:
                if d.name == WILDCARD_RESOURCE or (
                        pattern.pattern_type == PatternType.LITERAL and d.name == pattern.name):
                    return True
            elif pattern.name.startswith(d.name):
                return True
        return False

    if any(not denied(p) for p in allows):
        return True
    log_denial(principal, host, operation, resource_type, "*")
    return False


def no_authorizer_error() -> tuple[Errors, str]:
    """What the ACL APIs answer when no authorizer is configured (Kafka's words)."""
    return Errors.SECURITY_DISABLED, "No Authorizer is configured on the broker"


async def run_admin(fn, *args):
    """Run a blocking authorizer change (add, remove) on a thread, not on the loop."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
