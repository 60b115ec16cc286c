# fastlog/console/app.py: the web console's aiohttp application.
#
# Owns the pages (overview with each broker's log dirs, topics with their sizes on disk,
# a topic, messages, consumer groups, a group, charts,
# ACLs, SCRAM users), their forms, and the guards every request passes:
# - read-only: with --read-only every request other than GET/HEAD is refused (403) here,
#   whatever the page shows;
# - CSRF: every POST carries the per-process token the forms hold (a hidden field), else
#   403; the console binds to 127.0.0.1 unless told otherwise;
# - host: bound to loopback, only requests naming a loopback host are answered (a page of
#   another site rebinding its name to 127.0.0.1 gets nothing);
# - errors: a bad input (an offset beyond the end, malformed JSON headers, an illegal topic
#   name) or a Kafka error is one sentence on the page; an API the cluster does not serve
#   shows the feature as unavailable; anything unexpected is one sentence too (logged,
#   rate-limited), never a traceback.
# The cluster is reached only through fastlog.client: one Cluster shared by an Admin, a
# Producer (started on the first produce) and short-lived Consumers for browsing. Runs on
# one asyncio event loop, the client's.

from __future__ import annotations

import datetime
import hmac
import json
import logging
import secrets
import time
from pathlib import Path

from aiohttp import web

from fastlog.client import EARLIEST, LATEST, Admin, Consumer, Producer, TopicPartition
from fastlog.client.errors import FastlogError, KafkaError, ProtocolMismatch, UnknownTopic
from fastlog.client.group_offsets import assigned_partitions, end_offsets, reset_targets
from fastlog.console import pages
from fastlog.console.pages import esc, field, form, hidden, link, select, table, textarea
from fastlog.console.sampler import Sampler
from fastlog.logs import RateLimitedLog
from fastlog.protocol.topics import topic_name_problem
from fastlog.security.acl import (
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
)

log = logging.getLogger("fastlog.console")
STATIC_DIR = Path(__file__).parent / "static"

# Messages page bounds: records shown, records scanned for a filter, time for one page.
MAX_LIMIT = 500
SCAN_LIMIT = 10000
BROWSE_SECONDS = 5.0
INACTIVE_STATES = ("Empty", "Dead")
# Requests a form may send (a produced value included).
MAX_BODY = 2 << 20
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# Errors that mean "this cluster does not offer the feature" rather than "you did wrong".
UNAVAILABLE = {"SECURITY_DISABLED", "UNSUPPORTED_VERSION", "CLUSTER_AUTHORIZATION_FAILED",
               "INVALID_REQUEST"}


class BadInput(Exception):
    """A request the console refuses: its message is one sentence for the page."""


class Console:
    """The console's state: the clients, the CSRF token, the sampler."""

    def __init__(self, bootstrap: str, *, security=None, read_only: bool = False,
                 metrics_urls=(), sample_interval: float = 5.0, allowed_hosts=None):
        self.bootstrap = bootstrap
        self.read_only = read_only
        # The Host header names served (None: any), e.g. loopback names for 127.0.0.1.
        self.allowed_hosts = None if allowed_hosts is None else frozenset(allowed_hosts)
        self.csrf = secrets.token_urlsafe(32)
        self.admin = Admin(bootstrap, client_id="fastlog-console", security=security,
                           request_timeout_ms=15000)
        self.cluster = self.admin.cluster
        self.producer: Producer | None = None
        self.sampler = Sampler(self.admin, interval=sample_interval, metrics_urls=metrics_urls)
        self.metrics_urls = list(metrics_urls)
        self.errors_log = RateLimitedLog(log, 10.0)

    async def start(self, app=None) -> None:
        self.sampler.start()

    async def close(self, app=None) -> None:
        await self.sampler.stop()
        if self.producer is not None:
            await self.producer.close(timeout=5)
        await self.admin.close()

    async def get_producer(self) -> Producer:
        if self.producer is None:
            producer = Producer(cluster=self.cluster, acks="all", linger_ms=0,
                                allow_auto_create_topics=False, delivery_timeout_ms=15000)
            await producer.start()
            self.producer = producer
        return self.producer

    # -- rendering ----------------------------------------------------------------------

    def page(self, request, title: str, body: str, *, status: int = 200,
             error: str | None = None, scripts=()) -> web.Response:
        notice = request.query.get("notice") if request is not None else None
        if notice and not hmac.compare_digest(request.query.get("sig", ""), self.sign(notice)):
            notice = None
        text = pages.layout(title, body, cluster=self.bootstrap, read_only=self.read_only,
                            notice=notice[:300] if notice else None, error=error,
                            scripts=scripts)
        return web.Response(text=text, status=status, content_type="text/html")

    def sign(self, text: str) -> str:
        return hmac.new(self.csrf.encode(), text.encode(), "sha256").hexdigest()[:32]

    def form(self, action: str, fields: str, submit: str, **kw) -> str:
        return form(action, fields, submit, csrf=self.csrf, read_only=self.read_only, **kw)

    def unavailable(self, what: str, exc: Exception) -> str:
        return (f'<p class="unavailable">{esc(what)} is unavailable on this cluster '
                f"({esc(_sentence(exc))}).</p>")


def _hostname(host: str | None) -> str:
    """The name in a Host header, without the port ("[::1]:8080" -> "::1")."""
    host = (host or "").strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _sentence(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500] or type(exc).__name__


def _unavailable(exc: Exception) -> bool:
    return isinstance(exc, ProtocolMismatch) or (
        isinstance(exc, KafkaError) and exc.name in UNAVAILABLE)


def _redirect(c: Console, path: str, notice: str, **query):
    """303 to path, which then shows notice (signed, so a link from elsewhere cannot put
    words on a console page)."""
    raise web.HTTPSeeOther(pages.url(path, notice=notice, sig=c.sign(notice), **query))


# -- guards --------------------------------------------------------------------------------

