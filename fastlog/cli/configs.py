# fastlog/cli/configs.py: `fastlog configs`, kafka-configs.sh for users' SCRAM credentials,
# client quotas (users, client ids, user + client id; a name or the default) and brokers'
# dynamic configs.
#
#   fastlog configs --bootstrap-server B --alter --entity-type users --entity-name alice \
#       --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'
#   fastlog configs --bootstrap-server B --alter --entity-type users --entity-name alice \
#       --delete-config SCRAM-SHA-512
#   fastlog configs --bootstrap-server B --alter --entity-type users --entity-name alice \
#       --entity-type clients --entity-default \
#       --add-config 'producer_byte_rate=1024,consumer_byte_rate=2048'
#   fastlog configs --bootstrap-server B --describe --entity-type users [--entity-name alice]
#   fastlog configs --bootstrap-server B --alter --entity-type brokers \
#       (--entity-name 1 | --entity-default) --add-config log.retention.ms=3600000
#   fastlog configs --bootstrap-server B --alter --entity-type brokers --entity-default \
#       --delete-config log.retention.ms
#   fastlog configs --bootstrap-server B --describe --entity-type brokers \
#       [--entity-name 1 | --entity-default] [--all]
#
# Through fastlog.client.Admin (AlterUserScramCredentials, DescribeUserScramCredentials,
# AlterClientQuotas, DescribeClientQuotas; IncrementalAlterConfigs and DescribeConfigs of
# BROKER resources, "" naming the cluster default): the password is salted here and never
# sent. Output follows kafka-configs.sh. Bad input is one sentence and exit status 2. Runs
# on the CLI's main thread with its own loop.

from __future__ import annotations

import argparse
import sys

from fastlog.cli.main import (
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    client_security,
)
from fastlog.client.errors import KafkaError
from fastlog.client.sync import run_async
from fastlog.protocol import Errors
from fastlog.protocol.api_keys import SCRAM_MECHANISM_TYPES
from fastlog.security.quota import (
    DEFAULT,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    QUOTA_KEYS,
    check_quota_value,
    describe_entity,
)
from fastlog.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS

SCRAM = tuple(SCRAM_MECHANISM_TYPES.values())
ENTITY_TYPES = {"users": "user", "clients": "client-id"}


class _EntityName(argparse.Action):
    """--entity-name X and --entity-default, in the order given (they pair up with the
    --entity-type options in order, as in kafka-configs)."""

    def __call__(self, parser, namespace, values, option_string=None):
        names = list(getattr(namespace, self.dest, None) or [])
        names.append(DEFAULT if isinstance(values, list) else values)   # nargs=0: []
        setattr(namespace, self.dest, names)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "configs", help="add, describe and delete SCRAM credentials, client quotas and "
                        "dynamic broker configs",
        description="Add, describe and delete the SCRAM credentials of users, the quotas "
                    "of users and client ids and the dynamic configs of brokers (like "
                    "kafka-configs.sh --entity-type users|clients|brokers).")
    add_bootstrap_option(p)
    add_client_config_options(p)
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument("--alter", dest="action", action="store_const", const="alter",
                         help="add or delete configs of an entity")
    actions.add_argument("--describe", dest="action", action="store_const", const="describe",
                         help="list the SCRAM credentials, quotas or broker configs")
    p.add_argument("--entity-type", action="append", required=True,
                   help="users, clients (both, twice, for a user + client id quota) or "
                        "brokers")
    p.add_argument("--entity-name", dest="entity_names", action=_EntityName,
                   help="the user, client id or broker id (one per --entity-type, in order)")
    p.add_argument("--entity-default", dest="entity_names", action=_EntityName, nargs=0,
                   help="the default user or client id, or the cluster-wide default of "
                        "every broker")
    p.add_argument("--all", action="store_true",
                   help="brokers, with --describe: every config, not only the dynamic ones")
    p.add_argument("--add-config", metavar="CONFIGS",
                   help="e.g. 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]', "
                        "'producer_byte_rate=1024,consumer_byte_rate=2048' or "
                        "'log.retention.ms=3600000,log.cleanup.policy=[delete,compact]'")
    p.add_argument("--delete-config", metavar="KEYS",
                   help="e.g. 'SCRAM-SHA-512', 'producer_byte_rate' or 'log.retention.ms'")
    p.set_defaults(run=run)


