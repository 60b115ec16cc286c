# fastlog/cli/acls.py: `fastlog acls`, kafka-acls.sh for the broker's ACL authorizer.
#
#   fastlog acls --bootstrap-server B --add --allow-principal User:alice --operation Read \
#       --topic orders --group billing
#   fastlog acls --bootstrap-server B --add --deny-principal User:mallory --deny-host 10.0.0.9 \
#       --operation All --topic orders-  --resource-pattern-type prefixed
#   fastlog acls --bootstrap-server B --list [--topic orders] [--principal User:alice]
#   fastlog acls --bootstrap-server B --remove --allow-principal User:alice --topic orders
#
# Resources: --topic, --group, --transactional-id (each repeatable) and --cluster; pattern
# types literal (default) and prefixed for --add, also any and match for --list/--remove.
# Operations default to All; hosts to "*". Through fastlog.client.Admin (CreateAcls,
# DescribeAcls, DeleteAcls), with --command-config and -X for the client's security. Output
# follows kafka-acls.sh. Bad input is one sentence and exit status 2; a principal without
# Alter (or Describe) on the cluster gets one sentence saying so, exit status 1. Runs on the
# CLI's main thread with its own loop.

from __future__ import annotations

import sys

from fastlog.cli.main import (
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    client_security,
)
from fastlog.client.errors import FastlogError, KafkaError
from fastlog.client.sync import run_async
from fastlog.protocol import Errors
from fastlog.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    parse_principal,
)

PATTERN_TYPES = ("literal", "prefixed", "match", "any")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "acls", help="add, list and remove ACLs",
        description="Add, list and remove the ACLs of the broker's authorizer (like "
                    "kafka-acls.sh). The principal running it needs Alter on the cluster to "
                    "add or remove, Describe to list.")
    add_bootstrap_option(p)
    add_client_config_options(p)
    actions = p.add_mutually_exclusive_group(required=True)
    for name, text in (("add", "add the ACLs described"), ("remove", "remove matching ACLs"),
                       ("list", "list the ACLs of the resources given (all without any)")):
        actions.add_argument(f"--{name}", dest="action", action="store_const", const=name,
                             help=text)
    p.add_argument("--topic", action="append", default=[], help="a topic (repeatable)")
    p.add_argument("--group", action="append", default=[], help="a consumer group (repeatable)")
    p.add_argument("--transactional-id", action="append", default=[],
                   help="a transactional id (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default=None, metavar="TYPE",
                   help="literal (default for --add), prefixed, or for --list/--remove also "
                        "any (default there) and match")
    p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                   help="principal allowed, e.g. User:alice or User:* (repeatable)")
    p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL",
                   help="principal denied (repeatable)")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                   help="IP address the allowed principals may come from (default *)")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                   help="IP address the denied principals are refused from (default *)")
    p.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                        "DescribeConfigs, AlterConfigs, IdempotentWrite or All (default All; "
                        "repeatable)")
    p.add_argument("--principal", action="append", default=[],
                   help="with --list: only the ACLs of this principal (repeatable)")
    p.add_argument("--force", action="store_true",
                   help="accepted for kafka-acls.sh compatibility (nothing is asked)")
    p.set_defaults(run=run)


def _pattern_type(args) -> PatternType:
    raw = args.resource_pattern_type
    if raw is None:
        return PatternType.LITERAL if args.action == "add" else PatternType.ANY
    if raw.lower() not in PATTERN_TYPES:
        raise CliError(f"--resource-pattern-type must be one of {', '.join(PATTERN_TYPES)}, "
                       f"not {raw!r}")
    ptype = PatternType.from_name(raw)
    if args.action == "add" and ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CliError("--add takes --resource-pattern-type literal or prefixed")
    return ptype


def _resources(args) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    for rtype, name in out:
        if not name:
            raise CliError(f"--{rtype.name.lower().replace('_', '-')} needs a name")
    return out


def _principals(values: list[str], option: str) -> list[str]:
    for v in values:
        try:
            kind, name = parse_principal(v)
        except ValueError:
            raise CliError(f"{option} {v!r} is not of the form User:<name>") from None
        if not kind or not name:
            raise CliError(f"{option} {v!r} is not of the form User:<name>")
    return values


def _operations(args, resources) -> list[AclOperation]:
    ops = []
    for raw in args.operation or ["All"]:
        op = AclOperation.from_name(raw)
        if op in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise CliError(f"--operation {raw!r} is not an operation (Read, Write, Create, "
                           "Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                           "AlterConfigs, IdempotentWrite, All)")
        ops.append(op)
    for rtype, _ in resources:
        supported = SUPPORTED_OPERATIONS[rtype]
        for op in ops:
            if op != AclOperation.ALL and op not in supported:
                raise CliError(f"ResourceType {rtype.kafka_name} only supports operations "
                               f"{', '.join(o.kafka_name for o in (AclOperation.ALL, *supported))}"
                               f", not {op.kafka_name}")
    return ops


