# fastlog/cli/console.py: `fastlog produce` and `fastlog consume`, the console producer and
# consumer (kafka-console-producer.sh / kafka-console-consumer.sh).
#
# produce: stdin lines (bytes, newline stripped) become records; with parse.key=true the
# text before key.separator is the key. consume: records are written to stdout as bytes,
# formatted by a template (%k key, %v value, %o offset, %p partition, %t topic,
# %T timestamp, %h headers, %% percent; \t \n \\ escapes) or as JSON lines. Both use
# fastlog.client on an event loop of their own, on the CLI's main thread; produce reads
# stdin in a daemon thread of its own (see _lines).

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import sys
import threading
import time

from fastlog.cli.main import (
    CliError,
    add_bootstrap_option,
    add_client_config_options,
    client_security,
    group_id,
    non_negative_int,
    offset_value,
    parse_key_value,
    partition_index,
    positive_int,
    topic_name,
)
from fastlog.client.sync import run_async

# How long an interrupted producer still tries to write the lines it has read.
INTERRUPT_FLUSH_S = 5.0
# Without --timeout-ms, how long joining a group may take (its rebalance timeout is 30 s).
JOIN_TIMEOUT_MS = 60000

# -- produce ------------------------------------------------------------------------------


def add_produce_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "produce", help="console producer: write lines from stdin to a topic",
        description="Read lines from stdin and produce each as one record.")
    add_bootstrap_option(p)
    add_client_config_options(p)
    p.add_argument("--topic", required=True, type=topic_name, help="topic to write to")
    p.add_argument("--partition", type=partition_index, metavar="P",
                   help="write every record to this partition (default: by key / sticky)")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="parse.key=true|false, key.separator=SEP (default TAB); repeatable")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                   help="header added to every record; repeatable")
    p.add_argument("--compression", default="none",
                   choices=("none", "gzip", "snappy", "lz4", "zstd"),
                   help="compression codec (default: %(default)s)")
    p.add_argument("--acks", default="all", choices=("0", "1", "all", "-1"),
                   help="acknowledgements to wait for (default: %(default)s)")
    p.add_argument("--idempotence", action="store_true",
                   help="idempotent producer (needs --acks all)")
    p.add_argument("--linger-ms", type=non_negative_int, default=5, metavar="MS",
                   help="batching delay (default: %(default)s)")
    p.add_argument("--batch-size", type=positive_int, default=16384, metavar="BYTES",
                   help="batch size (default: %(default)s)")
    p.add_argument("--timeout-ms", type=positive_int, default=30000, metavar="MS",
                   help="give up on a record after this long (default: %(default)s)")
    p.set_defaults(run=run_produce)


_PRODUCE_PROPERTIES = {"parse.key", "key.separator", "ignore.error"}


def run_produce(args) -> int:
    props = dict(parse_key_value(p, "--property") for p in args.property)
    unknown = set(props) - _PRODUCE_PROPERTIES
    if unknown:
        raise CliError(f"unknown --property {sorted(unknown)[0]!r} (known: "
                       f"{', '.join(sorted(_PRODUCE_PROPERTIES))})")
    parse_key = props.get("parse.key", "false").lower()
    if parse_key not in ("true", "false"):
        raise CliError(f"bad parse.key value '{props['parse.key']}': expected true or false")
    separator = _unescape(props.get("key.separator", "\t")).encode()
    if not separator:
        raise CliError("key.separator must not be empty")
    headers = [(k, v.encode()) for k, v in
               (parse_key_value(h, "--header") for h in args.header)]
    if args.idempotence and args.acks not in ("all", "-1"):
        raise CliError("--idempotence needs --acks all")
    try:
        stdin = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):
        raise CliError("cannot read stdin: it is closed") from None
    return run_async(_produce(args, stdin, parse_key == "true", separator, headers))