def make_guard(console: Console):
    async def checked(request: web.Request, handler):
        if console.allowed_hosts is not None and _hostname(request.host) not in \
                console.allowed_hosts:
            # A page of another site whose name resolves to this address (DNS rebinding)
            # must not read the console, nor its token.
            return console.page(None, "Refused", "", status=421,
                                error="This console answers only to the address it "
                                      "listens on.")
        if request.method not in ("GET", "HEAD"):
            if console.read_only:
                return console.page(request, "Refused", "", status=403,
                                    error="This console is read-only: it changes nothing on "
                                          "the cluster.")
            posted = await request.post()
            token = posted.get("csrf", "")
            if not isinstance(token, str) or not hmac.compare_digest(
                    token.encode(), console.csrf.encode()):
                return console.page(request, "Refused", "", status=403,
                                    error="The form's security token is missing or out of "
                                          "date: reload the page and try again.")
        return await handler(request)

    @web.middleware
    async def guard(request: web.Request, handler):
        try:
            response = await checked(request, handler)
        except web.HTTPNotFound:
            response = console.page(request, "Not found", "", status=404,
                                    error="There is no such page.")
        except web.HTTPRequestEntityTooLarge:
            response = console.page(request, "Refused", "", status=413,
                                    error=f"The form is larger than {MAX_BODY >> 20} MiB.")
        except web.HTTPException:
            raise
        except BadInput as exc:
            response = console.page(request, "Cannot do that", "", status=400,
                                    error=_sentence(exc))
        except UnknownTopic as exc:
            response = console.page(request, "Not found", "", status=404, error=_sentence(exc))
        except ValueError as exc:
            response = console.page(request, "Cannot do that", "", status=400,
                                    error=f"{_sentence(exc)}.")
        except FastlogError as exc:
            if _unavailable(exc) and request.method in ("GET", "HEAD"):
                # A feature this cluster does not offer (an API it does not serve, security
                # it has not enabled): a page saying so, not an error.
                response = console.page(request, "Unavailable",
                                        console.unavailable("This page", exc))
            else:
                response = console.page(
                    request, "Cannot do that", "", status=502,
                    error=f"The cluster refused or did not answer: {_sentence(exc)}.")
        except Exception as exc:  # noqa: BLE001 - the promise is: never a traceback
            console.errors_log.log(logging.WARNING, "console: %s on %s: %s",
                                   type(exc).__name__, request.path, exc)
            response = console.page(request, "Unexpected error", "", status=500,
                                    error=f"Unexpected error: {type(exc).__name__}: "
                                          f"{_sentence(exc)}.")
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    return guard


# -- input ---------------------------------------------------------------------------------

def _int(value, what: str, *, low: int = 0, high: int = (1 << 63) - 1) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise BadInput(f"{what} must be a whole number, not {_shown(value)}.") from None
    if not low <= number <= high:
        raise BadInput(f"{what} must be between {low} and {high}, not {number}.")
    return number


def _shown(value, limit: int = 60) -> str:
    text = str(value)
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _topic(name: str) -> str:
    problem = topic_name_problem(name)
    if problem is not None:
        raise BadInput(f"{_shown(name)} is not a legal topic name: it must be 1-249 characters "
                       "of a-z, A-Z, 0-9, '.', '_' and '-'.")
    return name


def _timestamp_ms(text: str) -> int:
    """A time as milliseconds since the epoch: a number of ms, or an ISO date and time
    (UTC unless it names a zone)."""
    text = text.strip()
    if text.isdigit():
        return _int(text, "The time in milliseconds")
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(f"{_shown(text)} is not a time: use 2026-01-31T12:00:00 (UTC) or "
                       "milliseconds since 1970.") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    ms = int(when.timestamp() * 1000)
    if ms < 0:  # negative timestamps mean "latest" and "earliest" to ListOffsets
        raise BadInput(f"{_shown(text)} is before 1970: Kafka's timestamps start there.")
    return ms


def _configs(text: str) -> dict[str, str]:
    out = {}
    # One per line: a value may hold commas (cleanup.policy=compact,delete).
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"bad config {_shown(line)}: expected key=value.")
        out[key.strip()] = value.strip()
    return out


def _headers(text: str) -> list[tuple[str, bytes]]:
    if not text.strip():
        return []
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"The headers are not valid JSON ({exc.msg} at character {exc.pos}): "
                       'write them as {"name": "value"}.') from None
    if isinstance(value, dict):
        value = list(value.items())
    if not isinstance(value, list) or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str)
            and isinstance(p[1], (str, type(None))) for p in value):
        raise BadInput('The headers must be a JSON object of strings, like {"trace": "abc"}.')
    return [(k, None if v is None else v.encode()) for k, v in value]


def _time(ms: int) -> str:
    if ms is None or ms < 0:
        return "-"
    try:
        when = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


# -- sizes on disk (DescribeLogDirs) ------------------------------------------------------

async def _log_dirs(c: Console, what: str, tps=None):
    """(Admin.describe_log_dirs's answer, "") or (None, a note saying why there is none):
    a cluster without the API (or without Describe on the cluster for us) shows sizes as
    unavailable; another failure is one sentence, and the rest of the page still shows."""
    try:
        return await c.admin.describe_log_dirs(tps=tps), ""
    except FastlogError as exc:
        if _unavailable(exc):
            return None, c.unavailable(what, exc)
        return None, (f'<p class="unavailable">{esc(what)} could not be read: '
                      f"{esc(_sentence(exc))}.</p>")


def _replica_sizes(dirs) -> dict[TopicPartition, dict[int, int]]:
    """{partition: {broker: bytes}} of the current replicas in the online log dirs (a copy
    moving between dirs, a future replica, is left out)."""
    out: dict[TopicPartition, dict[int, int]] = {}
    for node, by_path in (dirs or {}).items():
        for desc in by_path.values():
            for tp, r in desc.replicas.items():
                if not r.is_future:
                    out.setdefault(tp, {})[node] = r.size
    return out


def _sum(sizes):
    """Total of the known sizes; None when none is known."""
    known = [s for s in sizes if s is not None]
    return sum(known) if known else None


# -- overview ------------------------------------------------------------------------------

