"""The `MAILQUEUE` setting: read once, validated key by key, into a frozen `QueueSettings`."""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from . import validation as rules
from .core.errors import QueueSettingsError
from .routes import MxRoute as MxRoute  # the route types are named here too: the settings hold them
from .routes import RelayRoute as RelayRoute
from .routes import Route as Route
from .routes import TlsMode as TlsMode
from .routes import django_relay, parse_routes
from .shaping import Shaping, parse_shaping
from .suppression import SuppressionSettings, parse_suppression
from .validation import InvalidValueError, Validator

if TYPE_CHECKING:
    from .dkim import DkimEntry

#: The stores this package ships, by the path `STORE["BACKEND"]` names them.
BUILTIN_STORES = (
    "django_mailqueue.stores.orm.OrmStore",
    "django_mailqueue.stores.redis.RedisStore",
    "django_mailqueue.stores.memory.MemoryStore",
)


@dataclass(frozen=True)
class Timeouts:
    """Seconds to wait for each step of an SMTP session (RFC 5321 §4.5.3.2 by default)."""

    connect: float = 30
    greeting: float = 300
    mail: float = 300
    rcpt: float = 300
    data: float = 120
    data_block: float = 180
    data_end: float = 600
    #: the whole attempt, DNS included: a server trickling bytes cannot stretch it
    session: float = 1800


@dataclass(frozen=True)
class DnsSettings:
    #: None: the system's resolver configuration
    nameservers: tuple[str, ...] | None = None
    port: int = 53
    #: seconds for one lookup, retries included
    timeout: float = 10


@dataclass(frozen=True)
class StoreSettings:
    backend: str = BUILTIN_STORES[0]
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueSettings:
    """Every `MAILQUEUE` key, validated, with its default filled in."""

    store: StoreSettings = field(default_factory=StoreSettings)
    hostname: str = ""
    #: always has "*": when not given, the relay of Django's EMAIL_* settings
    routes: Mapping[str, Route] = field(default_factory=dict)
    dns: DnsSettings = field(default_factory=DnsSettings)
    mx_port: int = 25
    retry_delays: tuple[float, ...] = (300, 600, 1200, 2400, 4000)
    max_lifetime: float = 5 * 86400
    delay_warning: float | None = 4 * 3600
    dsn: bool = True
    max_items: int | None = None
    max_message_size: int = 25 * 1024 * 1024
    lease: float = 300
    max_reclaims: int = 3
    concurrency: int = 20
    timeouts: Timeouts = field(default_factory=Timeouts)
    mx_address_limit: int = 5
    rcpt_limit: int = 100
    poll_interval: float = 5
    history_days: int = 30
    #: seconds a failed item is kept (state failed) to be sent again; 0: dropped at once
    keep_failed: int = 7 * 86400
    max_bytes_in_flight: int = 100 * 1024 * 1024
    #: From domain (lowercase A-label, or "*") -> its DKIM entry; empty: no signing
    dkim: Mapping[str, DkimEntry] = field(default_factory=dict)
    #: honour recipient domains' MTA-STS policies (RFC 8461) on "mx" routes
    mta_sts: bool = True
    #: which permanent failures list an address, and for how long; None: no suppression list
    suppression: SuppressionSettings | None = field(default_factory=SuppressionSettings)
    metrics_collector: bool = False
    #: traffic shaping of MX destinations (and the rules and suspensions of relays)
    shaping: Shaping = field(default_factory=Shaping)

    def __post_init__(self) -> None:
        if "*" not in self.routes:
            object.__setattr__(self, "routes", {**self.routes, "*": _default_route()})

    def route_for(self, domain: str) -> Route:
        """The route for a recipient domain (lowercase A-label; "" for an address without one): its own, else "*"."""
        return self.routes.get(domain.lower()) or self.routes["*"]

    def timeouts_for(self, route: Route) -> Timeouts:
        """The session timeouts with `route`: a relay's TIMEOUT bounds each step; SESSION stays."""
        if isinstance(route, RelayRoute) and route.timeout is not None:
            step = route.timeout
            return dataclasses.replace(
                self.timeouts,
                connect=step,
                greeting=step,
                mail=step,
                rcpt=step,
                data=step,
                data_block=step,
                data_end=step,
            )
        return self.timeouts


@dataclass(frozen=True)
class Problem:
    """One thing wrong in `MAILQUEUE`, with the system check id that reports it."""

    check_id: str
    key: str
    message: str


# --- validation --------------------------------------------------------------------


def _retry_delays(value: Any) -> tuple[float, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple) or not value:
        raise InvalidValueError("must be a non-empty list of seconds")
    return tuple(rules.number()(v) for v in value)


