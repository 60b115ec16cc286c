# fastlog/security/quota.py — client quotas: Kafka's model, precedence and rate accounting.
#
# Owns: what a client quota is (the keys producer_byte_rate, consumer_byte_rate,
# request_percentage, each a value per entity), the entities (user, client-id, user +
# client-id, each name or "<default>"), the 8 levels of KIP-55's precedence, and the
# accounting that turns what a client did into a throttle time (Kafka's ClientQuotaManager:
# a rate over quota.window.num samples of quota.window.size.seconds; on violation the
# throttle time that brings the rate back to the quota).
# An entity is a (user, client_id) pair: None where the entity has no such part, DEFAULT
# ("<default>", Kafka's ConfigEntityName.Default) for a default one. The user is the
# authenticated principal's name ("ANONYMOUS" unauthenticated), as Kafka.
# Stored (through fastlog/metadata) as config maps of strings, as Kafka keeps them in
# /config/users/<user>, /config/clients/<id> and /config/users/<user>/clients/<id>.
# Called from: the broker's asyncio API loop only (ClientQuotas holds no lock); the
# parsing helpers from anywhere (the CLI, the admin client).
"""Client quotas: keys, entities, precedence and throttle accounting."""

from __future__ import annotations

import math
import time

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# key -> whether Kafka types it LONG (whole numbers) rather than DOUBLE
QUOTA_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False}

DEFAULT = "<default>"
# Most sensors kept (idle ones are dropped past it) and most clients the throttle-time
# counters name (the rest count under OTHER_CLIENTS).
MAX_SENSORS = 10000
OTHER_CLIENTS = "<other>"
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID)

Entity = tuple  # (user | DEFAULT | None, client_id | DEFAULT | None)


class QuotaError(ValueError):
    """A quota entity or value Kafka would refuse (INVALID_REQUEST); the message says why."""


def entity_from_parts(parts) -> Entity:
    """The entity of [(entity type, name or None for the default)] (AlterClientQuotas'
    form); QuotaError for an entity Kafka refuses or fastlog does not serve."""
    user = client = None
    seen = set()
    for entity_type, name in parts:
        if entity_type in seen:
            raise QuotaError(f"Duplicate {entity_type} entity type in the entity")
        seen.add(entity_type)
        if entity_type == IP:
            raise QuotaError("IP quotas (connection_creation_rate) are not supported by fastlog")
        if entity_type not in ENTITY_TYPES:
            raise QuotaError(f"Unknown entity type {entity_type!r}: one of user, client-id")
        if name == "":
            raise QuotaError(f"The {entity_type} entity name must not be empty")
        value = DEFAULT if name is None else name
        if entity_type == USER:
            user = value
        else:
            client = value
    if user is None and client is None:
        raise QuotaError("The entity names no user and no client-id")
    return (user, client)


def entity_parts(entity: Entity) -> list[tuple[str, str | None]]:
    """[(entity type, name or None for the default)] of an entity, user first."""
    out = []
    for entity_type, value in zip(ENTITY_TYPES, entity, strict=True):
        if value is not None:
            out.append((entity_type, None if value == DEFAULT else value))
    return out


def describe_entity(entity: Entity) -> str:
    """The entity as kafka-configs prints it: user-principal 'alice', client-id 'c'."""
    words = []
    for entity_type, value in zip(("user-principal", "client-id"), entity, strict=True):
        if value == DEFAULT:
            words.append(f"the default {entity_type}")
        elif value is not None:
            words.append(f"{entity_type} '{value}'")
    return ", ".join(words)


def check_quota_value(key: str, value: float) -> str | None:
    """None when `value` is a valid value of quota `key`, else the sentence why not."""
    if key == CONNECTION_CREATION_RATE:
        return "connection_creation_rate (an IP quota) is not supported by fastlog"
    if key not in QUOTA_KEYS:
        return (f"{key!r} is not a client quota: one of "
                f"{', '.join(sorted(QUOTA_KEYS))}")
    if not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
        return f"{key} must be a number"
    if QUOTA_KEYS[key] and value != int(value):
        return f"{key} must be a whole number (a Long value)"
    if value <= 0:
        return f"{key} must be positive"
    return None


