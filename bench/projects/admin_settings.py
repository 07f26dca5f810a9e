"""The admin under benchmark (`bench/admin_pages.py`): the ORM store on BENCH_DB (PostgreSQL), or the Redis
store (BENCH_STORE=redis, BENCH_REDIS_URL, BENCH_REDIS_PREFIX) with the history on BENCH_DB."""

from __future__ import annotations

import os

from bench.projects.common import *  # noqa: F403

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_mailqueue",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "bench.projects.admin_urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ALLOWED_HOSTS = ["testserver"]
STATIC_URL = "/static/"

if os.environ.get("BENCH_STORE", "orm") == "redis":
    STORE = {
        "BACKEND": "django_mailqueue.stores.redis.RedisStore",
        "OPTIONS": {
            "url": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
            "key_prefix": os.environ.get("BENCH_REDIS_PREFIX", "mqb:"),
        },
    }
else:
    STORE = {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {}}
MAILQUEUE: dict[str, object] = {"STORE": STORE, "ROUTES": {"*": "mx"}}
