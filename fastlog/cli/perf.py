# fastlog/cli/perf.py: the `fastlog perf produce|consume|e2e` command line.
#
# Owns: the options of the load tests and their checks (one sentence on a bad value),
# then hands the parsed options to fastlog/perf/{produce,consume,e2e}.py and prints the
# summary (text, or one JSON line with --json; --plot FILE.png adds a chart). -X and
# --command-config take the client's settings: Kafka's security keys (security.protocol,
# sasl.*, ssl.*) become a ClientSecurity for our client (librdkafka's own keys for
# --client confluent, given to every client of the run), the rest are the Producer's or
# Consumer's keyword settings (librdkafka names with --client confluent).
# --broker-metrics URL adds the broker's own figures for the run, read from its /metrics
# before and after (fastlog/perf/broker_metrics.py). Runs on the
# main thread of the `fastlog` process.
"""`fastlog perf`: load tests against any Kafka-compatible broker."""

from __future__ import annotations

import math
import os

from fastlog.cli.main import (
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    client_config,
    topic_name,
)
from fastlog.client.errors import FastlogError
from fastlog.client.security import KEYS as SECURITY_KEYS
from fastlog.client.security import ClientSecurity

# Each connection is a socket on the broker too: past this, a run measures the broker's
# file-handle limit rather than its throughput.
MAX_CONNECTIONS = 1000

_EPILOG = """\
examples:
  fastlog perf produce --topic perf --num-records 1000000 --record-size 100 --acks all
  fastlog perf produce --client confluent --rate 20000 --linger-ms 0 --json
  fastlog perf consume --topic perf --num-records 1000000 --client confluent
  fastlog perf e2e --topic perf-e2e --rate 5000 --duration 10 --plot e2e.png
  fastlog perf produce -X security.protocol=SASL_PLAINTEXT -X sasl.mechanism=PLAIN \
      -X sasl.username=alice -X sasl.password=secret
"""


def add_parser(subparsers) -> None:
    import argparse

    perf = subparsers.add_parser(
        "perf", help="produce/consume load tests",
        description="Load tests (like Kafka's producer/consumer perf tools) for fastlog or "
                    "any Kafka-compatible broker, with our client or librdkafka.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = perf.add_subparsers(dest="perf_command", metavar="TEST",
                              parser_class=type(perf))
    for name, summary in (("produce", "throughput and ack latency of producing"),
                          ("consume", "throughput of reading a topic from the beginning"),
                          ("e2e", "end-to-end latency, produce -> consume")):
        p = sub.add_parser(name, help=summary, description=summary)
        _common_options(p, name)


