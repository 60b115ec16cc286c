# fastlog/cli/main.py: the `fastlog` command, a dispatcher over subcommand modules.
#
# Each subcommand lives in its own module exposing add_parser(subparsers) and
# run(args) -> int; COMMANDS maps the command name to that module and a one-line summary,
# so `fastlog --help` lists every command without importing any of them (a slow import,
# e.g. of pyspark, only costs the command that needs it). The dispatcher is also the last
# line of defence for the "one sentence on stderr, non-zero exit, never a traceback" rule:
# expected failures are FastlogError (printed as is), anything else is reported in one line
# (set FASTLOG_DEBUG=1 to see the traceback). Runs on the main thread of its own process.

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> (module[:add_parser function], summary). Modules are imported only when their
# command runs; the function defaults to add_parser (console.py serves two commands).
COMMANDS: dict[str, tuple[str, str]] = {
    "topics": ("fastlog.cli.topics", "create, list, describe, alter and delete topics"),
    "produce": ("fastlog.cli.console:add_produce_parser",
                "console producer: write lines from stdin to a topic"),
    "consume": ("fastlog.cli.console:add_consume_parser",
                "console consumer: print a topic's records"),
    "consumer-groups": ("fastlog.cli.consumer_groups",
                        "list and describe consumer groups, reset their offsets"),
    "dump-log": ("fastlog.cli.dump_log", "print the batches and records of log segment files"),
    "reassign-partitions": ("fastlog.cli.reassign_partitions",
                            "move partition replicas between brokers (JSON plan)"),
    "perf": ("fastlog.cli.perf", "produce/consume load tests"),
    "configs": ("fastlog.cli.configs", "add, describe and delete SCRAM credentials and client quotas"),
    "acls": ("fastlog.cli.acls", "add, list and remove ACLs"),
    "console": ("fastlog.cli.web_console",
                "web console: topics, messages, consumer groups, charts, ACLs"),
    "leader-election": ("fastlog.cli.leader_election",
                        "elect preferred (or unclean) partition leaders"),
    "transactions": ("fastlog.cli.transactions", "list and describe transactions"),
    "log-dirs": ("fastlog.cli.log_dirs", "describe the brokers' log dirs and partition sizes"),
}