async def overview(request):
    c: Console = request.app["console"]
    await c.cluster.refresh_metadata(None)
    brokers = c.cluster.brokers
    topics = [t for t in c.cluster.topics.values()]
    partitions = [p for t in topics for p in t.partitions.values()]
    under = [(t.name, p) for t in topics for p in t.partitions.values()
             if p.leader >= 0 and len(p.isr) < len(p.replicas)]
    offline = [(t.name, p) for t in topics for p in t.partitions.values() if p.leader < 0]
    referenced = {r for p in partitions for r in p.replicas}
    missing = sorted(referenced - set(brokers))
    rows = []
    for node in sorted(brokers):
        b = brokers[node]
        role = '<span class="badge">controller</span>' if node == c.cluster.controller_id else ""
        rows.append((esc(node), esc(f"{b.host}:{b.port}"), esc(b.rack), role))
    for node in missing:
        rows.append((esc(node), '<span class="bad">missing: holds replicas but is not '
                                "registered</span>", "-", ""))
    if offline:
        verdict = ("bad", f"Unhealthy: {len(offline)} offline partition"
                          f"{'s' if len(offline) != 1 else ''}.")
    elif under or missing:
        verdict = ("warn", f"Degraded: {len(under)} under-replicated partition"
                           f"{'s' if len(under) != 1 else ''}"
                           + (f", broker {', '.join(map(str, missing))} missing" if missing
                              else "") + ".")
    else:
        verdict = ("good", f"Healthy: {len(brokers)} broker{'s' if len(brokers) != 1 else ''}, "
                           "every partition has a leader and a full ISR.")
    body = [f'<p class="verdict {verdict[0]}" id="verdict">{esc(verdict[1])}</p>',
            '<section><h2>Brokers</h2>',
            table(("id", "address", "rack", ""), rows, cls="brokers"),
            "</section><section><h2>Cluster</h2><dl>",
            f"<dt>cluster id</dt><dd>{esc(c.cluster.cluster_id)}</dd>",
            f"<dt>topics</dt><dd>{len([t for t in topics if not t.internal])} "
            f"(+{len([t for t in topics if t.internal])} internal)</dd>",
            f"<dt>partitions</dt><dd>{len(partitions)}</dd>",
            f"<dt>under-replicated</dt><dd>{len(under)}</dd>",
            f"<dt>offline</dt><dd>{len(offline)}</dd></dl></section>"]
    problems = [(link(f"/topics/{name}", name), esc(p.partition), esc(p.leader),
                 esc(p.replicas), esc(p.isr)) for name, p in (offline + under)[:100]]
    if problems:
        body.append("<section><h2>Partitions needing attention</h2>"
                    + table(("topic", "partition", "leader", "replicas", "ISR"), problems)
                    + "</section>")
    body.append(f"<section><h2>Log dirs</h2>{await _log_dirs_table(c)}</section>")
    return c.page(request, "Overview", "".join(body))


async def _log_dirs_table(c: Console) -> str:
    """Each broker's log dirs: partitions and bytes held, the file system's total and
    usable bytes (DescribeLogDirs v4), or the error of an offline dir."""
    dirs, note = await _log_dirs(c, "Describing log dirs")
    if dirs is None:
        return note
    rows = []
    for node in sorted(dirs):
        for path, d in sorted(dirs[node].items()):
            current = [r for r in d.replicas.values() if not r.is_future]
            status = ('<span class="good">online</span>' if d.error is None else
                      f'<span class="bad">offline ({esc(d.error)})</span>')
            rows.append((esc(node), esc(path), status,
                         esc(len(current) if d.error is None else None),
                         esc(pages.size(sum(r.size for r in current)) if d.error is None
                             else None),
                         esc(pages.size(d.total_bytes)), esc(pages.size(d.usable_bytes))))
    return table(("broker", "log dir", "status", "partitions", "size", "disk total",
                  "disk usable"), rows, cls="log-dirs", empty="No log dirs.")


# -- topics --------------------------------------------------------------------------------

async def topics_page(request):
    c: Console = request.app["console"]
    query = request.query.get("q", "")
    internal = request.query.get("internal") == "1"
    infos = await c.admin.describe_topics(None)
    rates = c.sampler.topic_rates()
    dirs, size_note = await _log_dirs(c, "Topic sizes")
    sizes = _replica_sizes(dirs)
    rows = []
    for t in infos:
        if t.internal and not internal:
            continue
        if query and query.lower() not in t.name.lower():
            continue
        parts = t.partitions.values()
        rf = max((len(p.replicas) for p in parts), default=0)
        held = [(p.leader, sizes.get(TopicPartition(t.name, p.partition), {}))
                for p in parts]
        leaders = _sum(h.get(leader) for leader, h in held)
        replicas = _sum(s for _, h in held for s in h.values())
        rows.append((link(f"/topics/{t.name}", t.name), esc(len(t.partitions)), esc(rf),
                     esc(pages.size(leaders)), esc(pages.size(replicas)),
                     esc(pages.rate(rates.get(t.name)))))
    search = (f'<form method=get action="/topics" class="search">'
              f'{field("Search", "q", query, placeholder="part of a name")}'
              f'<label><input type=checkbox name=internal value=1'
              f'{" checked" if internal else ""}> internal</label>'
              f"<button type=submit>Search</button></form>")
    create = c.form("/topics", field("Name", "name", required=True)
                    + field("Partitions", "partitions", "1", kind="number", size=4)
                    + field("Replication factor", "replication_factor", "1", kind="number",
                            size=4)
                    + textarea("Configs (key=value per line)", "configs", rows=2),
                    "Create topic", cls="create")
    # size: the leaders' copies (the topic's data once); with replicas: every copy.
    body = (search + size_note
            + table(("topic", "partitions", "replication factor", "size",
                     "size (with replicas)", "messages/s"), rows,
                    cls="topics", empty="No topic matches.")
            + (f"<section><h2>Create a topic</h2>{create}</section>" if create else ""))
    return c.page(request, "Topics", body)


async def create_topic(request):
    c: Console = request.app["console"]
    form_ = await request.post()
    name = _topic(form_.get("name", "").strip())
    partitions = _int(form_.get("partitions", "1"), "The partition count", low=1,
                      high=(1 << 31) - 1)
    rf = _int(form_.get("replication_factor", "1"), "The replication factor", low=1,
              high=(1 << 15) - 1)
    configs = _configs(form_.get("configs", ""))
    await c.admin.create_topic(name, partitions, rf, configs)
    _redirect(c, f"/topics/{name}", f"Created topic {name}.")


