"""The `MAILQUEUE` setting: read once, validated key by key, into a frozen `QueueSettings`."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from .exceptions import QueueSettingsError

#: The stores this package ships, by the path `STORE["BACKEND"]` names them.
BUILTIN_STORES = (
    "django_mailqueue.stores.orm.OrmStore",
    "django_mailqueue.stores.redis.RedisStore",
    "django_mailqueue.stores.memory.MemoryStore",
)

TlsMode = Literal["starttls", "implicit", "none"]


@dataclass(frozen=True)
class RelayRoute:
    """Deliver through a relay (smarthost) rather than to the domain's MX hosts."""

    host: str
    port: int
    username: str | None = None
    #: never shown: `repr` leaves it out, and errors mask it
    password: str | None = field(default=None, repr=False)
    tls: TlsMode = "starttls"

    @property
    def kind(self) -> str:
        return "relay"


@dataclass(frozen=True)
class MxRoute:
    """Deliver to the recipient domain's MX hosts (implicit MX when it has none)."""

    @property
    def kind(self) -> str:
        return "mx"


Route = RelayRoute | MxRoute


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
    routes: Mapping[str, Route] = field(default_factory=lambda: {"*": MxRoute()})
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
    max_bytes_in_flight: int = 100 * 1024 * 1024

    def route_for(self, domain: str) -> Route:
        """The route for a recipient domain: its own entry, else `"*"`, else MX."""
        return self.routes.get(domain.lower()) or self.routes.get("*") or MxRoute()


@dataclass(frozen=True)
class Problem:
    """One thing wrong in `MAILQUEUE`, with the system check id that reports it."""

    check_id: str
    key: str
    message: str


# --- validation --------------------------------------------------------------------

_Validator = Callable[[Any], Any]


class _InvalidValueError(Exception):
    pass


def _number(
    *, minimum: float = 0, exclusive: bool = True, integer: bool = False, maximum: float | None = None
) -> _Validator:
    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _InvalidValueError(f"must be {'an integer' if integer else 'a number'}, not {type(value).__name__}")
        if integer and not isinstance(value, int):
            raise _InvalidValueError("must be an integer")
        if value != value or value in (float("inf"), float("-inf")):
            raise _InvalidValueError("must be a finite number")
        if (exclusive and value <= minimum) or (not exclusive and value < minimum):
            raise _InvalidValueError(f"must be {'above' if exclusive else 'at least'} {minimum}")
        if maximum is not None and value > maximum:
            raise _InvalidValueError(f"must be at most {maximum}")
        return value

    return check


def _optional(inner: _Validator) -> _Validator:
    def check(value: Any) -> Any:
        return None if value is None else inner(value)

    return check


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _InvalidValueError(f"must be True or False, not {value!r}")
    return value


def _port(value: Any) -> int:
    result: int = _number(integer=True, minimum=1, exclusive=False, maximum=65535)(value)
    return result


def _hostname(value: Any) -> str:
    if not isinstance(value, str):
        raise _InvalidValueError("must be a string")
    if not value:
        return ""
    if any(c in value for c in "\r\n\x00 \t") or len(value) > 253:
        raise _InvalidValueError("must be a host name without spaces or line breaks")
    try:
        ipaddress.ip_address(value.strip("[]"))
        return value
    except ValueError:
        pass
    try:
        value.encode("idna")
    except UnicodeError as exc:
        raise _InvalidValueError(f"is not a valid host name ({exc})") from None
    return value


def _retry_delays(value: Any) -> tuple[float, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple) or not value:
        raise _InvalidValueError("must be a non-empty list of seconds")
    return tuple(_number()(v) for v in value)


def _store(value: Any) -> StoreSettings:
    if not isinstance(value, Mapping):
        raise _InvalidValueError("must be a dict with BACKEND and OPTIONS")
    unknown = set(value) - {"BACKEND", "OPTIONS"}
    if unknown:
        raise _InvalidValueError(f"has unknown keys {sorted(unknown)}; it takes BACKEND and OPTIONS")
    backend = value.get("BACKEND", BUILTIN_STORES[0])
    options = value.get("OPTIONS", {})
    if not isinstance(backend, str):
        raise _InvalidValueError("BACKEND must be a dotted path")
    if not isinstance(options, Mapping):
        raise _InvalidValueError("OPTIONS must be a dict")
    return StoreSettings(backend=backend, options=dict(options))