def split_top_level(text: str) -> list[str]:
    """kafka-configs' list: items separated by commas outside square brackets."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise CliError(f"unbalanced ']' in {text!r}")
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise CliError("a '[' is not closed in --add-config")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def parse_add_config(text: str, users: bool) -> tuple[list[tuple[str, str, int]],
                                                     dict[str, float]]:
    """([(mechanism, password, iterations)], {quota key: value}) of --add-config."""
    scram, quotas = [], {}
    for item in split_top_level(text):
        key, sep, value = item.partition("=")
        key = key.strip()
        if key in QUOTA_KEYS or key == "connection_creation_rate":
            quotas[key] = parse_quota_value(key, value if sep else "")
            continue
        if key not in SCRAM or not users:
            raise CliError(f"--add-config takes {_allowed(users)}, not {key!r}")
        value = value.strip()
        if not sep or not (value.startswith("[") and value.endswith("]")):
            raise CliError(f"{key} needs a value like [password=...] or "
                           "[iterations=8192,password=...]")
        fields = {}
        for part in value[1:-1].split(","):
            name, eq, v = part.partition("=")
            if not eq or name.strip() not in ("password", "iterations"):
                raise CliError(f"{key} takes password= and iterations= only")
            fields[name.strip()] = v
        if not fields.get("password"):
            raise CliError(f"{key} needs a password")
        try:
            iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        except ValueError:
            raise CliError(f"{key} iterations must be a whole number") from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise CliError(f"{key} iterations must be between {MIN_ITERATIONS} and "
                           f"{MAX_ITERATIONS}, not {iterations}")
        scram.append((key, fields["password"], iterations))
    if not scram and not quotas:
        raise CliError("--add-config names no config")
    return scram, quotas


def parse_quota_value(key: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise CliError(f"{key} needs a number, not {text.strip()!r}") from None
    problem = check_quota_value(key, value)
    if problem is not None:
        raise CliError(problem)
    return value


def _allowed(users: bool) -> str:
    keys = sorted(QUOTA_KEYS)
    return ", ".join([*SCRAM, *keys] if users else keys)


def parse_delete_config(text: str, users: bool) -> tuple[list[str], list[str]]:
    """(SCRAM mechanisms, quota keys) of --delete-config."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    for key in keys:
        if key not in QUOTA_KEYS and (key not in SCRAM or not users):
            raise CliError(f"--delete-config takes {_allowed(users)}, not {key!r}")
    if not keys:
        raise CliError("--delete-config names no config")
    return [k for k in keys if k in SCRAM], [k for k in keys if k in QUOTA_KEYS]


def parse_broker_configs(text: str) -> dict[str, str]:
    """{key: value} of --add-config for brokers (a value with commas in [brackets])."""
    out = {}
    for item in split_top_level(text):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise CliError(f"--add-config takes key=value items, not {item!r}")
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key] = value
    if not out:
        raise CliError("--add-config names no config")
    return out


def entity_of(types: list[str], names: list[str]) -> tuple:
    """The (user, client id) quota entity the --entity-type/--entity-name pairs name."""
    user = client = None
    for entity_type, name in zip(types, names, strict=True):
        if entity_type == "users":
            user = name
        else:
            client = name
    return (user, client)


def run(args) -> int:
    types = args.entity_type
    if "brokers" in types:
        if types != ["brokers"]:
            raise CliError("--entity-type brokers goes alone")
        return _run_brokers(args)
    if args.all:
        raise CliError("--all goes with --entity-type brokers")
    for entity_type in types:
        if entity_type not in ENTITY_TYPES:
            raise CliError(f"--entity-type {entity_type!r} is not served: fastlog configs "
                           "handles users, clients and brokers (topic configs: fastlog topics --alter)")
    if len(set(types)) != len(types):
        raise CliError("each --entity-type may be given once")
    names = args.entity_names or []
    if names and len(names) != len(types):
        raise CliError("give one --entity-name or --entity-default per --entity-type")
    users = types == ["users"]
    security = client_security(args)
    scram_adds, quotas, scram_deletes = [], {}, []
    if args.action == "alter":
        if not names:
            raise CliError("--alter needs --entity-name")
        if not args.add_config and not args.delete_config:
            raise CliError("--alter needs --add-config or --delete-config")
        scram_ok = users and names[0] != DEFAULT
        if args.add_config:
            scram_adds, quotas = parse_add_config(args.add_config, scram_ok)
        if args.delete_config:
            scram_deletes, removed = parse_delete_config(args.delete_config, scram_ok)
            both = set(removed) & set(quotas)
            if both:
                raise CliError(f"{sorted(both)[0]} is both added and deleted")
            quotas.update({k: None for k in removed})
        both = {m for m, _, _ in scram_adds} & set(scram_deletes)
        if both:
            raise CliError(f"{sorted(both)[0]} is both added and deleted")
    elif args.add_config or args.delete_config:
        raise CliError("--add-config and --delete-config go with --alter")
    return run_async(_run(args, security, types, names, scram_adds, scram_deletes, quotas))