async def topic_page(request):
    c: Console = request.app["console"]
    name = _topic(request.match_info["name"])
    (info,) = await c.admin.describe_topics([name])
    tps = [TopicPartition(name, p) for p in sorted(info.partitions)]
    starts, ends = {}, {}
    if tps:
        try:
            starts = {tp: o.offset for tp, o in
                      (await c.admin.list_offsets(dict.fromkeys(tps, EARLIEST))).items()}
            ends = {tp: o.offset for tp, o in
                    (await c.admin.list_offsets(dict.fromkeys(tps, LATEST))).items()}
        except KafkaError:
            pass
    dirs, size_note = await _log_dirs(c, "Partition sizes", tps) if tps else (None, "")
    sizes = _replica_sizes(dirs)
    rows = []
    for tp in tps:
        p = info.partitions[tp.partition]
        held = sizes.get(tp, {})
        rows.append((link(f"/topics/{name}/messages", tp.partition, partition=tp.partition),
                     esc(p.leader), esc(", ".join(map(str, p.replicas))),
                     esc(", ".join(map(str, p.isr))), esc(starts.get(tp)), esc(ends.get(tp)),
                     esc(pages.size(held.get(p.leader))),
                     esc(", ".join(f"{n}: {pages.size(held[n])}" for n in sorted(held))
                         or None)))
    try:
        configs = await c.admin.describe_configs(name)
        crow = [(esc(e.name), esc("(sensitive)" if e.sensitive else e.value), esc(e.source))
                for e in sorted(configs, key=lambda e: (e.is_default, e.name))]
        config_html = table(("key", "value", "source"), crow, cls="configs")
    except FastlogError as exc:
        if not _unavailable(exc):
            raise
        config_html = c.unavailable("Describing configs", exc)
    alter = c.form(f"/topics/{name}/configs",
                   textarea("Set (key=value per line)", "set", rows=2)
                   + field("Remove (keys, comma-separated)", "delete"),
                   "Change configs", cls="configs")
    grow = c.form(f"/topics/{name}/partitions",
                  field("New partition count", "count", len(info.partitions), kind="number",
                        size=6), "Add partitions", cls="partitions")
    delete = c.form(f"/topics/{name}/delete",
                    field("Type the topic's name to confirm", "confirm", required=True),
                    "Delete topic", cls="danger",
                    confirm=f"Delete topic {name} and all its messages?")
    body = (f'<p>{link(f"/topics/{name}/messages", "Browse messages")} · '
            f'{link(f"/topics/{name}/messages", "Produce", partition=0)}</p>'
            + "<section><h2>Partitions</h2>" + size_note
            + table(("partition", "leader", "replicas", "ISR", "start offset", "end offset",
                     "size", "size per replica"), rows, cls="partitions") + grow
            + f"</section><section><h2>Configs</h2>{config_html}{alter}</section>"
            + (f"<section><h2>Delete</h2>{delete}</section>" if delete else ""))
    return c.page(request, f"Topic {name}", body)


async def alter_topic(request):
    c: Console = request.app["console"]
    name = _topic(request.match_info["name"])
    form_ = await request.post()
    sets = _configs(form_.get("set", ""))
    deletes = [k.strip() for k in form_.get("delete", "").split(",") if k.strip()]
    if not sets and not deletes:
        raise BadInput("Nothing to change: give key=value lines to set or keys to remove.")
    await c.admin.alter_configs(name, sets, deletes)
    _redirect(c, f"/topics/{name}", "Changed the topic's configs.")


async def add_partitions(request):
    c: Console = request.app["console"]
    name = _topic(request.match_info["name"])
    count = _int((await request.post()).get("count", ""), "The partition count", low=1,
                 high=(1 << 31) - 1)
    (info,) = await c.admin.describe_topics([name])
    if count <= len(info.partitions):
        raise BadInput(f"Topic {name} has {len(info.partitions)} partitions: a topic's "
                       "partitions can only be added to, so give a larger count.")
    await c.admin.create_partitions(name, count)
    _redirect(c, f"/topics/{name}", f"Topic {name} now has {count} partitions.")


async def delete_topic(request):
    c: Console = request.app["console"]
    name = _topic(request.match_info["name"])
    form_ = await request.post()
    if form_.get("confirm", "") != name:
        raise BadInput(f"Not deleted: type the topic's name ({name}) to confirm.")
    await c.admin.delete_topic(name)
    _redirect(c, "/topics", f"Deleted topic {name}.")


# -- messages ------------------------------------------------------------------------------

async def _browse(c: Console, tp: TopicPartition, start: int, limit: int, end: int,
                  key_filter: str, contains: str):
    """Records from start up to end (the high watermark): at most limit shown, at most
    SCAN_LIMIT scanned, BROWSE_SECONDS spent; (records, next offset, scanned)."""
    found, scanned, pos = [], 0, start
    if start >= end:
        return found, pos, scanned
    consumer = Consumer(cluster=c.cluster, fetch_max_wait_ms=200, check_crcs=True,
                        max_partition_fetch_bytes=1 << 20, client_id="fastlog-console")
    key_b, text_b = key_filter.encode(), contains.encode()
    deadline = time.monotonic() + BROWSE_SECONDS
    try:
        await consumer.start()
        consumer.assign([tp])
        consumer.seek(tp, start)
        while len(found) < limit and pos < end and scanned < SCAN_LIMIT:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            batch = await consumer.getmany(timeout_ms=min(left, 0.5) * 1000)
            if not batch:
                # Control records (transaction markers) and compacted gaps move the
                # position without handing out a record.
                pos = max(pos, await consumer.position(tp))
                continue
            for record in batch.get(tp, []):
                if record.offset >= end:
                    pos = end
                    break
                pos = record.offset + 1
                scanned += 1
                if key_b and (record.key is None or key_b not in bytes(record.key)):
                    continue
                if text_b and (record.value is None or text_b not in bytes(record.value)):
                    continue
                found.append(record)
                if len(found) >= limit or scanned >= SCAN_LIMIT:
                    break
    finally:
        await consumer.close()
    return found, pos, scanned


