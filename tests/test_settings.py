"""MAILQUEUE: every key validated with its name in the message, and reported by `manage.py check`."""

from __future__ import annotations

from dataclasses import replace
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_mailqueue.conf import KEYS, MxRoute, QueueSettings, RelayRoute, get_settings, load_settings
from django_mailqueue.exceptions import QueueError, QueueSettingsError
from django_mailqueue.stores import get_store
from django_mailqueue.stores.memory import MemoryStore

BAD_VALUES: dict[str, list[Any]] = {
    "STORE": [
        "orm",
        {"BACKEND": 3},
        {"OPTIONS": []},
        {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "nope"}},
        {"ENGINE": "x"},
    ],
    "HOSTNAME": [3, "mail example", "mail.example\r\n"],
    "ROUTES": [
        "mx",
        {"*": "smtp"},
        {"corp.example": {"PORT": 25}},
        {"x.example": {"HOST": "h", "TLS": "yes"}},
        {"x.example": {"HOST": "h", "USERNAME": "u"}},
        {"x.example": {"HOST": "h", "PORT": 70000}},
        {"x.example": {"HOST": "h", "PASSWORD": "p\nq", "USERNAME": "u"}},
        {"x.example": {"HOST": "h", "TIMEOUT": 0}},
        {"x.example": {"HOST": "h", "TIMEOUT": "10"}},
        {"x.example": {"HOST": "h", "SSL_KEYFILE": "/k.pem"}},
        {"x.example": {"HOST": "h", "SSL_CERTFILE": ""}},
        {"x.example": {"HOST": "h", "RATE": "14 per second"}},
        {"x.example": {"HOST": "h", "CONNECTIONS": 0}},
        {"x.example": {"HOST": "h", "MESSAGES_PER_CONNECTION": 1.5}},
    ],
    "DNS": [
        ["127.0.0.1"],
        {"NAMESERVERS": "127.0.0.1"},
        {"NAMESERVERS": ["dns.example"]},
        {"PORT": 0},
        {"TIMEOUT": -1},
        {"SERVERS": []},
    ],
    "MX_PORT": [0, 65536, "25", 2.5],
    "RETRY_DELAYS": [[], 300, [300, -1], ["300"]],
    "MAX_LIFETIME": [0, -5, "1d", None],
    "DELAY_WARNING": [0, "soon"],
    "DSN": ["yes", 1, None],
    "MAX_ITEMS": [0, -1, 1.5, "100"],
    "MAX_MESSAGE_SIZE": [0, 1.5, None],
    "LEASE": [0, 0.5, "300", 10**9],
    "MAX_RECLAIMS": [-1, 1.5],
    "CONCURRENCY": [0, 10**6, True],
    "TIMEOUTS": [30, {"CONNECT": 0}, {"NOPE": 3}],
    "MX_ADDRESS_LIMIT": [0, 1000],
    "RCPT_LIMIT": [0],
    "POLL_INTERVAL": [0, -1],
    "HISTORY_DAYS": [-1, 2.5],
    "KEEP_FAILED": [-1, 2.5, "7d", True],
    "MAX_BYTES_IN_FLIGHT": [0, 1000, 2.5e6, "big"],
    "DKIM": [[], {"example.com": {"SELECTOR": "mq1"}}, {"*": {"SELECTOR": "mq1", "PRIVATE_KEY": "/k.pem"}}],
    "MTA_STS": ["enforce", 1, None],
    "METRICS_COLLECTOR": ["yes", 1, None],
    "SUPPRESSION": [
        "5.1.1",
        [],
        {"STATUSES": "5.1.1"},
        {"STATUSES": ["4.2.2"]},
        {"STATUSES": ["5.1"]},
        {"STATUSES": [511]},
        {"DAYS": 0},
        {"DAYS": 1.5},
        {"DAYS": True},
        {"DAYS": 36501},
        {"KEEP": 3},
    ],
    "SHAPING": [
        [],
        {"*": {"RATE": "0/s"}},
        {"*": {"RATE": "5/week"}},
        {"gmail.com": {"CONNECTIONS": 0}},
        {".": {}},
        {"*": {"BURST": 3}},
        {"*": {"RULES": [{"MATCH": "(", "SUSPEND": 60}]}},
        {"*": {"RULES": [{"MATCH": "421"}]}},
        {"*": {"SUSPEND": 600, "SUSPEND_MAX": 60}},
        {"*": {"DEAD_AFTER": 0}},
        {"*": {"DEFAULT_RULES": "no"}},
    ],
}


