"""System checks (`manage.py check`): every `MAILQUEUE` problem as `mailqueue.E0xx`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
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