def _record_rows(name: str, partition: int, records, fmt: str) -> str:
    out = []
    for r in records:
        more = pages.url(f"/topics/{name}/message", partition=partition, offset=r.offset,
                         format=fmt)
        out.append(
            f'<tr data-offset="{r.offset}"><td>{r.offset}</td><td>{esc(_time(r.timestamp))}</td>'
            f"<td>{pages.show_bytes(r.key, fmt, limit=256)}</td>"
            f"<td>{pages.show_bytes(r.value, fmt, more_href=more)}</td>"
            f"<td>{pages.show_headers(r.headers)}</td></tr>")
    return "".join(out)


async def _partition_bounds(c: Console, tp: TopicPartition) -> tuple[int, int]:
    starts = await c.admin.list_offsets({tp: EARLIEST})
    ends = await c.admin.list_offsets({tp: LATEST})
    return starts[tp].offset, ends[tp].offset


async def _topic_partition(c: Console, request) -> tuple[TopicPartition, list[int]]:
    """The topic and partition a messages request names, and the topic's partitions."""
    name = _topic(request.match_info["name"])
    (info,) = await c.admin.describe_topics([name])
    partition = _int(request.query.get("partition", "0"), "The partition", high=(1 << 31) - 1)
    if partition not in info.partitions:
        raise BadInput(f"Topic {name} has no partition {partition} (it has "
                       f"{len(info.partitions)}).")
    return TopicPartition(name, partition), sorted(info.partitions)


async def messages_page(request):
    c: Console = request.app["console"]
    tp, partitions = await _topic_partition(c, request)
    q = request.query
    name, partition = tp.topic, tp.partition
    mode = q.get("from", "beginning")
    fmt = q.get("format", "auto")
    fmt = fmt if fmt in pages.FORMATS else "auto"
    limit = _int(q.get("limit", "50"), "The number of messages", low=1, high=MAX_LIMIT)
    key_filter, contains = q.get("key", ""), q.get("contains", "")
    start_offset, end_offset = await _partition_bounds(c, tp)
    info = ""
    if mode == "offset":
        start = _int(q.get("offset", ""), "The offset")
        if start > end_offset:
            raise BadInput(f"Offset {start} is beyond the end of partition {partition} of "
                           f"{name}: its messages are {start_offset} to {end_offset - 1}."
                           if end_offset > start_offset else
                           f"Offset {start} is beyond the end of partition {partition} of "
                           f"{name}, which is empty (end offset {end_offset}).")
        if start < start_offset:
            info = f"Offset {start} was deleted; starting at {start_offset}, the first kept."
            start = start_offset
    elif mode == "timestamp":
        ts = _timestamp_ms(q.get("timestamp", ""))
        found = await c.admin.list_offsets({tp: ts})
        start = found[tp].offset
        if start < 0:
            start = end_offset
            info = f"No message at or after {_time(ts)}; showing new ones from the end."
    elif mode == "end":
        start = max(start_offset, end_offset - limit)
    else:
        mode = "beginning"
        start = start_offset
    records, next_pos, scanned = await _browse(c, tp, start, limit, end_offset, key_filter,
                                               contains)
    if (key_filter or contains) and next_pos < end_offset and len(records) < limit:
        info = (f"Scanned {scanned} messages ({start} to {next_pos - 1}) and stopped: "
                "continue from the next offset to search further.")
    choose = (f'<form method=get action="/topics/{esc(name)}/messages" class="browse">'
              + select("Partition", "partition", partitions, partition)
              + select("From", "from", [("beginning", "beginning"), ("offset", "offset"),
                                        ("timestamp", "timestamp"), ("end", "end")], mode)
              + field("Offset", "offset", q.get("offset", ""), size=10)
              + field("Timestamp (UTC)", "timestamp", q.get("timestamp", ""),
                      placeholder="2026-01-31T12:00:00", size=20)
              + field("Limit", "limit", limit, kind="number", size=4)
              + select("Format", "format", pages.FORMATS, fmt)
              + field("Key contains", "key", key_filter, size=12)
              + field("Value contains", "contains", contains, size=12)
              + "<button type=submit>Show</button></form>")
    live = (f'<p><label class=check><input type=checkbox id=live data-src="'
            f'{esc(pages.url(f"/topics/{name}/messages/rows", partition=partition, format=fmt, key=key_filter or None, contains=contains or None))}" '
            f'data-next="{end_offset}"> live: add messages as they arrive</label></p>')
    more = ""
    if next_pos < end_offset:
        more = "<p>" + link(f"/topics/{name}/messages", f"Next page from offset {next_pos}",
                            partition=partition, format=fmt, limit=limit, key=key_filter or None,
                            contains=contains or None, offset=next_pos, **{"from": "offset"}) \
            + "</p>"
    summary = (f'<p class="summary">Partition {partition}: offsets {start_offset} to '
               f"{end_offset} (end); showing {len(records)} from offset {start}.</p>")
    notice = f'<p class="notice">{esc(info)}</p>' if info else ""
    produce = c.form(f"/topics/{name}/produce",
                     select("Partition", "partition",
                            [("", "by key")] + partitions, partition)
                     + field("Key", "key", size=16)
                     + textarea("Value", "value", rows=3)
                     + textarea('Headers (JSON, like {"trace": "abc"})', "headers", rows=1),
                     "Produce", cls="produce")
    body = (f'<p>{link(f"/topics/{name}", f"Topic {name}")}</p>' + choose + summary + notice
            + live
            + '<table class="messages"><thead><tr><th>offset</th><th>timestamp</th><th>key</th>'
              "<th>value</th><th>headers</th></tr></thead><tbody id=records>"
            + _record_rows(name, partition, records, fmt) + "</tbody></table>"
            + ('<p class="empty">No messages.</p>' if not records else "")
            + more
            + (f"<section><h2>Produce a message</h2>{produce}</section>" if produce else ""))
    return c.page(request, f"Messages of {name}", body)


async def message_rows(request):
    """The live view's poll: the rows after offset as an HTML fragment, the next offset
    in the X-Next-Offset header."""
    c: Console = request.app["console"]
    tp, _ = await _topic_partition(c, request)
    fmt = request.query.get("format", "auto")
    start = _int(request.query.get("offset", "0"), "The offset")
    _, end = await _partition_bounds(c, tp)
    records, next_pos, _ = await _browse(c, tp, min(start, end), MAX_LIMIT, end,
                                         request.query.get("key", ""),
                                         request.query.get("contains", ""))
    return web.Response(text=_record_rows(tp.topic, tp.partition, records, fmt),
                        content_type="text/html", headers={"X-Next-Offset": str(next_pos)})