def _store(value: Any) -> StoreSettings:
    value = rules.keyed(value, ("BACKEND", "OPTIONS"), "BACKEND and OPTIONS")
    backend = value.get("BACKEND", BUILTIN_STORES[0])
    options = value.get("OPTIONS", {})
    if not isinstance(backend, str):
        raise InvalidValueError("BACKEND must be a dotted path")
    if not isinstance(options, Mapping):
        raise InvalidValueError("OPTIONS must be a dict")
    return StoreSettings(backend=backend, options=dict(options))


def _dns(value: Any) -> DnsSettings:
    value = rules.keyed(value, ("NAMESERVERS", "PORT", "TIMEOUT"), "NAMESERVERS, PORT and TIMEOUT")
    servers = value.get("NAMESERVERS")
    if servers is not None:
        if isinstance(servers, str) or not isinstance(servers, list | tuple) or not servers:
            raise InvalidValueError("NAMESERVERS must be a non-empty list of IP addresses")
        for s in servers:
            try:
                ipaddress.ip_address(s)
            except (ValueError, TypeError):
                raise InvalidValueError(f"NAMESERVERS: {s!r} is not an IP address") from None
        servers = tuple(servers)
    try:
        port = rules.port(value.get("PORT", 53))
    except InvalidValueError as exc:
        raise InvalidValueError(f"PORT {exc}") from None
    try:
        timeout = rules.number()(value.get("TIMEOUT", 10))
    except InvalidValueError as exc:
        raise InvalidValueError(f"TIMEOUT {exc}") from None
    return DnsSettings(nameservers=servers, port=port, timeout=timeout)


_TIMEOUT_KEYS = {
    "CONNECT": "connect",
    "GREETING": "greeting",
    "MAIL": "mail",
    "RCPT": "rcpt",
    "DATA": "data",
    "DATA_BLOCK": "data_block",
    "DATA_END": "data_end",
    "SESSION": "session",
}


def _timeouts(value: Any) -> Timeouts:
    value = rules.keyed(value, _TIMEOUT_KEYS, f"any of {sorted(_TIMEOUT_KEYS)}")
    values = {}
    for key, attr in _TIMEOUT_KEYS.items():
        if key in value:
            try:
                values[attr] = rules.number(maximum=2147483)(value[key])
            except InvalidValueError as exc:
                raise InvalidValueError(f"{key} {exc}") from None
    return Timeouts(**values)


def _dkim(value: Any) -> Mapping[str, DkimEntry]:
    from .dkim import parse_dkim  # here: a worker without DKIM never imports the signer (docs/performance.md)

    return parse_dkim(value)


def _metrics_collector(value: Any) -> bool:
    from .metrics import NEEDS_EXTRA, prometheus_installed

    wanted = rules.boolean(value)
    if wanted and not prometheus_installed():
        raise InvalidValueError(f"is True, but {NEEDS_EXTRA[0].lower()}{NEEDS_EXTRA[1:]}")
    return wanted


@dataclass(frozen=True)
class SettingKey:
    """One `MAILQUEUE` key: its attribute, check id, default (as written in settings) and rule."""

    name: str
    attr: str
    check_id: str
    default: Any
    validate: Validator
    doc: str