class CliError(Exception):
    """A bad command line or input: printed as one sentence, exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one sentence and never exit with a traceback."""

    def error(self, message):  # noqa: D401 - argparse's hook
        self.exit(2, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def _build_parser(command: str | None):
    parser = ArgumentParser(
        prog="fastlog",
        description="fastlog admin and console tools (Kafka-compatible).",
        epilog="Run 'fastlog COMMAND --help' for a command's options.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND",
                                parser_class=ArgumentParser)
    for name, (module_name, summary) in COMMANDS.items():
        if name != command:
            sub.add_parser(name, help=summary, add_help=False)
            continue
        module_name, _, function = module_name.partition(":")
        module = importlib.import_module(module_name)
        before = set(sub.choices)
        getattr(module, function or "add_parser")(sub)
        for added in set(sub.choices) - before:
            sub.choices[added].set_defaults(_module=module)
    return parser


def _find_command(argv: list[str]) -> str | None:
    for arg in argv:
        if arg in COMMANDS:
            return arg
        if not arg.startswith("-"):
            return None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _find_command(argv)
    try:
        parser = _build_parser(command)
    except Exception as exc:  # noqa: BLE001 - a broken or missing subcommand module
        if os.environ.get("FASTLOG_DEBUG"):
            raise
        print(f"fastlog {command}: this command is not available "
              f"({type(exc).__name__}: {_sentence(exc)})", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    module = getattr(args, "_module", None)
    if module is None:
        print(f"fastlog {args.command}: this command is not available", file=sys.stderr)
        return 1
    return _run(args.command, module, args)


def _run(command: str, module, args) -> int:
    from fastlog.client.errors import FastlogError

    # A parser may name its function with set_defaults(run=...) (one module, two commands).
    runner = getattr(args, "run", None)
    if not callable(runner):
        runner = module.run
    try:
        status = runner(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of our stdout went away (e.g. `| head`): not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the final flush
        except OSError:
            pass
        return 0
    except (FastlogError, CliError) as exc:
        print(f"fastlog {command}: {_sentence(exc)}", file=sys.stderr)
        return 2 if isinstance(exc, CliError) else 1
    except Exception as exc:  # noqa: BLE001 - the promise is: never a traceback
        if os.environ.get("FASTLOG_DEBUG"):
            raise
        print(f"fastlog {command}: unexpected error: {type(exc).__name__}: {_sentence(exc)}",
              file=sys.stderr)
        return 1
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    return int(status or 0)


# -- helpers shared by subcommand modules ------------------------------------------------

def add_bootstrap_option(parser) -> None:
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT",
                        help="broker to connect to (default: %(default)s)")


def add_client_config_options(parser, x_help: str = "one client setting, as kcat's -X; "
                                                   "repeatable") -> None:
    """--command-config FILE and -X KEY=VALUE: the client's security settings, Kafka's
    client keys (security.protocol, sasl.mechanism, sasl.username, sasl.password,
    sasl.jaas.config); read with client_security(args) (or client_config(args))."""
    parser.add_argument("--command-config", metavar="FILE",
                        help="client settings in a properties file (security.protocol, "
                             "sasl.mechanism, sasl.username, sasl.password)")
    parser.add_argument("-X", dest="client_config", action="append", default=[],
                        metavar="KEY=VALUE", help=x_help)


def client_config(args) -> dict[str, str]:
    """The settings of --command-config and -X (the -X settings win), unchecked;
    CliError with one sentence for a file that cannot be read or a malformed -X."""
    from fastlog.server.config import ConfigError, KafkaConfig

    props: dict[str, str] = {}
    if args.command_config:
        try:
            props.update(KafkaConfig.read_properties(args.command_config))
        except ConfigError as e:
            raise CliError(str(e)) from None
    for item in args.client_config:
        key, value = parse_key_value(item, "-X")
        props[key] = value
    return props


def client_security(args):
    """The fastlog.client.security.ClientSecurity of --command-config and -X (the -X
    settings win); CliError with one sentence for a setting the client cannot honour."""
    from fastlog.client.errors import FastlogError
    from fastlog.client.security import ClientSecurity

    try:
        return ClientSecurity.from_config(client_config(args))
    except FastlogError as e:
        raise CliError(str(e)) from None


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None


def non_negative_int(text: str) -> int:
    """argparse type: a whole number >= 0 (a partition, a delay)."""
    value = _whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"'{text}' must not be negative")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (a count, a size, a timeout)."""
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}' must be at least 1")
    return value


# Bounds of Kafka's wire fields: a value outside them is refused on the command line, in
# words, rather than failing to encode once a request is built.
INT16_MAX = (1 << 15) - 1
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1


def bounded_int(low: int, high: int):
    """argparse type factory: a whole number in [low, high]."""
    def parse(text: str) -> int:
        value = _whole_number(text)
        if value < low:
            raise argparse.ArgumentTypeError(
                f"'{text}' must not be negative" if low == 0 else
                f"'{text}' must be at least {low}")
        if value > high:
            raise argparse.ArgumentTypeError(f"'{text}' must be at most {high}")
        return value
    return parse


partition_count = bounded_int(1, INT32_MAX)      # CreateTopics/CreatePartitions: int32
replication_factor = bounded_int(1, INT16_MAX)   # CreateTopics: int16
partition_index = bounded_int(0, INT32_MAX)      # every partition field: int32
offset_value = bounded_int(0, INT64_MAX)         # Fetch/OffsetCommit offsets: int64


def _shown(text: str, limit: int = 60) -> str:
    """text quoted for a message, cut short if long (a name may be thousands of bytes)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} chars)"


def topic_name(text: str) -> str:
    """argparse type: a legal Kafka topic name (1-249 of [a-zA-Z0-9._-], not '.' or '..')."""
    from fastlog.protocol.topics import topic_name_problem

    if topic_name_problem(text) is not None:
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is not a legal topic name: it must be 1-249 characters of "
            "a-z, A-Z, 0-9, '.', '_' and '-', and not '.' or '..'")
    return text


def group_id(text: str) -> str:
    """argparse type: a consumer group id, non-empty and within Kafka's int16 string length."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > INT16_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {INT16_MAX} bytes long, not {size}")
    return text


def parse_key_value(text: str, what: str = "--config") -> tuple[str, str]:
    """'k=v' -> ('k', 'v'); CliError with one sentence otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise CliError(f"bad {what} value '{text}': expected KEY=VALUE")
    return key.strip(), value


def _sentence(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text


if __name__ == "__main__":
    sys.exit(main())