def _relay(domain: str, value: Mapping[str, Any]) -> RelayRoute:
    allowed = {"HOST", "PORT", "USERNAME", "PASSWORD", "TLS"}
    unknown = set(value) - allowed
    if unknown:
        raise _InvalidValueError(
            f"route {domain!r} has unknown keys {sorted(unknown)}; a relay takes {sorted(allowed)}"
        )
    host = value.get("HOST")
    if not isinstance(host, str) or not host:
        raise _InvalidValueError(f"route {domain!r} needs HOST, a host name or an IP address")
    try:
        _hostname(host)
    except _InvalidValueError as exc:
        raise _InvalidValueError(f"route {domain!r}: HOST {exc}") from None
    tls = value.get("TLS", "starttls")
    if tls not in ("starttls", "implicit", "none"):
        raise _InvalidValueError(f"route {domain!r}: TLS must be 'starttls', 'implicit' or 'none'")
    default_port = 465 if tls == "implicit" else 587
    try:
        port = _port(value.get("PORT", default_port))
    except _InvalidValueError as exc:
        raise _InvalidValueError(f"route {domain!r}: PORT {exc}") from None
    username, password = value.get("USERNAME"), value.get("PASSWORD")
    for name, v in (("USERNAME", username), ("PASSWORD", password)):
        if v is not None and (not isinstance(v, str) or any(c in v for c in "\r\n\x00")):
            raise _InvalidValueError(f"route {domain!r}: {name} must be a string without line breaks")
    if (username is None) != (password is None):
        raise _InvalidValueError(f"route {domain!r}: USERNAME and PASSWORD go together")
    return RelayRoute(host=host, port=port, username=username, password=password, tls=tls)


def _routes(value: Any) -> dict[str, Route]:
    if not isinstance(value, Mapping) or not value:
        raise _InvalidValueError('must be a dict of recipient domain -> "mx" or a relay dict')
    routes: dict[str, Route] = {}
    for domain, route in value.items():
        if not isinstance(domain, str) or not domain:
            raise _InvalidValueError("keys must be recipient domains or '*'")
        key = domain.lower()
        if key != "*":
            try:
                key = key.encode("idna").decode("ascii")
            except UnicodeError:
                raise _InvalidValueError(f"{domain!r} is not a domain") from None
        if route == "mx":
            routes[key] = MxRoute()
        elif isinstance(route, Mapping):
            routes[key] = _relay(domain, route)
        else:
            raise _InvalidValueError(f'route {domain!r} must be "mx" or a relay dict with HOST')
    routes.setdefault("*", MxRoute())
    return routes


def _dns(value: Any) -> DnsSettings:
    if not isinstance(value, Mapping):
        raise _InvalidValueError("must be a dict with NAMESERVERS, PORT and TIMEOUT")
    unknown = set(value) - {"NAMESERVERS", "PORT", "TIMEOUT"}
    if unknown:
        raise _InvalidValueError(f"has unknown keys {sorted(unknown)}")
    servers = value.get("NAMESERVERS")
    if servers is not None:
        if isinstance(servers, str) or not isinstance(servers, list | tuple) or not servers:
            raise _InvalidValueError("NAMESERVERS must be a non-empty list of IP addresses")
        for s in servers:
            try:
                ipaddress.ip_address(s)
            except (ValueError, TypeError):
                raise _InvalidValueError(f"NAMESERVERS: {s!r} is not an IP address") from None
        servers = tuple(servers)
    try:
        port = _port(value.get("PORT", 53))
    except _InvalidValueError as exc:
        raise _InvalidValueError(f"PORT {exc}") from None
    try:
        timeout = _number()(value.get("TIMEOUT", 10))
    except _InvalidValueError as exc:
        raise _InvalidValueError(f"TIMEOUT {exc}") from None
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
    if not isinstance(value, Mapping):
        raise _InvalidValueError(f"must be a dict with any of {sorted(_TIMEOUT_KEYS)}")
    unknown = set(value) - set(_TIMEOUT_KEYS)
    if unknown:
        raise _InvalidValueError(f"has unknown keys {sorted(unknown)}; it takes {sorted(_TIMEOUT_KEYS)}")
    values = {}
    for key, attr in _TIMEOUT_KEYS.items():
        if key in value:
            try:
                values[attr] = _number(maximum=2147483)(value[key])
            except _InvalidValueError as exc:
                raise _InvalidValueError(f"{key} {exc}") from None
    return Timeouts(**values)