KEYS: tuple[SettingKey, ...] = (
    SettingKey(
        "STORE",
        "store",
        "mailqueue.E002",
        {"BACKEND": BUILTIN_STORES[0], "OPTIONS": {}},
        _store,
        "the store: BACKEND (a dotted path) and OPTIONS",
    ),
    SettingKey(
        "HOSTNAME",
        "hostname",
        "mailqueue.E004",
        "",
        rules.hostname,
        "the EHLO name, and the Reporting-MTA and Message-ID domain of DSNs; empty: the machine's FQDN",
    ),
    SettingKey(
        "ROUTES",
        "routes",
        "mailqueue.E005",
        None,
        parse_routes,
        'recipient domain -> "mx" or a relay dict; "*" is the default route, when absent the relay of Django\'s '
        "EMAIL_* settings",
    ),
    SettingKey(
        "DNS",
        "dns",
        "mailqueue.E006",
        {},
        _dns,
        "NAMESERVERS (IP addresses), PORT and TIMEOUT; default: the system resolver",
    ),
    SettingKey("MX_PORT", "mx_port", "mailqueue.E007", 25, rules.port, "the port of MX hosts"),
    SettingKey(
        "RETRY_DELAYS",
        "retry_delays",
        "mailqueue.E008",
        [300, 600, 1200, 2400, 4000],
        _retry_delays,
        "seconds between attempts; the last repeats",
    ),
    SettingKey(
        "MAX_LIFETIME",
        "max_lifetime",
        "mailqueue.E009",
        5 * 86400,
        rules.number(),
        "seconds after which still-pending recipients fail",
    ),
    SettingKey(
        "DELAY_WARNING",
        "delay_warning",
        "mailqueue.E010",
        4 * 3600,
        rules.optional(rules.number()),
        "seconds after which one 'delayed' DSN is sent; None: never",
    ),
    SettingKey("DSN", "dsn", "mailqueue.E011", True, rules.boolean, "False: no DSNs at all (signals still fire)"),
    SettingKey(
        "MAX_ITEMS",
        "max_items",
        "mailqueue.E012",
        None,
        rules.optional(rules.number(integer=True)),
        "the most items the queue holds; enqueue past it raises FULL; None: no bound",
    ),
    SettingKey(
        "MAX_MESSAGE_SIZE",
        "max_message_size",
        "mailqueue.E013",
        25 * 1024 * 1024,
        rules.number(integer=True),
        "the largest message in bytes; larger raises TOO_LARGE",
    ),
    SettingKey(
        "LEASE",
        "lease",
        "mailqueue.E014",
        300,
        rules.number(minimum=1, exclusive=False, maximum=2147483),
        "seconds a claimed item belongs to its worker; renewed at half",
    ),
    SettingKey(
        "MAX_RECLAIMS",
        "max_reclaims",
        "mailqueue.E015",
        3,
        rules.number(integer=True, minimum=0, exclusive=False),
        "leases that expire without an outcome before the item fails",
    ),
    SettingKey(
        "CONCURRENCY",
        "concurrency",
        "mailqueue.E016",
        20,
        rules.number(integer=True, maximum=10000),
        "items in flight per worker process",
    ),
    SettingKey(
        "TIMEOUTS",
        "timeouts",
        "mailqueue.E017",
        {},
        _timeouts,
        "seconds for CONNECT, GREETING, MAIL, RCPT, DATA, DATA_BLOCK, DATA_END and the whole SESSION",
    ),
    SettingKey(
        "MX_ADDRESS_LIMIT",
        "mx_address_limit",
        "mailqueue.E018",
        5,
        rules.number(integer=True, maximum=100),
        "the most MX addresses tried in one attempt",
    ),
    SettingKey(
        "RCPT_LIMIT",
        "rcpt_limit",
        "mailqueue.E019",
        100,
        rules.number(integer=True, maximum=100000),
        "the most recipients in one SMTP transaction",
    ),
    SettingKey(
        "POLL_INTERVAL",
        "poll_interval",
        "mailqueue.E020",
        5,
        rules.number(maximum=3600),
        "seconds an idle worker waits before looking again when no wake-up came",
    ),
    SettingKey(
        "HISTORY_DAYS",
        "history_days",
        "mailqueue.E021",
        30,
        rules.number(integer=True, minimum=0, exclusive=False),
        "days delivery history is kept; 0 keeps none",
    ),
    SettingKey(
        "KEEP_FAILED",
        "keep_failed",
        "mailqueue.E029",
        7 * 86400,
        rules.number(integer=True, minimum=0, exclusive=False),
        "seconds a failed item is kept (state 'failed', its message too) to be sent again; 0: dropped at once",
    ),
    SettingKey(
        "MAX_BYTES_IN_FLIGHT",
        "max_bytes_in_flight",
        "mailqueue.E022",
        100 * 1024 * 1024,
        rules.number(integer=True, minimum=1024 * 1024, exclusive=False),
        "bytes of messages a worker holds at once (each counted twice: read and on the wire); one larger "
        "message still goes alone",
    ),
    SettingKey(
        "DKIM",
        "dkim",
        "mailqueue.E023",
        {},
        _dkim,
        'From domain (or "*" with DOMAIN) -> SELECTOR, PRIVATE_KEY, ALGORITHM, HEADERS: the worker signs with it',
    ),
    SettingKey(
        "MTA_STS",
        "mta_sts",
        "mailqueue.E024",
        True,
        rules.boolean,
        "honour recipient domains' MTA-STS policies (RFC 8461) on 'mx' routes; False: off",
    ),
    SettingKey(
        "SUPPRESSION",
        "suppression",
        "mailqueue.E026",
        {"STATUSES": ["5.1.1", "5.1.2", "5.1.10", "5.2.1"], "DAYS": 365},
        parse_suppression,
        "STATUSES: the permanent failures that put an address on the suppression list; DAYS: how long it stays; "
        "None: no list",
    ),
    SettingKey(
        "METRICS_COLLECTOR",
        "metrics_collector",
        "mailqueue.E025",
        False,
        _metrics_collector,
        "True: the queue's depth on the site's Prometheus /metrics (prometheus_client's default registry); "
        "needs django-mailqueue[prometheus]",
    ),
    SettingKey(
        "SHAPING",
        "shaping",
        "mailqueue.E028",
        {},
        parse_shaping,
        'MX destinations\' limits and throttling rules: recipient domain, ".suffix" (every destination whose MX '
        'hosts are under it) or "*" -> RATE, CONNECTIONS, MESSAGES_PER_CONNECTION, RULES, DEFAULT_RULES, SUSPEND, '
        "SUSPEND_MAX, DEAD_AFTER",
    ),
)
KEYS_BY_NAME = {k.name: k for k in KEYS}