async def _produce(args, stdin: int, parse_key: bool, separator: bytes, headers) -> int:
    from fastlog.client import Producer, errors

    failures: list[Exception] = []
    producer = Producer(args.bootstrap_server, client_id="fastlog-console-producer",
                        security=client_security(args),
                        acks=args.acks, compression=args.compression,
                        linger_ms=args.linger_ms, batch_size=args.batch_size,
                        enable_idempotence=args.idempotence,
                        delivery_timeout_ms=args.timeout_ms,
                        request_timeout_ms=min(args.timeout_ms, 30000),
                        allow_auto_create_topics=True,
                        on_delivery_error=lambda tp, exc: failures.append(exc))
    # SIGTERM ends the producer as Ctrl-C does (lines read are still written), exit 143.
    terminated: list[bool] = []
    task = asyncio.current_task()

    def on_sigterm() -> None:
        terminated.append(True)
        task.cancel()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_sigterm)
    sent = 0
    try:
        await producer.start()
        await producer.cluster.topic(args.topic, allow_auto_create=True)
        async for line in _lines(stdin):
            key = None
            if parse_key:
                key, sep, value = line.partition(separator)
                if not sep:
                    raise CliError(f"line {sent + 1} has no key separator "
                                   f"{separator.decode()!r}")
            else:
                value = line
            await producer.send(args.topic, value, key, partition=args.partition,
                                headers=headers or None)
            sent += 1
            if failures:
                break
        await producer.flush()
    except asyncio.CancelledError:
        # Ctrl-C: hand over the lines already read, without waiting long on the broker.
        try:
            await producer.close(INTERRUPT_FLUSH_S)
        except errors.FastlogError:
            print("fastlog produce: interrupted before every line read was written",
                  file=sys.stderr)
        if terminated:
            return 128 + signal.SIGTERM
        raise
    finally:
        await producer.close()
    if failures:
        if isinstance(failures[0], errors.FastlogError):
            raise failures[0]
        raise errors.FastlogError(f"a record was not written: {failures[0]}")
    return 0


def _read_stdin(fd: int, loop, chunks: asyncio.Queue, room: threading.Semaphore) -> None:
    """Reader thread: stdin's chunks (b"" at its end, or the OSError) into chunks, at most
    STDIN_CHUNKS_AHEAD of them waiting (room): stdin is read no faster than it is
    produced. Nothing here makes a coroutine, so a loop that closes meanwhile leaves
    nothing un-awaited behind."""
    import select

    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:  # a non-blocking stdin, inherited as such
            select.select([fd], [], [])
            continue
        except OSError as exc:
            chunk = exc
        room.acquire()
        try:
            loop.call_soon_threadsafe(chunks.put_nowait, chunk)
        except RuntimeError:
            return  # the loop is closed: nobody wants more
        if not isinstance(chunk, bytes) or not chunk:
            return


STDIN_CHUNKS_AHEAD = 4


async def _lines(fd: int):
    """Lines of stdin (descriptor fd) as bytes without their line ending.

    A blocking read cannot be interrupted, so it runs in a daemon thread: on Ctrl-C the
    loop and the interpreter end without waiting for a line that may never come (an
    executor thread would be joined at loop shutdown). os.read on the descriptor, not
    sys.stdin.buffer, so the abandoned thread holds no lock the interpreter's exit needs.
    """
    chunks: asyncio.Queue = asyncio.Queue()
    room = threading.Semaphore(STDIN_CHUNKS_AHEAD)
    threading.Thread(target=_read_stdin,
                     args=(fd, asyncio.get_running_loop(), chunks, room),
                     name="fastlog-stdin", daemon=True).start()
    tail = b""
    while True:
        chunk = await chunks.get()
        room.release()
        if isinstance(chunk, OSError):
            raise CliError(f"cannot read stdin: {chunk.strerror or chunk}")
        if not chunk:
            break
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        for line in lines:
            yield line[:-1] if line.endswith(b"\r") else line
    if tail:
        yield tail[:-1] if tail.endswith(b"\r") else tail


def _unescape(text: str) -> str:
    return (text.replace("\\\\", "\x00").replace("\\t", "\t").replace("\\n", "\n")
            .replace("\\r", "\r").replace("\x00", "\\"))


# -- consume ------------------------------------------------------------------------------


def add_consume_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "consume", help="console consumer: print a topic's records",
        description="Print records of a topic to stdout.")
    add_bootstrap_option(p)
    add_client_config_options(p)
    p.add_argument("--topic", required=True, type=topic_name, help="topic to read")
    p.add_argument("--partition", type=partition_index, metavar="P",
                   help="read only this partition (default: all)")
    p.add_argument("--offset", type=_start_offset, default=None, metavar="N|earliest|latest",
                   help="where to start in each partition read (default: latest)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset (same as --offset earliest)")
    p.add_argument("--max-messages", type=positive_int, metavar="N",
                   help="exit after printing N records")
    p.add_argument("--timeout-ms", type=positive_int, metavar="MS",
                   help="exit when no record arrived for this long; fail if connecting "
                        "(and joining --group) takes longer")
    p.add_argument("--print-key", action="store_true", help="print the key before the value")
    p.add_argument("--print-headers", action="store_true", help="print the headers")
    p.add_argument("--print-offset", action="store_true", help="print the offset")
    p.add_argument("--print-partition", action="store_true", help="print the partition")
    p.add_argument("--print-timestamp", action="store_true", help="print the timestamp")
    p.add_argument("--key-separator", default="\\t", metavar="SEP",
                   help="between printed fields (default: TAB)")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="kafka-console-consumer style: print.key, print.offset, "
                        "print.partition, print.timestamp, print.headers (true|false), "
                        "key.separator; repeatable")
    p.add_argument("--format", default=None, metavar="TEMPLATE|json",
                   help="output template, e.g. '%%k:%%v\\n' (%%k key, %%v value, %%o offset, "
                        "%%p partition, %%t topic, %%T timestamp, %%h headers), or 'json'")
    p.add_argument("--group", type=group_id, metavar="GROUP",
                   help="consume as a member of this consumer group (partitions assigned by "
                        "the group, offsets committed); without it no offsets are committed")
    p.add_argument("--isolation-level", default="read_uncommitted",
                   choices=("read_uncommitted", "read_committed"))
    p.set_defaults(run=run_consume)


