"""System checks (`manage.py check`): every `MAILQUEUE` problem as `mailqueue.E0xx`, and what to know about it."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.checks import CheckMessage, Error, Tags, register

from .conf import get_settings, settings_problems
from .core.errors import QueueSettingsError
from .routes import MxRoute, describe


@register(Tags.compatibility)
def check_mailqueue_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Report each bad `MAILQUEUE` key with the key's own check id."""
    return [
        Error(problem.message, hint=f"See the settings reference for {problem.key}.", id=problem.check_id)
        for problem in settings_problems(getattr(settings, "MAILQUEUE", None))
    ]


@register(Tags.compatibility)
def check_routes(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """mailqueue.I001: where mail goes when ROUTES leaves "*" out; mailqueue.W003: an EHLO name MX hosts refuse."""
    try:
        parsed = get_settings()
    except QueueSettingsError:
        return []  # reported by check_mailqueue_settings
    messages: list[CheckMessage] = []
    config = getattr(settings, "MAILQUEUE", None)
    routes = config.get("ROUTES") if isinstance(config, dict) else None
    if not isinstance(routes, dict) or "*" not in routes:
        where = "has no '*' route, so mail to the domains it does not name" if routes else "is not set, so all mail"
        messages.append(
            checks.Info(
                f"MAILQUEUE['ROUTES'] {where} goes through {describe(parsed.routes['*'])}: the relay Django's "
                "EMAIL_* settings name, as Django's SMTP backend would send it.",
                hint="To deliver to the recipients' MX hosts instead, set MAILQUEUE['ROUTES'] = {'*': 'mx'}.",
                id="mailqueue.I001",
            )
        )
    reason = ehlo_name_problem(parsed.hostname)
    if reason and any(isinstance(route, MxRoute) for route in parsed.routes.values()):
        messages.append(
            checks.Warning(
                f"The EHLO name {parsed.hostname!r} {reason}, and MAILQUEUE['ROUTES'] delivers to MX hosts: many "
                "refuse such a name (Postfix's reject_non_fqdn_helo_hostname: '504 5.5.2 need fully-qualified "
                "hostname'), failing every recipient.",
                hint="Set MAILQUEUE['HOSTNAME'] to this machine's fully-qualified name (the one its IP address's "
                "reverse DNS gives), or an address literal such as '[192.0.2.1]'.",
                id="mailqueue.W003",
            )
        )
    return messages


def ehlo_name_problem(name: str) -> str | None:
    """Why `name` is not an EHLO name a strict MX takes (not a fully-qualified domain name), or None."""
    if name.startswith("[") and name.endswith("]"):
        return None  # an address literal
    try:
        ipaddress.ip_address(name)
        return "is an IP address without the brackets of an address literal"
    except ValueError:
        pass
    if name.lower().rstrip(".") in ("localhost", "localhost.localdomain"):
        return "is not a public host name"
    if "." not in name.strip("."):
        return "is not a fully-qualified domain name (it has no dot)"
    return None


@register(Tags.database)
def check_redis_maxmemory_policy(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """mailqueue.W001: a Redis store whose server may evict queue keys (run with database checks only)."""
    if not databases:
        return []
    from .stores.redis_checks import maxmemory_policy_warnings

    return maxmemory_policy_warnings()


@register(Tags.database)
def check_redis_stranded_partitions(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """mailqueue.E030: a Cluster queue with items in partitions its `partitions` does not reach (database checks)."""
    if not databases:
        return []
    from .stores.redis_checks import stranded_errors

    return stranded_errors()


@register(Tags.security)
def check_url_password_in_error_reports(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """mailqueue.W002: a Redis store `url` with a password, which Django's error reports would print."""
    from urllib.parse import urlsplit

    from django.utils.module_loading import import_string

    from .debug import SafeExceptionReporterFilter

    config = getattr(settings, "MAILQUEUE", None)
    store = config.get("STORE") if isinstance(config, dict) else None
    options = store.get("OPTIONS") if isinstance(store, dict) else None
    url = options.get("url") if isinstance(options, dict) else None
    try:
        has_password = isinstance(url, str) and bool(urlsplit(url).password)
    except ValueError:
        return []  # a malformed url is reported by check_mailqueue_settings
    if not has_password:
        return []
    try:
        reporter = import_string(settings.DEFAULT_EXCEPTION_REPORTER_FILTER)
    except ImportError:
        reporter = None
    if isinstance(reporter, type) and issubclass(reporter, SafeExceptionReporterFilter):
        return []
    return [
        checks.Warning(
            "MAILQUEUE['STORE']['OPTIONS']['url'] holds a password, and Django's error reports (the DEBUG 500 page, "
            "the error e-mails to ADMINS) print settings whose name is not secret-looking in full.",
            hint="Give the password as OPTIONS['password'] (hidden by name), or set DEFAULT_EXCEPTION_REPORTER_FILTER "
            "= 'django_mailqueue.debug.SafeExceptionReporterFilter', which masks passwords inside URLs.",
            id="mailqueue.W002",
        )
    ]


@register(Tags.compatibility)
def check_sqlite_options(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """mailqueue.I010: an ORM store on SQLite without the options that let its writers share the lock."""
    from .stores.orm.sqlite_checks import sqlite_option_infos

    return sqlite_option_infos()


@register(Tags.compatibility)
def check_dkim_keys(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """mailqueue.E023: a DKIM key that cannot sign; mailqueue.I002: the TXT record each key needs published."""
    try:
        parsed = get_settings()
    except QueueSettingsError:
        return []  # reported by check_mailqueue_settings
    if not parsed.dkim:
        return []
    from .dkim import DkimKeyError, load_key, zone_line  # here: only where DKIM is set (docs/performance.md)

    messages: list[CheckMessage] = []
    for entry in parsed.dkim.values():
        try:
            key = load_key(entry)
        except DkimKeyError as exc:
            messages.append(
                Error(
                    exc.message,
                    hint="`manage.py mailqueue_dkim_keygen DOMAIN SELECTOR` writes a new key.",
                    id="mailqueue.E023",
                )
            )
            continue
        messages.append(
            checks.Info(
                f"DKIM for {entry.from_domain}: mail is signed d={entry.domain}, s={entry.selector} "
                f"({entry.algorithm}); the TXT record to publish: {zone_line(key)}",
                id="mailqueue.I002",
            )
        )
    return messages


@register(Tags.compatibility)
def check_shaping(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """mailqueue.W004: a SHAPING entry whose CONNECTIONS lets one destination take every slot of a worker."""
    try:
        parsed = get_settings()
    except QueueSettingsError:
        return []  # reported by check_mailqueue_settings
    return [
        checks.Warning(
            f"MAILQUEUE['SHAPING'][{key!r}]['CONNECTIONS'] is {entry.connections}, not below CONCURRENCY "
            f"({parsed.concurrency}): one destination can take every slot of a worker, and the mail of every other "
            "destination then waits behind it.",
            hint="Set it below CONCURRENCY; left out, it is min(10, CONCURRENCY / 2 rounded up).",
            id="mailqueue.W004",
        )
        for key, entry in parsed.shaping.entries.items()
        if entry.connections is not None and entry.connections >= parsed.concurrency
    ]