def _common_options(p, name: str) -> None:
    add_bootstrap_option(p)
    # e2e has its own topic: records of a produce run are not e2e's and would be skipped.
    p.add_argument("--topic", default="fastlog-perf-e2e" if name == "e2e" else "fastlog-perf",
                   type=topic_name, help="topic (default: %(default)s)")
    p.add_argument("--client", choices=("fastlog", "confluent"), default="fastlog",
                   help="fastlog's own client, or librdkafka via confluent-kafka")
    p.add_argument("--num-records", type=int, default=100_000, metavar="N",
                   help="records to send/read (default: %(default)s)")
    p.add_argument("--duration", type=float, default=300.0, metavar="SECONDS",
                   help="stop after this long even if N is not reached (default: %(default)s)")
    p.add_argument("--record-size", type=int, default=100, metavar="BYTES",
                   help="value size (default: %(default)s)")
    add_client_config_options(
        p, "a security setting (security.protocol, sasl.*, ssl.*) or a setting of the "
           "producer (produce, e2e) or the consumer (consume): librdkafka names with "
           "--client confluent, fastlog Producer/Consumer keyword names otherwise; repeatable")
    p.add_argument("--json", action="store_true", help="print one JSON line, nothing else")
    p.add_argument("--plot", metavar="FILE.png",
                   help="write a throughput/latency chart (needs the 'perf' extra)")
    p.add_argument("--broker-metrics", metavar="URL",
                   help="the broker's Prometheus endpoint (fastlog's http.listener, e.g. "
                        "http://127.0.0.1:9644/metrics): report the broker's own CPU, records "
                        "and bytes for the run, read before and after it")
    if name == "consume":
        p.add_argument("--idle-ms", type=int, default=3000,
                       help="stop when nothing arrived for this long (default: %(default)s)")
        return
    p.add_argument("--key-distribution", choices=("none", "sequential", "random"),
                   default="none", help="record keys (default: %(default)s)")
    p.add_argument("--key-count", type=int, default=1000,
                   help="distinct keys for sequential/random (default: %(default)s)")
    p.add_argument("--partitions", type=int, default=1,
                   help="partitions when the topic is created (default: %(default)s)")
    p.add_argument("--connections", type=int, default=1,
                   help="producer instances, each with its own connection, at most "
                        f"{MAX_CONNECTIONS} (default: 1)")
    p.add_argument("--rate", type=float, default=None, metavar="REC/S",
                   help="target records/s (default: as fast as possible)")
    p.add_argument("--acks", choices=("0", "1", "all"), default="1",
                   help="(default: %(default)s)")
    p.add_argument("--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"),
                   default="none", help="(default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=None, metavar="BYTES",
                   help="producer batch size (default: the client's own)")
    p.add_argument("--linger-ms", type=float, default=5.0,
                   help="producer linger (default: %(default)s)")
    p.add_argument("--sample-every", type=int, default=None, metavar="K",
                   help="record the latency of every K-th record (default: 1 with --rate, "
                        "else 100)")
    if name == "e2e":
        p.set_defaults(num_records=20_000, rate=5000.0, duration=60.0)
        p.add_argument("--idle-ms", type=int, default=3000,
                       help="stop waiting for stragglers after this long (default: %(default)s)")


def _value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _positive(x) -> bool:
    return math.isfinite(x) and x > 0


def _check(args) -> None:
    if args.num_records < 1:
        raise CliError("--num-records must be at least 1")
    if not _positive(args.duration):
        raise CliError("--duration must be a positive number of seconds")
    if args.record_size < 0 or args.record_size > 64 << 20:
        raise CliError("--record-size must be between 0 and 64 MiB")
    for attr in ("partitions", "connections", "key_count"):
        if getattr(args, attr, 1) < 1:
            raise CliError(f"--{attr.replace('_', '-')} must be at least 1")
    if getattr(args, "connections", 1) > MAX_CONNECTIONS:
        raise CliError(f"--connections must be at most {MAX_CONNECTIONS}")
    if getattr(args, "rate", None) is not None and not _positive(args.rate):
        raise CliError("--rate must be a positive number of records per second")
    linger = getattr(args, "linger_ms", 0)
    if not math.isfinite(linger) or linger < 0:
        raise CliError("--linger-ms must be a number >= 0")
    if getattr(args, "batch_size", None) is not None and args.batch_size < 1:
        raise CliError("--batch-size must be at least 1")
    if getattr(args, "sample_every", None) is not None and args.sample_every < 1:
        raise CliError("--sample-every must be at least 1")
    if getattr(args, "idle_ms", 0) < 0:
        raise CliError("--idle-ms must be >= 0")
    if args.plot:
        _check_plot(args.plot)
    settings = client_config(args)
    secure = {k: v for k, v in settings.items() if k in SECURITY_KEYS}
    extra = {k: v for k, v in settings.items() if k not in SECURITY_KEYS}
    try:
        security = ClientSecurity.from_config(secure)
    except FastlogError as e:
        raise CliError(str(e)) from None
    if args.client == "confluent":
        args.probe_security = security
        args.security = _librdkafka_security(secure, security)
        args.extra_config = extra  # librdkafka checks its own names when the client starts
    else:
        args.security = args.probe_security = security
        args.extra_config = _fastlog_settings(args.perf_command, extra)
    if getattr(args, "compression", None) == "none":
        args.compression = None if args.client == "fastlog" else "none"
    if getattr(args, "acks", None) is not None and args.client == "fastlog":
        args.acks = -1 if args.acks == "all" else int(args.acks)


