"""The admin pages' wrapping: behind the admin site's login, with their own security headers (a CSP and `nosniff`).

A queued message is input from anyone, and the item page shows its headers and
a preview of its HTML: these headers hold even on a site without
`SecurityMiddleware` or a CSP of its own. A header the response already has is
left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import update_wrapper, wraps
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.admin import ModelAdmin
from django.http import HttpResponseBase
from django.urls import URLPattern, path, reverse

View = Callable[..., HttpResponseBase]


def admin_csp() -> str:
    """The pages' policy: scripts, styles, images and fonts from this site (and `STATIC_URL`'s host), nothing else.

    `style-src-attr 'unsafe-inline'` is there for the preview: an `<iframe srcdoc>`
    document inherits its page's policy, and its sanitized HTML keeps inline styles.
    """
    static = _static_origin()
    own = f"'self' {static}" if static else "'self'"
    return (
        f"default-src 'none'; script-src {own}; style-src {own}; style-src-attr 'unsafe-inline'; "
        f"img-src {own} data:; font-src {own}; connect-src 'self'; form-action 'self'; "
        "frame-ancestors 'self'; base-uri 'none'; object-src 'none'"
    )


def _static_origin() -> str:
    """The scheme and host of an absolute `STATIC_URL` (a CDN), else ""."""
    parts = urlsplit(str(getattr(settings, "STATIC_URL", "") or ""))
    if not parts.netloc:
        return ""
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme else parts.netloc


def with_security_headers(response: HttpResponseBase) -> HttpResponseBase:
    """`response` with the admin's Content-Security-Policy and `X-Content-Type-Options: nosniff` unless it has them."""
    response.headers.setdefault("Content-Security-Policy", admin_csp())
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


def secure_view(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """`view`, its responses given `with_security_headers`."""

    @wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> HttpResponseBase:
        return with_security_headers(view(*args, **kwargs))

    return wrapper


def secure_urls(patterns: list[URLPattern]) -> list[URLPattern]:
    """The admin's URL patterns, each view wrapped by `secure_view`."""
    return [URLPattern(p.pattern, secure_view(p.callback), p.default_args, p.name) for p in patterns]


def admin_page(model_admin: ModelAdmin[Any], view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """`view` as one of `model_admin`'s pages: behind the admin site's login and staff check, as Django's own
    `ModelAdmin.get_urls` wraps its views."""

    def wrapper(*args: Any, **kwargs: Any) -> HttpResponseBase:
        return model_admin.admin_site.admin_view(view)(*args, **kwargs)

    wrapper.model_admin = model_admin  # type: ignore[attr-defined]
    return update_wrapper(wrapper, view)


def store_pages(model_admin: ModelAdmin[Any], pages: Sequence[tuple[str, View, str]]) -> list[URLPattern]:
    """The URL patterns of a store-backed admin's own pages: each `(route, view, name)` behind the admin's login
    (`admin_page`) with the pages' headers (`secure_urls`), named `<app>_<model>_<name>` as Django names its own."""
    prefix = f"{model_admin.opts.app_label}_{model_admin.opts.model_name}"
    return secure_urls(
        [path(route, admin_page(model_admin, view), name=f"{prefix}_{name}") for route, view, name in pages]
    )


def page_url(model_admin: ModelAdmin[Any], name: str, *args: Any) -> str:
    """The URL of `model_admin`'s page `name` (see `store_pages`)."""
    opts = model_admin.opts
    return reverse(f"{model_admin.admin_site.name}:{opts.app_label}_{opts.model_name}_{name}", args=args)
