# fastlog/cli/server.py — the `fastlog-server` entry point (Kafka's kafka-server-start).
#
# Owns: the command line (`fastlog-server [server.properties] [--override key=value ...]`),
# the process-wide settings (logging, the interpreter's switch interval: see
# apply_process_settings), the asyncio (uvloop) API loop that runs BrokerServer, and
# signal handling: SIGTERM/SIGINT trigger an orderly shutdown (checkpoints and the
# clean-shutdown marker, so the next start needs no recovery). A bad config key or value,
# or a startup problem, prints one sentence on stderr and exits non-zero (2 for
# configuration, 1 for startup, and 1 when the broker halts: every log dir failed).
# Prints one line on stdout once the broker is serving:
#   fastlog-server: listening on PLAINTEXT://HOST:PORT (node N, cluster C), data in DIR
# (tests parse it to learn the port when listeners use port 0); on a terminal it is set
# apart by blank lines and followed by how to stop the broker.
"""fastlog-server command line."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys

from fastlog.server.config import ConfigError, KafkaConfig

EXIT_CONFIG = 2
EXIT_STARTUP = 1

_DESCRIPTION = """\
Run a fastlog broker: a Kafka-wire-compatible commit log that Kafka clients
(confluent-kafka, kcat, kafka-python, aiokafka, Java) use unchanged.

Configuration uses Kafka's server.properties key names (broker.id, listeners,
advertised.listeners, log.dirs, num.partitions, log.retention.hours, ...), read from
the optional properties file, then from --override options. With no arguments the
broker listens on PLAINTEXT://127.0.0.1:9092 and keeps its data in ./data.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fastlog-server", description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", metavar="server.properties",
                   help="Java-style properties file with Kafka broker keys")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set one config key, overriding the file (repeatable)")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="broker log verbosity on stderr (default INFO)")
    p.add_argument("--request-log", action="store_true",
                   help="log one line per request (API, version, client id, principal, "
                        "sizes, time) on the kafka.request.logger logger, as Kafka's "
                        "request logger at DEBUG; off by default, whatever --log-level says")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = KafkaConfig.from_sources(args.config, args.override)
    except ConfigError as e:
        print(f"fastlog-server: {e}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr)
    logging.getLogger("kafka.request.logger").setLevel(
        logging.DEBUG if args.request_log else logging.INFO)
    apply_process_settings(config)
    inert = config.inert_keys()
    if inert:
        logging.getLogger("fastlog.server.config").warning(
            "%s: accepted from Kafka's configuration but without effect in fastlog",
            ", ".join(inert))
    for sentence in config.deprecation_warnings():
        logging.getLogger("fastlog.server.config").warning("%s", sentence)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a runtime dependency
        uvloop = None
    runner = asyncio.Runner(loop_factory=uvloop.new_event_loop if uvloop else None)
    try:
        with runner:
            return runner.run(_serve(config))
    except KeyboardInterrupt:
        return 130


def apply_process_settings(config: KafkaConfig) -> None:
    """What the broker's config sets for the whole process: the switch interval, i.e. how
    soon a thread running Python (the log cleaner) hands the interpreter lock to the
    request loop that waits for it after each syscall."""
    sys.setswitchinterval(config["fastlog.gil.switch.interval.ms"] / 1000.0)


async def _serve(config: KafkaConfig) -> int:
    from fastlog.security import SecurityConfigError
    from fastlog.server.broker import BrokerServer, BrokerStartupError
    from fastlog.server.log.config import LogConfigError

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    broker = BrokerServer(config)
    starting = asyncio.ensure_future(broker.startup())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        # Stopped while starting (e.g. still reaching ZooKeeper): give up the start.
        starting.cancel()
        await asyncio.wait({starting})
        await broker.shutdown()
        print("fastlog-server: stopped before it started serving", flush=True)
        return 0
    stopping.cancel()
    try:
        starting.result()
    except BrokerStartupError as e:
        print(f"fastlog-server: {e}", file=sys.stderr)
        await broker.shutdown()
        return EXIT_STARTUP
    except LogConfigError as e:
        # KafkaConfig has checked the broker's log defaults; this is a topic's own
        # stored config, refused when its log opens.
        print(f"fastlog-server: cannot start: {e}", file=sys.stderr)
        await broker.shutdown()
        return EXIT_CONFIG
    except SecurityConfigError as e:
        # a listener's keystore, truststore or TLS setting (read before anything else)
        print(f"fastlog-server: {e}", file=sys.stderr)
        await broker.shutdown()
        return EXIT_CONFIG
    except OSError as e:
        print(f"fastlog-server: cannot start: {e.strerror or e}"
              f"{' (' + e.filename + ')' if getattr(e, 'filename', None) else ''}",
              file=sys.stderr)
        await broker.shutdown()
        return EXIT_STARTUP
    broker.on_halt = stop.set
    # What startup built (partitions, logs, indexes, the group cache) lives as long as the
    # broker: out of the cyclic collector's reach, a full collection (which holds the
    # interpreter lock, stalling the request loop) walks only what came later.
    gc.collect()
    gc.freeze()
    listeners = ", ".join(f"{proto}://{host}:{port}" for proto, host, port in broker.bound)
    ready = (f"fastlog-server: listening on {listeners} (node {broker.node_id}, cluster "
             f"{broker.metadata.cluster_id}), data in {', '.join(broker.log_dirs)}")
    if sys.stdout.isatty():
        # Set apart from the log lines above it: the one line a person waits for.
        ready = f"\n{ready}\nfastlog-server: ready; Ctrl-C stops it\n"
    print(ready, flush=True)
    try:
        await stop.wait()
    finally:
        await broker.shutdown()
    if broker.halted is not None:
        return EXIT_STARTUP  # (the reason is in the log: every log dir failed)
    print("fastlog-server: stopped cleanly", flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