def quota_values(config: dict[str, str]) -> dict[str, float]:
    """The quota keys of a stored config map (a user's also holds SCRAM credentials), as
    numbers; values that do not parse are left out."""
    out = {}
    for key in QUOTA_KEYS:
        raw = config.get(key)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        if check_quota_value(key, value) is None:
            out[key] = value
    return out


def format_quota_value(key: str, value: float) -> str:
    """A quota value as Kafka stores it: a LONG key as a whole number."""
    return str(int(value)) if QUOTA_KEYS.get(key) else repr(float(value))


def principal_name(principal: str | None) -> str:
    """The user entity's name of a principal ("User:alice" -> "alice"; ANONYMOUS when the
    connection has none)."""
    if not principal:
        return "ANONYMOUS"
    return principal.split(":", 1)[1] if ":" in principal else principal


def precedence(user: str, client_id: str):
    """KIP-55's eight levels, most specific first: (stored entity, metric tags) where the
    tags (user, client-id; "" for a part the quota does not split by) name the sensor the
    clients matching that level share."""
    return (
        ((user, client_id), (user, client_id)),
        ((user, DEFAULT), (user, client_id)),
        ((user, None), (user, "")),
        ((DEFAULT, client_id), (user, client_id)),
        ((DEFAULT, DEFAULT), (user, client_id)),
        ((DEFAULT, None), (user, "")),
        ((None, client_id), ("", client_id)),
        ((None, DEFAULT), ("", client_id)),
    )


