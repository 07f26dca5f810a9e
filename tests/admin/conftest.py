"""Fixtures for the admin tests: stores to list, users with and without permissions, a headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from django_mailqueue.stores import get_store
from django_mailqueue.stores.base import QueueStore
from tests.admin.queue_data import Queue, populate
from tests.support.certs import test_ca  # noqa: F401  (fixture)
from tests.support.dns_server import dns_server  # noqa: F401  (fixture)
from tests.support.services import drop_redis_keys, skip_or_fail
from tests.support.smtp_server import smtp_servers  # noqa: F401  (fixture)
from tests.worker.conftest import mail_world  # noqa: F401  (fixture)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PASSWORD = "correct horse battery staple"  # noqa: S105

ORM_STORE = {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "default"}}


@pytest.fixture(scope="session", autouse=True)
def _static_files() -> Iterator[None]:
    """Static files for the live server: the suite's settings have no STATIC_URL and no staticfiles app, so
    link the admin's and this app's static directories into a STATIC_ROOT the live server serves."""
    import django.contrib.admin
    from django.conf import settings

    import django_mailqueue

    saved = settings.STATIC_URL, settings.STATIC_ROOT
    root = tempfile.mkdtemp(prefix="mailqueue-static-")
    for package, name in ((django.contrib.admin, "admin"), (django_mailqueue, "django_mailqueue")):
        os.symlink(os.path.join(os.path.dirname(package.__file__ or ""), "static", name), os.path.join(root, name))
    settings.STATIC_URL, settings.STATIC_ROOT = "/static/", root
    yield
    settings.STATIC_URL, settings.STATIC_ROOT = saved
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def live_server(django_db_setup: None, live_server: Any) -> Any:
    """pytest-django's live server, started once the test databases exist: started before, it would take
    the SQLite database for an in-memory one and share the main thread's connection with its threads."""
    return live_server


def redis_store_config(redis_url: str) -> dict[str, Any]:
    return {
        "BACKEND": "django_mailqueue.stores.redis.RedisStore",
        "OPTIONS": {"url": redis_url, "key_prefix": f"mq-admin-test-{uuid.uuid4().hex[:12]}:"},
    }


@pytest.fixture(params=["orm", "redis"])
def store(request: pytest.FixtureRequest, settings: Any) -> Iterator[QueueStore]:
    """The configured store (`get_store()`): the ORM store on SQLite, then the Redis store."""
    if request.param == "orm":
        settings.MAILQUEUE = {"STORE": ORM_STORE}
        yield get_store()
        return
    redis_url: str = request.getfixturevalue("redis_url")
    config = redis_store_config(redis_url)
    settings.MAILQUEUE = {"STORE": config}
    try:
        yield get_store()
    finally:
        drop_redis_keys(redis_url, config["OPTIONS"]["key_prefix"])


@pytest.fixture
def queue(store: QueueStore) -> Queue:
    return populate(store, datetime.now(UTC))


def make_staff(username: str, *codenames: str, superuser: bool = False) -> User:
    user = User.objects.create_user(username, f"{username}@site.test", PASSWORD, is_staff=True)
    if superuser:
        user.is_superuser = True
        user.save()
    if codenames:
        user.user_permissions.add(
            *Permission.objects.filter(content_type__app_label="django_mailqueue", codename__in=codenames)
        )
    return user


@pytest.fixture
def operator(db: None) -> User:
    """Staff with every queue permission, but not a superuser."""
    return make_staff(
        "operator",
        "view_queueditem",
        "send_now_queueditem",
        "reschedule_queueditem",
        "cancel_queueditem",
        "view_deliveryrecord",
    )


@pytest.fixture
def viewer(db: None) -> User:
    """Staff who may look at the queue and the history, and do nothing."""
    return make_staff("viewer", "view_queueditem", "view_deliveryrecord")


@pytest.fixture
def operator_client(operator: User) -> Client:
    client = Client()
    client.force_login(operator)
    return client


# --- the browser --------------------------------------------------------------------------


def _install_chromium() -> str:
    """Install Debian's chromium and chromium-driver when missing and we may; '' when done, else why not."""
    if os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER):
        return ""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"{CHROMIUM} or {CHROMEDRIVER} is missing, and only root with apt-get can install them"
    print(f"admin tests: installing chromium and chromium-driver ({CHROMIUM} is missing)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            return f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}"
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        return f"apt-get installed chromium but {CHROMIUM} or {CHROMEDRIVER} is still missing"
    return ""


@pytest.fixture(scope="session")
def chromium() -> str:
    """The path of a headless-capable Chromium; installs it (root) or skips — fails under MAILQUEUE_REQUIRE_SERVICES."""
    problem = _install_chromium()
    if problem:
        print(f"admin browser tests: {problem}")
        skip_or_fail(problem)
    try:
        import selenium  # noqa: F401
    except ImportError:
        skip_or_fail("selenium is not installed (it is in the test dependency group)")
    return CHROMIUM


@pytest.fixture(scope="session")
def browser(chromium: str) -> Iterator[Any]:
    """One headless Chromium for the session, driven by Selenium through Debian's chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        "--window-size=1400,1000",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    profile = tempfile.mkdtemp(prefix="mailqueue-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except Exception as exc:  # the browser is there but will not start: say why
        skip_or_fail(f"Chromium did not start: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        raise
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def screenshots() -> Path | None:
    """Where to save screenshots of the pages: MAILQUEUE_ADMIN_SCREENSHOTS (`docs/images` makes the docs' ones);
    unset, none are taken (each costs a second or two)."""
    target = os.environ.get("MAILQUEUE_ADMIN_SCREENSHOTS")
    if not target:
        return None
    path = Path(target)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