def _start_offset(text: str):
    """--offset: earliest, latest or an offset (Kafka's int64, not negative)."""
    if text in ("earliest", "latest"):
        return text
    try:
        int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not an offset, earliest or latest") from None
    return offset_value(text)


_CONSUME_PROPERTIES = {"print.key", "print.offset", "print.partition", "print.timestamp",
                       "print.headers", "key.separator"}


def _apply_consume_properties(args) -> None:
    for text in args.property:
        key, value = parse_key_value(text, "--property")
        if key not in _CONSUME_PROPERTIES:
            raise CliError(f"unknown --property {key!r} (known: "
                           f"{', '.join(sorted(_CONSUME_PROPERTIES))})")
        if key == "key.separator":
            args.key_separator = value
            continue
        if value.lower() not in ("true", "false"):
            raise CliError(f"bad {key} value '{value}': expected true or false")
        setattr(args, key.replace(".", "_"), value.lower() == "true")


def run_consume(args) -> int:
    _apply_consume_properties(args)
    start = args.offset
    if args.from_beginning:
        if start not in (None, "earliest"):
            raise CliError("--from-beginning and --offset conflict")
        start = "earliest"
    start = start or "latest"
    if args.group is not None and (args.partition is not None or isinstance(start, int)):
        raise CliError("--group cannot be combined with --partition or --offset N")
    if isinstance(start, int) and args.partition is None:
        raise CliError("--offset N needs --partition")
    formatter = _make_formatter(args)
    return run_async(_consume(args, start, formatter))


async def _consume(args, start, formatter) -> int:
    from fastlog.client import Consumer, errors

    out = sys.stdout.buffer
    count = 0
    consumer = Consumer(args.bootstrap_server, client_id="fastlog-console-consumer",
                        security=client_security(args),
                        auto_offset_reset="earliest" if start == "earliest" else "latest",
                        isolation_level=args.isolation_level, max_buffered_fetches=2)
    try:
        # Connecting and joining the group are bounded too: a broker or coordinator that
        # never answers must not keep a consumer with --timeout-ms waiting for good.
        limit_ms = args.timeout_ms or (JOIN_TIMEOUT_MS if args.group is not None else None)
        try:
            await asyncio.wait_for(_start_reading(consumer, args, start),
                                   None if limit_ms is None else limit_ms / 1000.0)
        except TimeoutError:
            raise errors.FastlogError(
                f"could not join consumer group '{args.group}' within {limit_ms} ms"
                if args.group is not None else
                f"could not start reading topic '{args.topic}' within {limit_ms} ms") from None
        if sys.stdout.isatty():
            # A reader at the latest offset waits silently for new records: say so.
            print(_reading_hint(args, start), file=sys.stderr, flush=True)
        idle_deadline = None if args.timeout_ms is None else \
            time.monotonic() + args.timeout_ms / 1000.0
        while args.max_messages is None or count < args.max_messages:
            wait_ms = 1000.0 if idle_deadline is None else \
                max(0.0, (idle_deadline - time.monotonic()) * 1000.0)
            left = None if args.max_messages is None else args.max_messages - count
            batch = await consumer.getmany(wait_ms, max_records=left)
            if batch:
                for tp, records in batch.items():
                    out.write(b"".join(formatter(tp, r) for r in records))
                    count += len(records)
                out.flush()
                if idle_deadline is not None:
                    idle_deadline = time.monotonic() + args.timeout_ms / 1000.0
            elif idle_deadline is not None and time.monotonic() >= idle_deadline:
                break
        if args.group is not None:
            await consumer.commit()
    finally:
        await consumer.close()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _reading_hint(args, start) -> str:
    """One line for a person at a terminal: where the reading starts and how it ends."""
    where = f"topic '{args.topic}'"
    if args.partition is not None:
        where += f" partition {args.partition}"
    if args.group is not None:
        origin = (f"as group '{args.group}' from its committed offsets "
                  f"(else the {'earliest' if start == 'earliest' else 'latest'} offset)")
    elif start == "earliest":
        origin = "from the beginning"
    elif start == "latest":
        origin = "from the latest offset: only new records (--from-beginning reads all)"
    else:
        origin = f"from offset {start}"
    stop = "Ctrl-C stops"
    if args.max_messages is None and args.timeout_ms is None:
        stop += "; or --max-messages N, --timeout-ms MS"
    return f"Reading {where} {origin}. {stop}."