async def message_page(request):
    c: Console = request.app["console"]
    tp, _ = await _topic_partition(c, request)
    offset = _int(request.query.get("offset", ""), "The offset")
    fmt = request.query.get("format", "auto")
    start, end = await _partition_bounds(c, tp)
    if not start <= offset < end:
        raise BadInput(f"Partition {tp.partition} of {tp.topic} has no message at offset "
                       f"{offset} (its messages are {start} to {end - 1}).")
    records, _, _ = await _browse(c, tp, offset, 1, end, "", "")
    if not records:
        raise BadInput(f"The message at offset {offset} could not be read in time.")
    r = records[0]
    body = (f'<p>{link(f"/topics/{tp.topic}/messages", "Back to messages", partition=tp.partition, offset=offset, **{"from": "offset"})}</p>'
            f"<dl><dt>offset</dt><dd>{r.offset}</dd><dt>timestamp</dt><dd>{esc(_time(r.timestamp))}</dd>"
            f"<dt>key</dt><dd>{pages.show_bytes(r.key, fmt, limit=pages.FULL_VALUE_BYTES)}</dd>"
            f"<dt>headers</dt><dd>{pages.show_headers(r.headers)}</dd>"
            f"<dt>value</dt><dd>{pages.show_bytes(r.value, fmt, limit=pages.FULL_VALUE_BYTES)}</dd></dl>")
    return c.page(request, f"Message {tp}@{offset}", body)


async def produce(request):
    c: Console = request.app["console"]
    name = _topic(request.match_info["name"])
    form_ = await request.post()
    headers = _headers(form_.get("headers", ""))
    partition = form_.get("partition", "")
    partition = _int(partition, "The partition", high=(1 << 31) - 1) if partition else None
    key = form_.get("key", "")
    value = form_.get("value", "")
    producer = await c.get_producer()
    handle = await producer.send(name, value.encode(), key.encode() if key else None,
                                 partition=partition, headers=headers)
    result = await handle  # bounded by the producer's delivery timeout
    _redirect(c, f"/topics/{name}/messages",
              f"Produced to partition {result.partition} at offset {result.offset}.",
              partition=result.partition, offset=result.offset, **{"from": "offset"})


# -- consumer groups -----------------------------------------------------------------------

def _group_id(request) -> str:
    group_id = request.query.get("id", "")
    if not group_id:
        raise BadInput("No consumer group named: add ?id=GROUP.")
    return group_id


async def groups_page(request):
    c: Console = request.app["console"]
    groups = await c.admin.list_groups()
    descs = {}
    if groups:
        for d in await c.admin.describe_groups([g.group_id for g in groups[:200]]):
            descs[d.group_id] = d
    lags = c.sampler.samples[-1][2] if c.sampler.samples else {}
    rows = []
    for g in groups:
        gid, ptype = g.group_id, g.protocol_type
        d = descs.get(gid)
        rows.append((link("/groups/view", gid, id=gid), esc(d.state if d else "?"),
                     esc(ptype or "-"), esc(len(d.members) if d else "?"), esc(lags.get(gid))))
    body = table(("group", "state", "protocol type", "members", "total lag (last sample)"),
                 rows, cls="groups", empty="No consumer groups.")
    return c.page(request, "Consumer groups", body)


async def _group_offsets(c: Console, group_id: str):
    (desc,) = await c.admin.describe_groups([group_id])
    committed = await c.admin.fetch_offsets(group_id)
    owner = {}
    if desc.protocol_type == "consumer":
        for m in desc.members:
            for tp in assigned_partitions(m.assignment):
                owner[tp] = m
    tps = sorted(set(committed) | set(owner), key=lambda tp: (tp.topic, tp.partition))
    ends = await end_offsets(c.admin, tps)
    return desc, committed, owner, tps, ends


async def group_page(request):
    c: Console = request.app["console"]
    group_id = _group_id(request)
    desc, committed, owner, tps, ends = await _group_offsets(c, group_id)
    if desc.state == "Dead" and not committed:
        raise BadInput(f"Consumer group {_shown(group_id)} does not exist.")
    rows, total = [], 0
    for tp in tps:
        cur = committed.get(tp)
        end = ends.get(tp)
        lag = (end - cur[0]) if cur is not None and end is not None else None
        total += lag or 0
        m = owner.get(tp)
        rows.append((esc(tp.topic), esc(tp.partition), esc(cur[0] if cur else None),
                     esc(end), f'<span class="lag">{esc(lag)}</span>',
                     esc(m.member_id if m else None)))
    members = [(esc(m.member_id), esc(m.client_id), esc(m.client_host),
                esc(", ".join(str(tp) for tp in assigned_partitions(m.assignment))
                    if desc.protocol_type == "consumer" else "-"))
               for m in desc.members]
    topics = sorted({tp.topic for tp in tps})
    reset = c.form("/groups/reset",
                   hidden("id", group_id)
                   + select("Topic", "topic", [("*", "all topics of the group")] + topics)
                   + select("To", "to", [("earliest", "earliest"), ("latest", "latest"),
                                         ("offset", "offset"), ("datetime", "timestamp"),
                                         ("shift", "shift by")])
                   + field("Offset / timestamp / shift", "value", size=20)
                   + hidden("action", "dry-run"),
                   "Dry run", cls="reset")
    delete = c.form("/groups/delete", hidden("id", group_id), "Delete group", cls="danger",
                    confirm=f"Delete consumer group {group_id}?")
    body = (f'<dl class="group"><dt>state</dt><dd id=state>{esc(desc.state)}</dd>'
            f"<dt>protocol</dt><dd>{esc(desc.protocol_type or '-')} / {esc(desc.protocol or '-')}</dd>"
            f"<dt>coordinator</dt><dd>{esc(desc.coordinator)}</dd>"
            f'<dt>total lag</dt><dd id=total-lag>{total}</dd></dl>'
            + "<section><h2>Members</h2>"
            + table(("member", "client id", "host", "assignment"), members, cls="members",
                    empty="No active members.")
            + "</section><section><h2>Offsets and lag</h2>"
            + table(("topic", "partition", "committed", "end", "lag", "member"), rows,
                    cls="offsets", empty="No committed offsets.")
            + "</section>"
            + (f"<section><h2>Reset offsets</h2><p>The group must have no active members. "
               f"A dry run shows the new offsets first.</p>{reset}</section>" if reset else "")
            + (f"<section><h2>Delete</h2><p>Only an empty group can be deleted.</p>{delete}"
               "</section>" if delete else ""))
    return c.page(request, f"Consumer group {group_id}", body)


