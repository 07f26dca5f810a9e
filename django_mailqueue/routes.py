"""Routes: where mail for a recipient domain goes (its MX hosts, or a relay), from `ROUTES` or Django's `EMAIL_*`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from django.conf import settings as django_settings

from . import validation as rules
from .shaping import RELAY_LIMIT_KEYS, Limits, parse_limits
from .validation import InvalidValueError

TlsMode = Literal["starttls", "implicit", "none"]

#: The keys a relay route takes.
RELAY_KEYS = (
    "HOST",
    "PORT",
    "USERNAME",
    "PASSWORD",
    "TLS",
    "TIMEOUT",
    "SSL_CERTFILE",
    "SSL_KEYFILE",
    *RELAY_LIMIT_KEYS,
)


@dataclass(frozen=True)
class RelayRoute:
    """Deliver through a relay (smarthost) rather than to the domain's MX hosts."""

    host: str
    port: int
    username: str | None = None
    #: never shown: `repr` leaves it out, and errors mask it
    password: str | None = field(default=None, repr=False)
    tls: TlsMode = "starttls"
    #: seconds each step of a session with the relay may take (instead of TIMEOUTS' per-step values)
    timeout: float | None = None
    #: a client certificate (PEM) presented in the TLS handshake, and its key when not in the same file
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    #: RATE (shared by every worker), CONNECTIONS (per worker process), MESSAGES_PER_CONNECTION
    limits: Limits = Limits()

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

#: How Django names each relay key among its settings.
_DJANGO_NAMES = {
    "HOST": "EMAIL_HOST",
    "PORT": "EMAIL_PORT",
    "USERNAME": "EMAIL_HOST_USER",
    "PASSWORD": "EMAIL_HOST_PASSWORD",
    "TLS": "EMAIL_USE_TLS/EMAIL_USE_SSL",
    "TIMEOUT": "EMAIL_TIMEOUT",
    "SSL_CERTFILE": "EMAIL_SSL_CERTFILE",
    "SSL_KEYFILE": "EMAIL_SSL_KEYFILE",
}


