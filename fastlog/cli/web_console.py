# fastlog/cli/web_console.py: `fastlog console`, the web console over any Kafka-compatible
# cluster (fastlog.console).
#
#   fastlog console --bootstrap-server 127.0.0.1:9092 [--port 8080] [--host 127.0.0.1]
#       [--read-only] [--metrics-url http://127.0.0.1:9644/metrics ...]
#       [--command-config FILE] [-X KEY=VALUE ...]
#
# Parses the options, checks that the cluster answers (one sentence and exit status 1 if
# not), then serves the console with aiohttp on the client's event loop until interrupted.
# Prints one line with the URL once it listens. Runs on the CLI's main thread.

from __future__ import annotations

import asyncio
import signal
import sys

from fastlog.cli.main import (
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    client_security,
    positive_int,
)
from fastlog.client.sync import run_async

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "console", help="web console: topics, messages, consumer groups, charts, ACLs",
        description="Serve a web console for a Kafka-compatible cluster: brokers and health, "
                    "topics and their messages, consumer groups and lag, live charts, ACLs "
                    "and SCRAM users. It talks to the cluster only through the Kafka "
                    "protocol (and the brokers' /metrics when given).")
    add_bootstrap_option(p)
    add_client_config_options(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: %(default)s; anyone who can reach "
                        "it can use the console)")
    p.add_argument("--port", type=_port, default=8080, help="port to listen on "
                   "(default: %(default)s; 0 picks a free one)")
    p.add_argument("--read-only", action="store_true",
                   help="refuse every change (create, delete, produce, reset, ACLs, users)")
    p.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                   help="a broker's Prometheus /metrics to chart; repeatable")
    p.add_argument("--sample-interval", type=positive_int, default=5, metavar="SECONDS",
                   help="how often the charts sample offsets and metrics (default: "
                        "%(default)s)")


def _port(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number (0-65535)")
    return value


def run(args) -> int:
    from fastlog.perf.broker_metrics import check_url

    security = client_security(args)
    for u in args.metrics_url:
        try:
            check_url(u)
        except Exception as exc:  # noqa: BLE001 - FastlogError: one sentence
            raise CliError(str(exc).replace("--broker-metrics", "--metrics-url")) from None
    return run_async(_serve(args, security))


async def _serve(args, security) -> int:
    from aiohttp import web

    from fastlog.console.app import Console, make_app

    # Bound to loopback, the console answers only to loopback names; bound elsewhere, to
    # whatever name reaches it.
    allowed = LOOPBACK if args.host in LOOPBACK else None
    console = Console(args.bootstrap_server, security=security, read_only=args.read_only,
                      metrics_urls=args.metrics_url, sample_interval=args.sample_interval,
                      allowed_hosts=allowed)
    try:
        await console.admin.start()
    except Exception:
        await console.admin.close()
        raise
    runner = web.AppRunner(make_app(console), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, args.host, args.port)
        try:
            await site.start()
        except OSError as exc:
            raise CliError(f"cannot listen on {args.host}:{args.port}: "
                           f"{exc.strerror or exc}") from None
        host, port = runner.addresses[0][:2]
        if args.host not in LOOPBACK:
            sys.stderr.write(f"fastlog console: warning: listening on {args.host}: anyone who "
                             "can reach it acts on the cluster as this console (it has no "
                             "login of its own)\n")
        mode = " (read-only)" if args.read_only else ""
        sys.stdout.write(f"fastlog console{mode} for {args.bootstrap_server} at "
                         f"http://{host}:{port}/\n")
        sys.stdout.flush()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0