def settings_problems(raw: Any) -> list[Problem]:
    """Everything wrong in a `MAILQUEUE` value, one `Problem` per key."""
    problems, _ = _parse(raw)
    return problems


def load_settings(raw: Any) -> QueueSettings:
    """Parse a `MAILQUEUE` value; raise `QueueSettingsError` naming the first bad key."""
    problems, parsed = _parse(raw)
    if problems:
        first = problems[0]
        raise QueueSettingsError(first.message, check_id=first.check_id)
    assert parsed is not None
    return parsed


def _parse(raw: Any) -> tuple[list[Problem], QueueSettings | None]:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        return [Problem("mailqueue.E001", "MAILQUEUE", "MAILQUEUE must be a dict")], None
    problems: list[Problem] = []
    unknown = sorted(str(k) for k in set(raw) - set(KEYS_BY_NAME))
    for name in unknown:
        problems.append(
            Problem(
                "mailqueue.E001", name, f"MAILQUEUE[{name!r}] is not a setting; the keys are {sorted(KEYS_BY_NAME)}"
            )
        )
    values: dict[str, Any] = {}
    for key in KEYS:
        if key.name not in raw:
            continue
        try:
            values[key.attr] = key.validate(raw[key.name])
        except InvalidValueError as exc:
            problems.append(Problem(key.check_id, key.name, f"MAILQUEUE[{key.name!r}] {exc}"))
    store = values.get("store", StoreSettings())
    problems.extend(_store_problems(store))
    routes = values.get("routes") or {}
    if "*" not in routes:  # Django's EMAIL_* relay; read here too, so a problem with it is reported as one
        try:
            values["routes"] = {**routes, "*": django_relay()}
        except InvalidValueError as exc:
            problems.append(Problem("mailqueue.E005", "ROUTES", f"MAILQUEUE['ROUTES'] {exc}"))
    if "hostname" not in values or not values["hostname"]:
        values["hostname"] = _default_hostname()
    if problems:
        return problems, None
    return [], QueueSettings(**values)


def _store_problems(store: StoreSettings) -> list[Problem]:
    from .stores.base import QueueStore

    try:
        cls = import_string(store.backend)
    except ImportError as exc:
        hint = ""
        if store.backend == "django_mailqueue.stores.redis.RedisStore":
            hint = " (install django-mailqueue[redis])"
        return [
            Problem(
                "mailqueue.E003",
                "STORE",
                f"MAILQUEUE['STORE']['BACKEND'] {store.backend!r} cannot be imported{hint}: {exc}; "
                f"the stores that exist are {', '.join(BUILTIN_STORES)}",
            )
        ]
    if not (isinstance(cls, type) and issubclass(cls, QueueStore)):
        return [
            Problem(
                "mailqueue.E003",
                "STORE",
                f"MAILQUEUE['STORE']['BACKEND'] {store.backend!r} is not a QueueStore; "
                f"the stores that exist are {', '.join(BUILTIN_STORES)}",
            )
        ]
    return [
        Problem("mailqueue.E003", "STORE", f"MAILQUEUE['STORE']['OPTIONS'] {message}")
        for message in cls.check_options(store.options)
    ]


def _default_route() -> Route:
    try:
        return django_relay()
    except InvalidValueError as exc:
        raise QueueSettingsError(f"MAILQUEUE['ROUTES'] {exc}", check_id="mailqueue.E005") from None


def _default_hostname() -> str:
    from django.core.mail.utils import DNS_NAME

    return str(DNS_NAME)


@functools.cache
def get_settings() -> QueueSettings:
    """The project's `MAILQUEUE`, parsed once (again after `override_settings`)."""
    return load_settings(getattr(django_settings, "MAILQUEUE", None))


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in ("MAILQUEUE", "CACHES", "DATABASES") or setting.startswith("EMAIL_"):
        get_settings.cache_clear()
        from . import stores

        stores.reset_store()