async def _run(args, security, types, names, scram_adds, scram_deletes, quotas) -> int:
    from fastlog.client import Admin

    out = sys.stdout
    async with Admin(args.bootstrap_server, client_id="fastlog-configs",
                     security=security) as admin:
        if args.action == "alter":
            entity = entity_of(types, names)
            if quotas:
                await admin.alter_client_quotas([(entity, quotas)])
            if scram_adds or scram_deletes:
                user = names[0]
                await admin.alter_user_scram_credentials(
                    [(user, m, password, n) for m, password, n in scram_adds],
                    [(user, m) for m in scram_deletes])
            if types == ["users"] and names[0] != DEFAULT:
                out.write(f"Completed updating config for user {names[0]}.\n")
            else:
                out.write(f"Completed updating config for {describe_entity(entity)}.\n")
            return 0
        components = []
        for i, entity_type in enumerate(types):
            name = names[i] if names else None
            if name is None:
                components.append((ENTITY_TYPES[entity_type], MATCH_SPECIFIED, None))
            elif name == DEFAULT:
                components.append((ENTITY_TYPES[entity_type], MATCH_DEFAULT, None))
            else:
                components.append((ENTITY_TYPES[entity_type], MATCH_EXACT, name))
        described = await admin.describe_client_quotas(components, strict=True)
        for entity, values in sorted(described.items(), key=lambda kv: str(kv[0])):
            listed = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
            out.write(f"Quota configs for {describe_entity(entity)} are {listed}\n")
        if types != ["users"] or (names and names[0] == DEFAULT):
            return 0
        users = [names[0]] if names else None
        try:
            credentials = await admin.describe_user_scram_credentials(users)
        except KafkaError as e:
            if users is None or e.code != Errors.RESOURCE_NOT_FOUND or not described:
                raise
            credentials = {}   # the user has quotas and no credential
        for user, infos in sorted(credentials.items()):
            listed = ", ".join(f"{m}=iterations={n}" for m, n in infos)
            out.write(f"SCRAM credential configs for user-principal '{user}' are {listed}\n")
    return 0


def _run_brokers(args) -> int:
    names = args.entity_names or []
    if len(names) > 1:
        raise CliError("give one --entity-name or --entity-default with --entity-type brokers")
    entity_default = names == [DEFAULT]
    entity_name = names[0] if names and not entity_default else None
    if entity_name is not None and not entity_name.isdigit():
        raise CliError(f"--entity-name for brokers is a broker id, not {entity_name!r}")
    if args.all and args.action != "describe":
        raise CliError("--all goes with --describe")
    adds, deletes = {}, []
    if args.action == "alter":
        if not names:
            raise CliError("--alter needs --entity-name or --entity-default")
        if not args.add_config and not args.delete_config:
            raise CliError("--alter needs --add-config or --delete-config")
        adds = parse_broker_configs(args.add_config) if args.add_config else {}
        deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        if args.delete_config is not None and not deletes:
            raise CliError("--delete-config names no config")
        both = set(adds) & set(deletes)
        if both:
            raise CliError(f"{sorted(both)[0]} is both added and deleted")
    elif args.add_config or args.delete_config:
        raise CliError("--add-config and --delete-config go with --alter")
    security = client_security(args)
    return run_async(_run_brokers_async(args, security, entity_default, entity_name, adds,
                                        deletes))


async def _run_brokers_async(args, security, entity_default, entity_name, adds,
                             deletes) -> int:
    from fastlog.client import Admin
    from fastlog.client.admin import RESOURCE_BROKER

    out = sys.stdout
    async with Admin(args.bootstrap_server, client_id="fastlog-configs",
                     security=security) as admin:
        if args.action == "alter":
            name = "" if entity_default else entity_name
            await admin.alter_configs(name, adds, deletes, resource_type=RESOURCE_BROKER)
            out.write("Completed updating default config for brokers in the cluster.\n"
                      if entity_default else
                      f"Completed updating config for broker {name}.\n")
            return 0
        if entity_default:
            names = [""]
        elif entity_name is not None:
            names = [entity_name]
        else:
            await admin.cluster.refresh_metadata()
            names = [str(b) for b in sorted(admin.cluster.brokers)]
        for name in names:
            entries = await admin.describe_configs(name, resource_type=RESOURCE_BROKER,
                                                   include_synonyms=True)
            if name == "":
                out.write("Default configs for brokers in the cluster are:\n")
            else:
                out.write(f"{'All' if args.all else 'Dynamic'} configs for broker {name} "
                          "are:\n")
            own = "DYNAMIC_DEFAULT_BROKER_CONFIG" if name == "" else "DYNAMIC_BROKER_CONFIG"
            for e in entries:
                if not args.all and e.source != own:
                    continue
                value = "null" if e.sensitive or e.value is None else e.value
                synonyms = ", ".join(
                    f"{source}:{key}={'null' if e.sensitive or v is None else v}"
                    for source, key, v in e.synonyms)
                out.write(f"  {e.name}={value} sensitive={str(e.sensitive).lower()} "
                          f"synonyms={{{synonyms}}}\n")
    return 0
