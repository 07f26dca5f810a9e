"""An exception-reporter filter that also hides the password inside URLs (a Redis store's `url`, CACHES, …)."""

from __future__ import annotations

from typing import Any

from django.views import debug

from .core.masking import mask_url_passwords


class SafeExceptionReporterFilter(debug.SafeExceptionReporterFilter):
    """Django's filter, plus: a password inside a URL is hidden wherever the report shows it.

    Django hides a setting by its name (`PASSWORD`, `SECRET_KEY`, …), so a URL
    under an innocent name — `MAILQUEUE["STORE"]["OPTIONS"]["url"]`, a
    django-redis `LOCATION` — is printed whole in a `DEBUG` 500 page and in
    the error e-mails to `ADMINS`. With this filter the password part of such
    URLs is masked, in the settings and in the traceback's local variables::

        DEFAULT_EXCEPTION_REPORTER_FILTER = "django_mailqueue.debug.SafeExceptionReporterFilter"
    """

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        return self._mask(super().cleanse_setting(key, value))

    def get_traceback_frame_variables(self, request: Any, tb_frame: Any) -> Any:
        return [(name, self._mask(value)) for name, value in super().get_traceback_frame_variables(request, tb_frame)]

    def _mask(self, value: Any) -> Any:
        if isinstance(value, str):
            return mask_url_passwords(value, self.cleansed_substitute)
        if isinstance(value, dict):
            return {k: self._mask(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._mask(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self._mask(v) for v in value)
        return value