def _check_plot(path: str) -> None:
    from fastlog.perf import report

    report.check_plot_available(path)
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext not in report.plot_formats():
        raise CliError(f"--plot {path}: name a file ending in .png (or another format "
                       f"matplotlib writes: {', '.join(sorted(report.plot_formats()))})")


def _librdkafka_security(secure: dict[str, str], security) -> dict[str, str]:
    """The security keys for librdkafka: the same keys, but the Java client's
    sasl.jaas.config (which librdkafka lacks) as sasl.username and sasl.password."""
    out = dict(secure)
    if out.pop("sasl.jaas.config", None) is not None:
        out["sasl.username"], out["sasl.password"] = security.username, security.password
    return out


# Keyword parameters of Producer/Consumer that take objects, not settings.
_NOT_SETTINGS = {"cluster", "group", "on_delivery_error", "security"}
_KINDS = {"bool": "true or false", "int": "a whole number", "float": "a finite number",
          "str": "text"}


def _fastlog_settings(test: str, extra: dict[str, str]) -> dict:
    """-X KEY=VALUE for our client, checked against the constructor's keyword parameters
    (and their annotated types) so a typo is one sentence, not a TypeError mid-run."""
    import inspect

    from fastlog.client import Consumer, Producer

    cls = Consumer if test == "consume" else Producer
    params = inspect.signature(cls.__init__).parameters
    out = {}
    for key, text in extra.items():
        param = params.get(key)
        kinds = set()
        if param is not None and param.annotation is not inspect.Parameter.empty:
            kinds = {k.strip() for k in str(param.annotation).split("|")} - {"None"}
        if (param is None or param.kind is not inspect.Parameter.KEYWORD_ONLY
                or key in _NOT_SETTINGS or not kinds <= set(_KINDS)):
            hint = " (librdkafka names need --client confluent)" if "." in key else ""
            raise CliError(f"-X {key}: not a setting of fastlog's {cls.__name__}{hint}")
        out[key] = _typed(key, text, kinds) if kinds else _value(text)
    return out


def _typed(key: str, text: str, kinds: set[str]):
    if "bool" in kinds and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if "int" in kinds:
        try:
            return int(text)
        except ValueError:
            pass
    if "float" in kinds:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return value
    if "str" in kinds:
        return text
    expected = " or ".join(_KINDS[k] for k in sorted(kinds))
    raise CliError(f"-X {key}={text}: expected {expected}")


def _check_reachable(bootstrap: str, security) -> None:
    """Fail in one sentence when no bootstrap server answers. librdkafka would retry for
    its whole timeout and log every attempt; our own client asks once (a Metadata
    request, which any Kafka broker answers) and says why it could not connect or
    authenticate."""
    from fastlog.client import Admin
    from fastlog.client.sync import run_async

    async def probe():
        async with Admin(bootstrap, security=security):
            pass

    run_async(probe())


def run(args) -> int:
    if not getattr(args, "perf_command", None):
        raise CliError("name a test: produce, consume or e2e (see 'fastlog perf --help')")
    _check(args)
    if args.client == "confluent":
        _check_reachable(args.bootstrap_server, args.probe_security)
    from fastlog.perf import broker_metrics, report

    url = getattr(args, "broker_metrics", None)
    before = broker_metrics.scrape(broker_metrics.check_url(url)) if url else None
    if args.perf_command == "produce":
        from fastlog.perf import produce as test
    elif args.perf_command == "consume":
        from fastlog.perf import consume as test
    else:
        from fastlog.perf import e2e as test
    summary, hist, progress = test.run(args)
    if before is not None:
        summary["broker"] = broker_metrics.difference(
            before, broker_metrics.scrape(url), summary["records"])
    report.emit(summary, args, hist, progress)
    return 0 if summary["records"] > 0 and not summary.get("errors") else 1