def _entries(args, ops) -> list[AccessControlEntry]:
    allow = _principals(args.allow_principal, "--allow-principal")
    deny = _principals(args.deny_principal, "--deny-principal")
    if args.allow_host and not allow:
        raise CliError("--allow-host goes with --allow-principal")
    if args.deny_host and not deny:
        raise CliError("--deny-host goes with --deny-principal")
    out = []
    for principals, hosts, perm in ((allow, args.allow_host, AclPermissionType.ALLOW),
                                    (deny, args.deny_host, AclPermissionType.DENY)):
        for principal in principals:
            for host in hosts or [WILDCARD_HOST]:
                for op in ops:
                    out.append(AccessControlEntry(principal, host, op, perm))
    return out


def _binding_text(entry) -> str:
    return (f"\t(principal={entry.principal}, host={entry.host}, "
            f"operation={entry.operation.name}, permissionType={entry.permission_type.name})")


def _pattern_text(pattern) -> str:
    return (f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
            f"patternType={pattern.pattern_type.name})")


def run(args) -> int:
    security = client_security(args)
    ptype = _pattern_type(args)
    resources = _resources(args)
    if args.action == "list":
        if args.allow_principal or args.deny_principal or args.operation:
            raise CliError("--list takes resources and --principal only")
        principals = _principals(args.principal, "--principal")
        filters = [AclBindingFilter(ResourcePatternFilter(rtype, name, ptype),
                                    AccessControlEntryFilter(p))
                   for rtype, name in resources or [(ResourceType.ANY, None)]
                   for p in principals or [None]]
        return run_async(_run(args, security, "list", filters))
    if args.principal:
        raise CliError("--principal goes with --list (use --allow-principal or "
                       "--deny-principal)")
    if not resources:
        raise CliError(f"--{args.action} needs a resource: --topic, --group, "
                       "--transactional-id or --cluster")
    if args.action == "add":
        if not args.allow_principal and not args.deny_principal:
            raise CliError("--add needs --allow-principal or --deny-principal")
        entries = _entries(args, _operations(args, resources))
        bindings = [AclBinding(ResourcePattern(rtype, name, ptype), e)
                    for rtype, name in resources for e in entries]
        return run_async(_run(args, security, "add", bindings))
    # remove: without principals, every ACL of the resources (as kafka-acls)
    if args.allow_principal or args.deny_principal:
        entries = _entries(args, _operations(args, resources))
        entry_filters = [AccessControlEntryFilter(e.principal, e.host, e.operation,
                                                  e.permission_type) for e in entries]
    else:
        if args.operation or args.allow_host or args.deny_host:
            raise CliError("--remove with --operation or hosts needs --allow-principal or "
                           "--deny-principal")
        entry_filters = [AccessControlEntryFilter()]
    filters = [AclBindingFilter(ResourcePatternFilter(rtype, name, ptype), ef)
               for rtype, name in resources for ef in entry_filters]
    return run_async(_run(args, security, "remove", filters))


async def _run(args, security, action, items) -> int:
    from fastlog.client import Admin

    out = sys.stdout
    try:
        async with Admin(args.bootstrap_server, client_id="fastlog-acls",
                         security=security) as admin:
            if action == "add":
                _print_bindings(out, items, "Adding ACLs for resource")
                await admin.create_acls(items)
                return 0
            if action == "remove":
                deleted = await admin.delete_acls(items)
                _print_bindings(out, deleted, "Removed ACLs for resource")
                return 0
            found = []
            for f in items:
                found += await admin.describe_acls(f)
            _print_bindings(out, sorted(set(found)), "Current ACLs for resource")
            return 0
    except KafkaError as e:
        if e.code == Errors.CLUSTER_AUTHORIZATION_FAILED:
            needed = "Describe" if action == "list" else "Alter"
            raise FastlogError(f"not allowed: {action}ing ACLs needs {needed} on the cluster "
                               "for the principal this command connects as "
                               "(CLUSTER_AUTHORIZATION_FAILED)") from None
        if e.code == Errors.SECURITY_DISABLED:
            raise FastlogError("the broker has no authorizer: set authorizer.class.name in "
                               "its server.properties (SECURITY_DISABLED)") from None
        raise


def _print_bindings(out, bindings, heading: str) -> None:
    by_pattern: dict = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    for pattern, entries in by_pattern.items():
        out.write(f"{heading} `{_pattern_text(pattern)}`: \n")
        for e in entries:
            out.write(f" {_binding_text(e)} \n")
        out.write("\n")