class Rate:
    """Kafka's Rate over a SampledStat: `samples` windows of `window_s` seconds; the rate
    is the sum over live windows divided by the time they span, at least samples - 1
    full windows (so one burst after a quiet spell is not judged over a short time)."""

    __slots__ = ("samples", "window_s", "_index", "_value")

    def __init__(self, samples: int, window_s: float):
        self.samples = samples
        self.window_s = window_s
        self._index = [-1] * samples   # the window number each slot holds
        self._value = [0.0] * samples

    def record(self, value: float, now: float) -> None:
        n = int(now // self.window_s)
        slot = n % self.samples
        if self._index[slot] != n:
            self._index[slot] = n
            self._value[slot] = 0.0
        self._value[slot] += value

    def window_size(self, now: float) -> float:
        """The time (s) the rate is measured over (Kafka's Rate.windowSize)."""
        return self.measure_with_window(now)[1]

    def measure(self, now: float) -> float:
        return self.measure_with_window(now)[0]

    def measure_with_window(self, now: float) -> tuple[float, float]:
        """(rate, the time in s it is measured over) in one pass over the samples."""
        window_s = self.window_s
        n = int(now // window_s)
        first = n - self.samples
        total = 0.0
        oldest = n + 1
        for i, v in zip(self._index, self._value, strict=True):
            if first < i:   # a slot never holds a window after n
                total += v
                if i < oldest:
                    oldest = i
        elapsed = now - oldest * window_s if oldest <= n else 0.0
        elapsed = max(elapsed, (self.samples - 1) * window_s)
        return total / elapsed, elapsed


class ClientQuotas:
    """The quotas in force on this broker and the rate of every sensor they define.

    `replace_all(configs)` installs the entities' stored configs (from the metadata store,
    at start and on every change); `record(kind, user, client_id, value)` accounts what a
    request did and returns the throttle time in ms (0 within quota). `active` is False
    while no quota is configured: the request path then does nothing else."""

    def __init__(self, samples: int = 11, window_s: float = 1.0, clock=time.monotonic):
        self.samples = samples
        self.window_s = window_s
        self.clock = clock
        self._quotas: dict[Entity, dict[str, float]] = {}
        self._sensors: dict[tuple[str, str, str], Rate] = {}
        # (kind, user, client id) -> what quota() found, until the quotas change
        self._lookups: dict[tuple[str, str, str], tuple | None] = {}
        # throttle time (ms) given per (kind, user, client-id): Kafka's throttle-time metric
        self.throttle_ms_total: dict[tuple[str, str, str], float] = {}
        self.active = False

    def replace_all(self, configs: dict[Entity, dict[str, str]]) -> None:
        """Install every entity's stored config (from the metadata store)."""
        quotas = {}
        for entity, config in configs.items():
            values = quota_values(config)
            if values:
                quotas[entity] = values
        if quotas != self._quotas:
            # A client's level may have changed: its accounting starts afresh, as Kafka's
            # does when a quota's metric tags change.
            self._quotas = quotas
            self._sensors.clear()
            self._lookups.clear()
        self.active = bool(quotas)

    def entities(self) -> dict[Entity, dict[str, float]]:
        return {e: dict(v) for e, v in self._quotas.items()}

    def quota(self, kind: str, user: str, client_id: str):
        """(quota value, metric tags) that applies to the client for quota `kind`, or None."""
        key = (kind, user, client_id)
        found = self._lookups.get(key, self)
        if found is not self:
            return found
        found = None
        quotas = self._quotas
        for entity, tags in precedence(user, client_id):
            values = quotas.get(entity)
            if values is not None and kind in values:
                found = (values[kind], tags)
                break
        if len(self._lookups) >= MAX_SENSORS:
            self._lookups.clear()
        self._lookups[key] = found
        return found

    def record(self, kind: str, user: str, client_id: str | None, value: float) -> int:
        """Account `value` (bytes, or handler milliseconds for request_percentage) to the
        client's sensor; the throttle time in ms, 0 while within quota."""
        client_id = client_id or ""
        found = self.quota(kind, user, client_id)
        if found is None:
            return 0
        bound, tags = found
        if kind == REQUEST_PERCENTAGE:
            # a percentage of one thread's time: ms of handler time per s, / 10
            bound = bound * 10.0
        key = (kind, *tags)
        now = self.clock()
        sensor = self._sensors.get(key)
        if sensor is None:
            if len(self._sensors) >= MAX_SENSORS:
                self._expire(now)
            sensor = self._sensors[key] = Rate(self.samples, self.window_s)
        sensor.record(value, now)
        rate, elapsed = sensor.measure_with_window(now)
        if rate <= bound:
            return 0
        # Kafka's QuotaUtils.throttleTime: how long until the rate over the window is back
        # at the quota; bounded by the whole measured window.
        window_ms = self.samples * self.window_s * 1000.0
        throttle = (rate - bound) / bound * elapsed * 1000.0
        throttle_ms = int(min(throttle, window_ms))
        stat_key = (kind, user, client_id)
        totals = self.throttle_ms_total
        if stat_key not in totals and len(totals) >= MAX_SENSORS:
            stat_key = (kind, "", OTHER_CLIENTS)
        totals[stat_key] = totals.get(stat_key, 0) + throttle_ms
        return throttle_ms

    def _expire(self, now: float) -> None:
        """Forget the sensors that saw nothing during the whole window (Kafka expires idle
        quota sensors too): client ids are the clients' to choose."""
        n = int(now // self.window_s)
        self._sensors = {k: r for k, r in self._sensors.items()
                         if max(r._index) > n - self.samples}


# DescribeClientQuotas' match types (Kafka's ClientQuotaFilterComponent)
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def match_entities(entities, components, strict: bool) -> list[Entity]:
    """The entities a DescribeClientQuotas filter selects: each component [(entity type,
    match type, match)] must hold (EXACT: that name; DEFAULT: the default entity;
    SPECIFIED: any name, the default included); with `strict`, an entity may have no
    part the filter does not name. QuotaError for a filter Kafka refuses."""
    wanted: dict[str, tuple[int, str | None]] = {}
    for entity_type, match_type, match in components:
        if entity_type == IP:
            raise QuotaError("IP quotas are not supported by fastlog")
        if entity_type not in ENTITY_TYPES:
            raise QuotaError(f"Custom entity type {entity_type!r} not supported")
        if entity_type in wanted:
            raise QuotaError(f"Duplicate {entity_type} filter component entity type")
        if match_type == MATCH_EXACT:
            if match is None:
                raise QuotaError(f"The exact match of {entity_type} needs a name")
        elif match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
            if match is not None:
                raise QuotaError(f"A default or any-name match of {entity_type} names no "
                                 "entity")
        else:
            raise QuotaError(f"Unknown match type {match_type}")
        wanted[entity_type] = (match_type, match)
    out = []
    for entity in entities:
        ok = True
        for entity_type, value in zip(ENTITY_TYPES, entity, strict=True):
            want = wanted.get(entity_type)
            if want is None:
                ok = value is None or not strict
            elif want[0] == MATCH_EXACT:
                ok = value == want[1]
            elif want[0] == MATCH_DEFAULT:
                ok = value == DEFAULT
            else:
                ok = value is not None
            if not ok:
                break
        if ok:
            out.append(entity)
    return out