async def _start_reading(consumer, args, start) -> None:
    """Connect, get the partitions (assigned, or from the group) and seek to start."""
    from fastlog.client import TopicPartition, errors

    await consumer.start()
    if args.group is not None:
        await consumer.subscribe([args.topic], args.group)
        # As in Kafka's console consumer, --from-beginning only matters while the group
        # has no committed offset (auto_offset_reset=earliest in _consume).
        return
    if args.partition is None:
        await consumer.assign_topic(args.topic)
    else:
        parts = await consumer.cluster.partitions_for(args.topic)
        if args.partition not in parts:
            raise errors.UnknownTopic(args.topic, args.partition)
        consumer.assign([TopicPartition(args.topic, args.partition)])
    if start == "earliest":
        await consumer.seek_to_beginning()
    elif start == "latest":
        await consumer.seek_to_end()
    else:
        consumer.seek(TopicPartition(args.topic, args.partition), start)


def _text(b) -> str:
    return "null" if b is None else bytes(b).decode("utf-8", "backslashreplace")


def _make_formatter(args):
    if args.format == "json":
        def as_json(tp, r) -> bytes:
            doc = {"topic": tp.topic, "partition": tp.partition, "offset": r.offset,
                   "timestamp": r.timestamp, "key": _json_bytes(r.key),
                   "value": _json_bytes(r.value),
                   "headers": [[k, _json_bytes(v)] for k, v in (r.headers or ())]}
            return json.dumps(doc, ensure_ascii=False).encode() + b"\n"
        return as_json
    if args.format is None:
        sep = _unescape(args.key_separator)
        fields = []
        if args.print_timestamp:
            fields.append("CreateTime:%T")
        if args.print_partition:
            fields.append("Partition:%p")
        if args.print_offset:
            fields.append("Offset:%o")
        if args.print_headers:
            fields.append("%h")
        if args.print_key:
            fields.append("%k")
        fields.append("%v")
        template = sep.replace("%", "%%").join(fields) + "\n"
    else:
        template = _unescape(args.format)
    return _compile_template(template)


def _raw(x) -> bytes:
    return x.encode() if isinstance(x, str) else bytes(x)


def _json_bytes(b):
    if b is None:
        return None
    raw = _raw(b)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode()}


def _compile_template(template: str):
    """Template -> function(tp, record) -> bytes; checks the template once, up front."""
    pieces: list = []
    literal = []
    i = 0
    while i < len(template):
        c = template[i]
        if c == "%":
            if i + 1 >= len(template):
                raise CliError("bad --format: it ends with a lone '%'")
            code = template[i + 1]
            if code == "%":
                literal.append("%")
            elif code in "kvopthT":
                if literal:
                    pieces.append("".join(literal).encode())
                    literal = []
                pieces.append(code)
            else:
                raise CliError(f"bad --format: unknown field '%{code}'")
            i += 2
            continue
        literal.append(c)
        i += 1
    if literal:
        pieces.append("".join(literal).encode())

    def headers(r) -> bytes:
        if not r.headers:
            return b"NO_HEADERS"
        return b",".join(_raw(k) + b":" + (b"null" if v is None else _raw(v))
                         for k, v in r.headers)

    getters = {
        "k": lambda tp, r: b"null" if r.key is None else bytes(r.key),
        "v": lambda tp, r: b"null" if r.value is None else bytes(r.value),
        "o": lambda tp, r: str(r.offset).encode(),
        "p": lambda tp, r: str(tp.partition).encode(),
        "t": lambda tp, r: tp.topic.encode(),
        "T": lambda tp, r: str(r.timestamp).encode(),
        "h": lambda tp, r: headers(r),
    }
    if pieces == ["v", b"\n"]:
        return lambda tp, r: (b"null" if r.value is None else bytes(r.value)) + b"\n"
    parts = [getters[p] if isinstance(p, str) else p for p in pieces]

    def render(tp, r) -> bytes:
        return b"".join(p(tp, r) if callable(p) else p for p in parts)
    return render