def test_every_key_has_bad_values_here() -> None:
    assert set(BAD_VALUES) == {key.name for key in KEYS}


@pytest.mark.parametrize(("key", "value"), [(k, v) for k, values in BAD_VALUES.items() for v in values])
def test_a_bad_value_raises_naming_the_key_and_shows_in_check(key: str, value: Any) -> None:
    with pytest.raises(QueueSettingsError) as raised:
        load_settings({key: value})
    assert key in str(raised.value)
    assert raised.value.code == "INVALID_OPTION"
    expected_id = next(k.check_id for k in KEYS if k.name == key)
    if key == "STORE" and isinstance(value, dict) and "OPTIONS" in value and "BACKEND" in value:
        expected_id = "mailqueue.E003"
    assert raised.value.check_id == expected_id
    with override_settings(MAILQUEUE={key: value}):
        with pytest.raises(QueueSettingsError):
            get_settings()
        out = StringIO()
        with pytest.raises(SystemCheckError) as check:
            call_command("check", stdout=out, stderr=out)
        assert expected_id in str(check.value)
        assert key in str(check.value)


def test_an_unknown_store_is_refused_naming_the_stores_that_exist() -> None:
    with pytest.raises(QueueSettingsError) as raised:
        load_settings({"STORE": {"BACKEND": "myapp.stores.Nope"}})
    message = str(raised.value)
    for name in ("OrmStore", "RedisStore", "MemoryStore"):
        assert name in message


def test_an_unknown_key_is_refused() -> None:
    with pytest.raises(QueueSettingsError) as raised:
        load_settings({"RETRY": [1]})
    assert "RETRY" in str(raised.value) and raised.value.check_id == "mailqueue.E001"


def test_defaults() -> None:
    parsed = load_settings({})
    assert isinstance(parsed, QueueSettings)
    assert parsed.retry_delays == (300, 600, 1200, 2400, 4000)
    assert parsed.max_lifetime == 5 * 86400 and parsed.delay_warning == 4 * 3600
    assert parsed.lease == 300 and parsed.max_reclaims == 3 and parsed.concurrency == 20
    assert parsed.max_message_size == 25 * 1024 * 1024 and parsed.max_items is None and parsed.dsn is True
    assert parsed.mx_port == 25 and parsed.hostname
    # ROUTES absent: Django's SMTP backend's relay, from Django's own defaults
    assert parsed.route_for("anything.example") == RelayRoute(host="localhost", port=25, tls="none")
    assert load_settings({"ROUTES": None}) == parsed


def test_the_suppression_setting_takes_either_key_and_none_turns_it_off() -> None:
    default = load_settings({}).suppression
    assert default is not None and default.days == 365
    assert default.statuses == {"5.1.1", "5.1.2", "5.1.10", "5.2.1"}
    assert load_settings({"SUPPRESSION": None}).suppression is None
    assert load_settings({"SUPPRESSION": {"DAYS": 30}}).suppression == replace(default, days=30)
    only = load_settings({"SUPPRESSION": {"STATUSES": ["5.7.1"]}}).suppression
    assert only is not None and only.statuses == {"5.7.1"} and only.days == 365