def parse_routes(value: Any) -> dict[str, Route]:
    """`ROUTES` as routes keyed by lowercase A-label domain (or "*"); None is no route of its own."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not value:
        raise InvalidValueError('must be a dict of recipient domain -> "mx" or a relay dict')
    routes: dict[str, Route] = {}
    for domain, route in value.items():
        if not isinstance(domain, str) or not domain:
            raise InvalidValueError("keys must be recipient domains or '*'")
        key = domain.lower()
        if key != "*":
            try:
                key = key.encode("idna").decode("ascii")
            except UnicodeError:
                raise InvalidValueError(f"{domain!r} is not a domain") from None
        if route == "mx":
            routes[key] = MxRoute()
        elif isinstance(route, Mapping):
            routes[key] = parse_relay(route, where=f"route {domain!r}")
        else:
            raise InvalidValueError(f'route {domain!r} must be "mx" or a relay dict with HOST')
    return routes


def parse_relay(value: Mapping[str, Any], *, where: str, name: Callable[[str], str] = str) -> RelayRoute:
    """A relay dict as a `RelayRoute`; errors start with `where` and call each key `name(key)`."""
    unknown = set(value) - set(RELAY_KEYS)
    if unknown:
        raise InvalidValueError(f"{where} has unknown keys {sorted(unknown)}; a relay takes {sorted(RELAY_KEYS)}")
    host = value.get("HOST")
    if not isinstance(host, str) or not host:
        raise InvalidValueError(f"{where} needs {name('HOST')}, a host name or an IP address")
    try:
        rules.hostname(host)
    except InvalidValueError as exc:
        raise InvalidValueError(f"{where}: {name('HOST')} {exc}") from None
    tls = value.get("TLS", "starttls")
    if tls not in ("starttls", "implicit", "none"):
        raise InvalidValueError(f"{where}: TLS must be 'starttls', 'implicit' or 'none'")
    port = _checked(rules.port, value.get("PORT", 465 if tls == "implicit" else 587), where, name("PORT"))
    timeout = _checked(rules.optional(rules.number(maximum=2147483)), value.get("TIMEOUT"), where, name("TIMEOUT"))
    username, password = value.get("USERNAME"), value.get("PASSWORD")
    certfile, keyfile = value.get("SSL_CERTFILE"), value.get("SSL_KEYFILE")
    for key, text in (
        ("USERNAME", username),
        ("PASSWORD", password),
        ("SSL_CERTFILE", certfile),
        ("SSL_KEYFILE", keyfile),
    ):
        if text is not None and (not isinstance(text, str) or not text or any(c in text for c in "\r\n\x00")):
            raise InvalidValueError(f"{where}: {name(key)} must be a non-empty string without line breaks")
    if (username is None) != (password is None):
        raise InvalidValueError(f"{where}: {name('USERNAME')} and {name('PASSWORD')} go together")
    if keyfile is not None and certfile is None:
        raise InvalidValueError(f"{where}: {name('SSL_KEYFILE')} needs {name('SSL_CERTFILE')}")
    try:
        limits = parse_limits(value)
    except InvalidValueError as exc:
        raise InvalidValueError(f"{where}: {exc}") from None
    return RelayRoute(
        host=host,
        port=port,
        username=username,
        password=password,
        tls=tls,
        timeout=timeout,
        ssl_certfile=certfile,
        ssl_keyfile=keyfile,
        limits=limits,
    )


def _checked(rule: rules.Validator, value: Any, where: str, key: str) -> Any:
    try:
        return rule(value)
    except InvalidValueError as exc:
        raise InvalidValueError(f"{where}: {key} {exc}") from None


def django_relay() -> RelayRoute:
    """The relay Django's SMTP backend would send through, from `EMAIL_*`, as a route.

    As `django.core.mail.backends.smtp.EmailBackend`: `EMAIL_USE_TLS` is
    STARTTLS, `EMAIL_USE_SSL` TLS from the first byte (both is an error),
    neither plain text; credentials only when `EMAIL_HOST_USER` and
    `EMAIL_HOST_PASSWORD` are both set; `EMAIL_PORT` as given (a string of
    digits too, as smtplib takes it).
    """
    s = django_settings
    use_tls, use_ssl = bool(getattr(s, "EMAIL_USE_TLS", False)), bool(getattr(s, "EMAIL_USE_SSL", False))
    if use_tls and use_ssl:
        raise InvalidValueError(
            "is absent or has no '*', so '*' is Django's EMAIL_* relay, and EMAIL_USE_TLS and EMAIL_USE_SSL "
            "are both True; set one of them, as Django's SMTP backend requires"
        )
    port = getattr(s, "EMAIL_PORT", 25)
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    username, password = getattr(s, "EMAIL_HOST_USER", ""), getattr(s, "EMAIL_HOST_PASSWORD", "")
    relay: dict[str, Any] = {
        "HOST": getattr(s, "EMAIL_HOST", "localhost"),
        "PORT": port,
        "TLS": "implicit" if use_ssl else "starttls" if use_tls else "none",
        "TIMEOUT": getattr(s, "EMAIL_TIMEOUT", None),
    }
    if username and password:
        relay |= {"USERNAME": username, "PASSWORD": password}
    for key in ("SSL_CERTFILE", "SSL_KEYFILE"):
        if getattr(s, f"EMAIL_{key}", None):
            relay[key] = getattr(s, f"EMAIL_{key}")
    return parse_relay(
        relay, where="is absent or has no '*', so '*' is Django's EMAIL_* relay", name=_DJANGO_NAMES.__getitem__
    )


def describe(route: Route) -> str:
    """Where `route` sends mail, for a person: never the password."""
    if isinstance(route, MxRoute):
        return "the recipient domain's MX hosts"
    tls = {"starttls": "STARTTLS required", "implicit": "TLS from the first byte", "none": "no TLS"}[route.tls]
    user = f", as {route.username!r}" if route.username else ""
    return f"the relay {route.host}:{route.port} ({tls}{user})"


__all__ = [
    "RELAY_KEYS",
    "MxRoute",
    "RelayRoute",
    "Route",
    "TlsMode",
    "describe",
    "django_relay",
    "parse_relay",
    "parse_routes",
]