async def reset_group(request):
    c: Console = request.app["console"]
    form_ = await request.post()
    group_id = form_.get("id", "")
    if not group_id:
        raise BadInput("No consumer group named.")
    kind = form_.get("to", "")
    raw = form_.get("value", "").strip()
    if kind in ("earliest", "latest"):
        value = None
    elif kind == "offset":
        value = _int(raw, "The offset")
    elif kind == "datetime":
        value = _timestamp_ms(raw)
    elif kind == "shift":
        value = _int(raw, "The shift", low=-(1 << 62), high=1 << 62)
    else:
        raise BadInput(f"Unknown reset target {_shown(kind)}.")
    desc, committed, _, tps, _ = await _group_offsets(c, group_id)
    if desc.state not in INACTIVE_STATES:
        raise BadInput(f"Consumer group {_shown(group_id)} is still active ({desc.state}, "
                       f"{len(desc.members)} members): stop its consumers first.")
    topic = form_.get("topic", "*")
    if topic != "*":
        (info,) = await c.admin.describe_topics([_topic(topic)])
        tps = [TopicPartition(topic, p) for p in sorted(info.partitions)]
    if not tps:
        raise BadInput(f"Consumer group {_shown(group_id)} has no offsets to reset.")
    new = await reset_targets(c.admin, tps, kind, value, committed)
    apply = form_.get("action") == "apply"
    if apply:
        await c.admin.commit_offsets(group_id, new)
        _redirect(c, "/groups/view", f"Reset the offsets of {len(new)} partitions.", id=group_id)
    rows = [(esc(tp.topic), esc(tp.partition),
             esc(committed[tp][0] if tp in committed else None), esc(off))
            for tp, off in new.items()]
    confirm = c.form("/groups/reset",
                     "".join(hidden(k, form_.get(k, "")) for k in ("id", "topic", "to", "value"))
                     + hidden("action", "apply"), "Apply these offsets", cls="apply")
    body = (f'<p>{link("/groups/view", f"Back to group {group_id}", id=group_id)}</p>'
            '<p class="notice">Dry run: nothing was committed yet.</p>'
            + table(("topic", "partition", "committed now", "new offset"), rows, cls="plan")
            + confirm)
    return c.page(request, f"Reset offsets of {group_id}", body)


async def delete_group(request):
    c: Console = request.app["console"]
    form_ = await request.post()
    group_id = form_.get("id", "")
    try:
        await c.admin.delete_groups([group_id])
    except KafkaError as exc:
        if exc.name == "NON_EMPTY_GROUP":
            raise BadInput(f"Consumer group {_shown(group_id)} still has members: only an "
                           "empty group can be deleted.") from None
        if exc.name == "GROUP_ID_NOT_FOUND":
            raise BadInput(f"Consumer group {_shown(group_id)} does not exist.") from None
        raise
    _redirect(c, "/groups", f"Deleted consumer group {group_id}.")


# -- charts --------------------------------------------------------------------------------

async def charts_page(request):
    c: Console = request.app["console"]
    metrics = ("" if c.metrics_urls else
               "<p>Broker metrics: start the console with --metrics-url to chart them.</p>")
    body = (f'<p>Sampled every {c.sampler.interval:g} s from end offsets and committed '
            "offsets (any Kafka); the last minutes are kept.</p>"
            '<p id=chart-problem class="error" hidden></p>'
            '<div id=charts data-src="/charts/data">'
            "<section><h2>Messages in per second, per topic</h2><div id=chart-topics></div></section>"
            "<section><h2>Lag per consumer group</h2><div id=chart-groups></div></section>"
            "<section id=broker-charts><h2>Broker metrics</h2></section></div>" + metrics)
    return c.page(request, "Charts", body,
                  scripts=(f"{pages.UPLOT}/uPlot.iife.min.js", f"{pages.STATIC}/charts.js"))


async def charts_data(request):
    c: Console = request.app["console"]
    return web.json_response(c.sampler.series())


# -- ACLs ----------------------------------------------------------------------------------

_RESOURCES = ("topic", "group", "cluster", "transactional_id")
_OPERATIONS = [op.name.lower() for op in AclOperation if op > AclOperation.ANY]


def _enum(cls, text: str, what: str):
    member = cls.from_name(text)
    if member == cls.UNKNOWN:
        raise BadInput(f"{_shown(text)} is not a {what}.")
    return member


def _binding(form_) -> AclBinding:
    rtype = _enum(ResourceType, form_.get("resource_type", ""), "resource type")
    name = form_.get("resource_name", "").strip()
    if rtype == ResourceType.CLUSTER:
        name = "kafka-cluster"
    if not name:
        raise BadInput("Name the resource (a topic, group or transactional id, or * for all).")
    principal = form_.get("principal", "").strip()
    if ":" not in principal:
        raise BadInput(f"{_shown(principal)} is not a principal: write it as User:NAME.")
    return AclBinding(
        ResourcePattern(rtype, name, _enum(PatternType, form_.get("pattern_type", "literal"),
                                           "pattern type")),
        AccessControlEntry(principal, form_.get("host", "*").strip() or "*",
                           _enum(AclOperation, form_.get("operation", ""), "operation"),
                           _enum(AclPermissionType, form_.get("permission", "allow"),
                                 "permission")))


