"""System checks (`manage.py check`): every `MAILQUEUE` problem as `mailqueue.E0xx`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.checks import CheckMessage, Error, Tags, register

from .conf import settings_problems


@register(Tags.compatibility)
def check_mailqueue_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Report each bad `MAILQUEUE` key with the key's own check id."""
    return [
        Error(problem.message, hint=f"See the settings reference for {problem.key}.", id=problem.check_id)
        for problem in settings_problems(getattr(settings, "MAILQUEUE", None))
    ]


@register(Tags.database)
def check_redis_maxmemory_policy(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """mailqueue.W001: a Redis store whose server may evict queue keys (run with database checks only)."""
    if not databases:
        return []
    from .stores.redis_checks import maxmemory_policy_warnings

    return maxmemory_policy_warnings()


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