@dataclass(frozen=True)
class SettingKey:
    """One `MAILQUEUE` key: its attribute, check id, default (as written in settings) and rule."""

    name: str
    attr: str
    check_id: str
    default: Any
    validate: _Validator
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
        _hostname,
        "EHLO name, Message-ID domain and Reporting-MTA; empty: the machine's FQDN",
    ),
    SettingKey(
        "ROUTES",
        "routes",
        "mailqueue.E005",
        {"*": "mx"},
        _routes,
        'recipient domain -> "mx" or a relay dict; "*" is the default route',
    ),
    SettingKey(
        "DNS",
        "dns",
        "mailqueue.E006",
        {},
        _dns,
        "NAMESERVERS (IP addresses), PORT and TIMEOUT; default: the system resolver",
    ),
    SettingKey("MX_PORT", "mx_port", "mailqueue.E007", 25, _port, "the port of MX hosts"),
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
        _number(),
        "seconds after which still-pending recipients fail",
    ),
    SettingKey(
        "DELAY_WARNING",
        "delay_warning",
        "mailqueue.E010",
        4 * 3600,
        _optional(_number()),
        "seconds after which one 'delayed' DSN is sent; None: never",
    ),
    SettingKey("DSN", "dsn", "mailqueue.E011", True, _boolean, "False: no DSNs at all (signals still fire)"),
    SettingKey(
        "MAX_ITEMS",
        "max_items",
        "mailqueue.E012",
        None,
        _optional(_number(integer=True)),
        "the most items the queue holds; enqueue past it raises FULL; None: no bound",
    ),
    SettingKey(
        "MAX_MESSAGE_SIZE",
        "max_message_size",
        "mailqueue.E013",
        25 * 1024 * 1024,
        _number(integer=True),
        "the largest message in bytes; larger raises TOO_LARGE",
    ),
    SettingKey(
        "LEASE",
        "lease",
        "mailqueue.E014",
        300,
        _number(minimum=1, exclusive=False, maximum=2147483),
        "seconds a claimed item belongs to its worker; renewed at half",
    ),
    SettingKey(
        "MAX_RECLAIMS",
        "max_reclaims",
        "mailqueue.E015",
        3,
        _number(integer=True, minimum=0, exclusive=False),
        "leases that expire without an outcome before the item fails",
    ),
    SettingKey(
        "CONCURRENCY",
        "concurrency",
        "mailqueue.E016",
        20,
        _number(integer=True, maximum=10000),
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
        _number(integer=True, maximum=100),
        "the most MX addresses tried in one attempt",
    ),
    SettingKey(
        "RCPT_LIMIT",
        "rcpt_limit",
        "mailqueue.E019",
        100,
        _number(integer=True, maximum=100000),
        "the most recipients in one SMTP transaction",
    ),
    SettingKey(
        "POLL_INTERVAL",
        "poll_interval",
        "mailqueue.E020",
        5,
        _number(maximum=3600),
        "seconds an idle worker waits before looking again when no wake-up came",
    ),
    SettingKey(
        "HISTORY_DAYS",
        "history_days",
        "mailqueue.E021",
        30,
        _number(integer=True, minimum=0, exclusive=False),
        "days delivery history is kept; 0 keeps none",
    ),
    SettingKey(
        "MAX_BYTES_IN_FLIGHT",
        "max_bytes_in_flight",
        "mailqueue.E022",
        100 * 1024 * 1024,
        _number(integer=True, minimum=1024 * 1024, exclusive=False),
        "bytes of messages a worker holds at once (each counted twice: read and on the wire); one larger "
        "message still goes alone",
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
        except _InvalidValueError as exc:
            problems.append(Problem(key.check_id, key.name, f"MAILQUEUE[{key.name!r}] {exc}"))
    store = values.get("store", StoreSettings())
    problems.extend(_store_problems(store))
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


def _default_hostname() -> str:
    from django.core.mail.utils import DNS_NAME

    return str(DNS_NAME)


@functools.cache
def get_settings() -> QueueSettings:
    """The project's `MAILQUEUE`, parsed once (again after `override_settings`)."""
    return load_settings(getattr(django_settings, "MAILQUEUE", None))


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in ("MAILQUEUE", "CACHES", "DATABASES"):
        get_settings.cache_clear()
        from . import stores

        stores.reset_store()
