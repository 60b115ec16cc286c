# fastlog/cli/configs.py: `fastlog configs`, kafka-configs.sh for users' SCRAM credentials
# and brokers' dynamic configs.
#
#   fastlog configs --bootstrap-server B --alter --entity-type users --entity-name alice \
#       --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'
#   fastlog configs --bootstrap-server B --alter --entity-type users --entity-name alice \
#       --delete-config SCRAM-SHA-512
#   fastlog configs --bootstrap-server B --describe --entity-type users [--entity-name alice]
#   fastlog configs --bootstrap-server B --alter --entity-type brokers \
#       (--entity-name 1 | --entity-default) --add-config log.retention.ms=3600000
#   fastlog configs --bootstrap-server B --alter --entity-type brokers --entity-default \
#       --delete-config log.retention.ms
#   fastlog configs --bootstrap-server B --describe --entity-type brokers \
#       [--entity-name 1 | --entity-default] [--all]
#
# Through fastlog.client.Admin (AlterUserScramCredentials, DescribeUserScramCredentials;
# IncrementalAlterConfigs and DescribeConfigs of BROKER resources, "" naming the cluster
# default): the password is salted here and never sent. Output follows kafka-configs.sh.
# Bad input is one sentence and exit status 2. Runs on the CLI's main thread with its own
# loop.

from __future__ import annotations

import sys

from fastlog.cli.main import (
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    client_security,
)
from fastlog.client.sync import run_async
from fastlog.protocol.api_keys import SCRAM_MECHANISM_TYPES
from fastlog.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS

SCRAM = tuple(SCRAM_MECHANISM_TYPES.values())


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "configs", help="add, describe and delete SCRAM credentials of users and dynamic "
                        "configs of brokers",
        description="Add, describe and delete the SCRAM credentials of users and the "
                    "dynamic configs of brokers (like kafka-configs.sh --entity-type users "
                    "or brokers).")
    add_bootstrap_option(p)
    add_client_config_options(p)
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument("--alter", dest="action", action="store_const", const="alter",
                         help="add or delete configs of an entity")
    actions.add_argument("--describe", dest="action", action="store_const", const="describe",
                         help="list the SCRAM credentials of users or the configs of brokers")
    p.add_argument("--entity-type", required=True, help="users or brokers")
    p.add_argument("--entity-name", help="the user, or the broker id")
    p.add_argument("--entity-default", action="store_true",
                   help="brokers: the cluster-wide default of every broker")
    p.add_argument("--all", action="store_true",
                   help="brokers, with --describe: every config, not only the dynamic ones")
    p.add_argument("--add-config", metavar="CONFIGS",
                   help="e.g. 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]' or "
                        "'log.retention.ms=3600000,log.cleanup.policy=[delete,compact]'")
    p.add_argument("--delete-config", metavar="KEYS",
                   help="e.g. 'SCRAM-SHA-512' or 'log.retention.ms'")
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


def parse_add_config(text: str) -> list[tuple[str, str, int]]:
    """[(mechanism, password, iterations)] of --add-config."""
    out = []
    for item in split_top_level(text):
        key, sep, value = item.partition("=")
        key = key.strip()
        if key not in SCRAM:
            raise CliError(f"--add-config for users takes only {' and '.join(SCRAM)}, "
                           f"not {key!r}")
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
        out.append((key, fields["password"], iterations))
    if not out:
        raise CliError("--add-config names no config")
    return out


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


def parse_delete_config(text: str, users: bool = True) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    for key in keys:
        if users and key not in SCRAM:
            raise CliError(f"--delete-config for users takes only {' and '.join(SCRAM)}, "
                           f"not {key!r}")
    if not keys:
        raise CliError("--delete-config names no config")
    return keys


def run(args) -> int:
    if args.entity_type == "brokers":
        return _run_brokers(args)
    if args.entity_type != "users":
        raise CliError(f"--entity-type {args.entity_type!r} is not served: fastlog configs "
                       "handles users and brokers (topic configs: fastlog topics --alter)")
    if args.entity_default or args.all:
        raise CliError("--entity-default and --all go with --entity-type brokers")
    security = client_security(args)
    if args.action == "alter" and not args.entity_name:
        raise CliError("--alter needs --entity-name")
    adds, deletes = _changes(args, parse_add_config, parse_delete_config,
                             lambda adds: [m for m, _, _ in adds], [])
    return run_async(_run(args, security, adds, deletes))


def _changes(args, parse_adds, parse_deletes, added_keys, nothing):
    """(what --add-config adds, the keys --delete-config deletes) of --alter, each
    checked; (nothing, []) for --describe."""
    if args.action != "alter":
        if args.add_config or args.delete_config:
            raise CliError("--add-config and --delete-config go with --alter")
        return nothing, []
    if not args.add_config and not args.delete_config:
        raise CliError("--alter needs --add-config or --delete-config")
    adds = parse_adds(args.add_config) if args.add_config else nothing
    deletes = parse_deletes(args.delete_config) if args.delete_config else []
    both = set(added_keys(adds)) & set(deletes)
    if both:
        raise CliError(f"{sorted(both)[0]} is both added and deleted")
    return adds, deletes


async def _run(args, security, adds, deletes) -> int:
    from fastlog.client import Admin

    out = sys.stdout
    async with Admin(args.bootstrap_server, client_id="fastlog-configs",
                     security=security) as admin:
        if args.action == "alter":
            user = args.entity_name
            await admin.alter_user_scram_credentials(
                [(user, m, password, n) for m, password, n in adds],
                [(user, m) for m in deletes])
            out.write(f"Completed updating config for user {user}.\n")
            return 0
        users = [args.entity_name] if args.entity_name else None
        for user, infos in sorted((await admin.describe_user_scram_credentials(users)).items()):
            listed = ", ".join(f"{m}=iterations={n}" for m, n in infos)
            out.write(f"SCRAM credential configs for user-principal '{user}' are {listed}\n")
    return 0


def _run_brokers(args) -> int:
    if args.entity_default and args.entity_name:
        raise CliError("give --entity-name or --entity-default, not both")
    if args.entity_name is not None and not args.entity_name.isdigit():
        raise CliError(f"--entity-name for brokers is a broker id, not {args.entity_name!r}")
    security = client_security(args)
    if args.action == "alter" and args.entity_name is None and not args.entity_default:
        raise CliError("--alter needs --entity-name or --entity-default")
    adds, deletes = _changes(args, parse_broker_configs,
                             lambda text: parse_delete_config(text, users=False), list, {})
    if args.all and args.action != "describe":
        raise CliError("--all goes with --describe")
    return run_async(_run_brokers_async(args, security, adds, deletes))


async def _run_brokers_async(args, security, adds, deletes) -> int:
    from fastlog.client import Admin
    from fastlog.client.admin import RESOURCE_BROKER

    out = sys.stdout
    async with Admin(args.bootstrap_server, client_id="fastlog-configs",
                     security=security) as admin:
        if args.action == "alter":
            name = "" if args.entity_default else args.entity_name
            await admin.alter_configs(name, adds, deletes, resource_type=RESOURCE_BROKER)
            out.write("Completed updating default config for brokers in the cluster.\n"
                      if args.entity_default else
                      f"Completed updating config for broker {name}.\n")
            return 0
        if args.entity_default:
            names = [""]
        elif args.entity_name is not None:
            names = [args.entity_name]
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