def test_routes_are_parsed_and_the_password_is_not_shown() -> None:
    parsed = load_settings(
        {
            "ROUTES": {
                "Corp.Example": {
                    "HOST": "relay.corp.example",
                    "USERNAME": "u",
                    "PASSWORD": "hunter2-secret",
                    "TLS": "implicit",
                },
                "bücher.example": "mx",
            }
        }
    )
    relay = parsed.route_for("corp.example")
    assert isinstance(relay, RelayRoute) and relay.port == 465 and relay.tls == "implicit"
    assert "hunter2-secret" not in repr(relay) and "hunter2-secret" not in repr(parsed)
    assert isinstance(parsed.route_for("xn--bcher-kva.example"), MxRoute)
    with pytest.raises(QueueSettingsError) as raised:
        load_settings({"ROUTES": {"x.example": {"HOST": "h", "USERNAME": "u", "PASSWORD": "hunter2", "X": 1}}})
    assert "hunter2" not in str(raised.value)


def test_the_settings_are_read_once_and_again_after_a_change() -> None:
    with override_settings(MAILQUEUE={"LEASE": 42}):
        assert get_settings() is get_settings()
        assert get_settings().lease == 42
    assert get_settings().lease == 300


def test_nothing_connects_before_first_use() -> None:
    unreachable = {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "default"}}
    with override_settings(MAILQUEUE={"STORE": unreachable}):
        get_settings()  # parsing connects to nothing (the SQLite file may not even exist yet)
    with override_settings(
        MAILQUEUE={"STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"}, "MAX_ITEMS": 7}
    ):
        store = get_store()
        assert isinstance(store, MemoryStore) and store.max_items == 7
        assert get_store() is store


def test_a_store_refuses_options_it_does_not_take() -> None:
    with pytest.raises(QueueError) as raised:
        MemoryStore({"url": "x"})
    assert raised.value.code == "INVALID_OPTION"


# --- the default route: Django's EMAIL_* relay ------------------------------------------------------


@pytest.mark.parametrize(
    ("email", "expected"),
    [
        (
            {
                "EMAIL_HOST": "smtp.provider.example",
                "EMAIL_PORT": 587,
                "EMAIL_USE_TLS": True,
                "EMAIL_HOST_USER": "me",
                "EMAIL_HOST_PASSWORD": "pw",
            },
            RelayRoute(host="smtp.provider.example", port=587, username="me", password="pw", tls="starttls"),
        ),
        (
            {
                "EMAIL_HOST": "smtp.provider.example",
                "EMAIL_PORT": "465",
                "EMAIL_USE_SSL": True,
                "EMAIL_TIMEOUT": 20,
                "EMAIL_SSL_CERTFILE": "/etc/mail/client.pem",
                "EMAIL_SSL_KEYFILE": "/etc/mail/client.key",
            },
            RelayRoute(
                host="smtp.provider.example",
                port=465,
                tls="implicit",
                timeout=20,
                ssl_certfile="/etc/mail/client.pem",
                ssl_keyfile="/etc/mail/client.key",
            ),
        ),
        # Django logs in only with both a user and a password
        (
            {"EMAIL_HOST": "10.0.0.5", "EMAIL_PORT": 2525, "EMAIL_HOST_USER": "me"},
            RelayRoute(host="10.0.0.5", port=2525, tls="none"),
        ),
    ],
)
def test_without_routes_star_is_the_relay_djangos_smtp_backend_uses(
    email: dict[str, Any], expected: RelayRoute
) -> None:
    with override_settings(**email):
        assert get_settings().routes == {"*": expected}
        with override_settings(MAILQUEUE={"ROUTES": {"corp.example": "mx"}}):
            assert get_settings().routes == {"corp.example": MxRoute(), "*": expected}
        with override_settings(MAILQUEUE={"ROUTES": {"*": "mx"}}):
            assert get_settings().routes == {"*": MxRoute()}


def test_a_relay_timeout_bounds_each_step_but_not_the_session() -> None:
    parsed = load_settings(
        {"ROUTES": {"*": {"HOST": "h", "TIMEOUT": 7}, "mx.example": "mx"}, "TIMEOUTS": {"SESSION": 99, "DATA_END": 900}}
    )
    relayed = parsed.timeouts_for(parsed.route_for("anything.example"))
    assert (
        relayed.connect,
        relayed.greeting,
        relayed.mail,
        relayed.rcpt,
        relayed.data,
        relayed.data_block,
        relayed.data_end,
        relayed.session,
    ) == (7, 7, 7, 7, 7, 7, 7, 99)
    assert parsed.timeouts_for(parsed.route_for("mx.example")) == parsed.timeouts