async def acls_page(request):
    c: Console = request.app["console"]
    try:
        bindings = await c.admin.describe_acls(AclBindingFilter())
    except FastlogError as exc:
        if not _unavailable(exc):
            raise
        return c.page(request, "ACLs", c.unavailable("Listing ACLs", exc))
    rows = []
    for b in sorted(bindings, key=str):
        fields = "".join(hidden(k, v) for k, v in (
            ("resource_type", b.pattern.resource_type.name), ("resource_name", b.pattern.name),
            ("pattern_type", b.pattern.pattern_type.name), ("principal", b.entry.principal),
            ("host", b.entry.host), ("operation", b.entry.operation.name),
            ("permission", b.entry.permission_type.name)))
        rows.append((esc(b.pattern.resource_type.kafka_name), esc(b.pattern.name),
                     esc(b.pattern.pattern_type.name.lower()), esc(b.entry.principal),
                     esc(b.entry.host), esc(b.entry.operation.kafka_name),
                     esc(b.entry.permission_type.kafka_name),
                     c.form("/acls/remove", fields, "Remove", cls="inline",
                            confirm="Remove this ACL?")))
    add = c.form("/acls/add",
                 select("Resource", "resource_type", _RESOURCES)
                 + field("Name", "resource_name", placeholder="orders or *")
                 + select("Pattern", "pattern_type", ("literal", "prefixed"))
                 + field("Principal", "principal", "User:", required=True)
                 + field("Host", "host", "*", size=10)
                 + select("Operation", "operation", _OPERATIONS, "read")
                 + select("Permission", "permission", ("allow", "deny")),
                 "Add ACL", cls="acl")
    body = (table(("resource", "name", "pattern", "principal", "host", "operation",
                   "permission", ""), rows, cls="acls", empty="No ACLs.")
            + (f"<section><h2>Add an ACL</h2>{add}</section>" if add else ""))
    return c.page(request, "ACLs", body)


async def acl_add(request):
    c: Console = request.app["console"]
    binding = _binding(await request.post())
    await c.admin.create_acls([binding])
    _redirect(c, "/acls", "Added the ACL.")


async def acl_remove(request):
    c: Console = request.app["console"]
    b = _binding(await request.post())
    deleted = await c.admin.delete_acls([AclBindingFilter(
        ResourcePatternFilter(b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type),
        AccessControlEntryFilter(b.entry.principal, b.entry.host, b.entry.operation,
                                 b.entry.permission_type))])
    _redirect(c, "/acls", f"Removed {len(deleted)} ACL{'s' if len(deleted) != 1 else ''}.")


# -- SCRAM users ---------------------------------------------------------------------------

_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


async def users_page(request):
    c: Console = request.app["console"]
    try:
        users = await c.admin.describe_user_scram_credentials(None)
    except FastlogError as exc:
        if not _unavailable(exc):
            raise
        return c.page(request, "SCRAM users", c.unavailable("Listing SCRAM users", exc))
    rows = []
    for user in sorted(users):
        for mechanism, iterations in users[user]:
            rows.append((esc(user), esc(mechanism), esc(iterations),
                         c.form("/users/remove", hidden("user", user)
                                + hidden("mechanism", mechanism), "Remove", cls="inline",
                                confirm=f"Remove {mechanism} credentials of {user}?")))
    add = c.form("/users/add",
                 field("User", "user", required=True)
                 + select("Mechanism", "mechanism", _MECHANISMS)
                 + field("Password", "password", kind="password", required=True)
                 + field("Iterations", "iterations", "8192", kind="number", size=6),
                 "Add or update user", cls="user")
    body = (table(("user", "mechanism", "iterations", ""), rows, cls="users",
                  empty="No SCRAM users.")
            + (f"<section><h2>Add a user</h2>{add}</section>" if add else ""))
    return c.page(request, "SCRAM users", body)


def _user_fields(form_) -> tuple[str, str]:
    user = form_.get("user", "").strip()
    mechanism = form_.get("mechanism", "")
    if not user:
        raise BadInput("Name the user.")
    if mechanism not in _MECHANISMS:
        raise BadInput(f"{_shown(mechanism)} is not a SCRAM mechanism (use "
                       f"{' or '.join(_MECHANISMS)}).")
    return user, mechanism


async def user_add(request):
    c: Console = request.app["console"]
    form_ = await request.post()
    user, mechanism = _user_fields(form_)
    password = form_.get("password", "")
    if not password:
        raise BadInput("Give the user a password.")
    iterations = _int(form_.get("iterations", "8192"), "The iteration count", low=4096,
                      high=16384)
    await c.admin.alter_user_scram_credentials([(user, mechanism, password, iterations)])
    _redirect(c, "/users", f"Set {mechanism} credentials of {user}.")


async def user_remove(request):
    c: Console = request.app["console"]
    user, mechanism = _user_fields(await request.post())
    await c.admin.alter_user_scram_credentials(deletions=[(user, mechanism)])
    _redirect(c, "/users", f"Removed {mechanism} credentials of {user}.")


# -- the application -----------------------------------------------------------------------

_TOPIC = r"{name:[a-zA-Z0-9._-]{1,249}}"


def make_app(console: Console) -> web.Application:
    app = web.Application(middlewares=[make_guard(console)], client_max_size=MAX_BODY)
    app["console"] = console
    app.on_startup.append(console.start)
    app.on_cleanup.append(console.close)
    r = app.router
    r.add_get("/", overview)
    r.add_get("/topics", topics_page)
    r.add_post("/topics", create_topic)
    r.add_get(f"/topics/{_TOPIC}", topic_page)
    r.add_post(f"/topics/{_TOPIC}/configs", alter_topic)
    r.add_post(f"/topics/{_TOPIC}/partitions", add_partitions)
    r.add_post(f"/topics/{_TOPIC}/delete", delete_topic)
    r.add_get(f"/topics/{_TOPIC}/messages", messages_page)
    r.add_get(f"/topics/{_TOPIC}/messages/rows", message_rows)
    r.add_get(f"/topics/{_TOPIC}/message", message_page)
    r.add_post(f"/topics/{_TOPIC}/produce", produce)
    r.add_get("/groups", groups_page)
    r.add_get("/groups/view", group_page)
    r.add_post("/groups/reset", reset_group)
    r.add_post("/groups/delete", delete_group)
    r.add_get("/charts", charts_page)
    r.add_get("/charts/data", charts_data)
    r.add_get("/acls", acls_page)
    r.add_post("/acls/add", acl_add)
    r.add_post("/acls/remove", acl_remove)
    r.add_get("/users", users_page)
    r.add_post("/users/add", user_add)
    r.add_post("/users/remove", user_remove)
    r.add_static("/static", STATIC_DIR, follow_symlinks=False)
    return app