def test_email_use_tls_and_email_use_ssl_together_are_refused_as_django_does() -> None:
    with override_settings(EMAIL_USE_TLS=True, EMAIL_USE_SSL=True):
        with pytest.raises(QueueSettingsError) as raised:
            get_settings()
        assert raised.value.check_id == "mailqueue.E005" and "EMAIL_USE_SSL" in str(raised.value)
        with pytest.raises(SystemCheckError, match="mailqueue.E005"):
            call_command("check", stdout=StringIO(), stderr=StringIO())
        with override_settings(MAILQUEUE={"ROUTES": {"*": "mx"}}):
            assert get_settings().route_for("x.example") == MxRoute()  # EMAIL_* unused: nothing to refuse


def check_messages(**overrides: Any) -> dict[str, str]:
    """The mailqueue messages `manage.py check` reports, by id."""
    from django.core import checks

    with override_settings(**overrides):
        return {m.id: m.msg for m in checks.run_checks() if m.id and m.id.startswith("mailqueue.")}


def test_check_says_where_mail_goes_when_routes_leave_star_out() -> None:
    email = {
        "EMAIL_HOST": "smtp.provider.example",
        "EMAIL_PORT": 587,
        "EMAIL_USE_TLS": True,
        "EMAIL_HOST_USER": "me",
        "EMAIL_HOST_PASSWORD": "hunter2-secret",
    }
    info = check_messages(MAILQUEUE={"HOSTNAME": "mail.example.com"}, **email)["mailqueue.I001"]
    assert "is not set, so all mail goes through the relay smtp.provider.example:587 (STARTTLS" in info
    assert "hunter2-secret" not in info
    info = check_messages(MAILQUEUE={"HOSTNAME": "mail.example.com", "ROUTES": {"corp.example": "mx"}}, **email)
    assert "mail to the domains it does not name goes through the relay smtp" in info["mailqueue.I001"]
    assert "mailqueue.I001" not in check_messages(MAILQUEUE={"HOSTNAME": "mail.example.com", "ROUTES": {"*": "mx"}})
    out = StringIO()
    with override_settings(MAILQUEUE={"HOSTNAME": "mail.example.com"}, **email):
        call_command("check", stdout=out, stderr=out)
    assert "mailqueue.I001" in out.getvalue()


@pytest.mark.parametrize(
    ("hostname", "warned"),
    [
        ("localhost", True),
        ("localhost.localdomain", True),
        ("LOCALHOST.", True),
        ("mailhost", True),
        ("192.0.2.1", True),
        ("2001:db8::1", True),
        ("mail.example.com", False),
        ("[192.0.2.1]", False),
        ("[IPv6:2001:db8::1]", False),
    ],
)
def test_check_warns_of_an_ehlo_name_a_strict_mx_refuses(hostname: str, warned: bool) -> None:
    mx = check_messages(MAILQUEUE={"HOSTNAME": hostname, "ROUTES": {"*": "mx"}})
    assert ("mailqueue.W003" in mx) is warned
    if warned:
        assert repr(hostname) in mx["mailqueue.W003"]
    one_domain_by_mx = {"*": {"HOST": "relay.example", "TLS": "none"}, "partner.example": "mx"}
    assert ("mailqueue.W003" in check_messages(MAILQUEUE={"HOSTNAME": hostname, "ROUTES": one_domain_by_mx})) is warned
    relay_only = {"*": {"HOST": "relay.example", "TLS": "none"}}
    assert "mailqueue.W003" not in check_messages(MAILQUEUE={"HOSTNAME": hostname, "ROUTES": relay_only})


def test_check_warns_of_the_default_ehlo_name_when_it_is_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.core.mail.utils import DNS_NAME

    monkeypatch.setattr(DNS_NAME, "_fqdn", "localhost")  # what many machines and containers have
    warning = check_messages(MAILQUEUE={"ROUTES": {"*": "mx"}})["mailqueue.W003"]
    assert "The EHLO name 'localhost'" in warning
