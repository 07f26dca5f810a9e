"""Traffic shaping's settings and decisions: rates, which limits apply to a destination, suspensions, dead sites."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from django_mailqueue.checks import check_shaping
from django_mailqueue.core.items import Reply
from django_mailqueue.routes import parse_routes
from django_mailqueue.shaping import (
    DEFAULT_RULES,
    Limits,
    Rate,
    is_dead,
    parse_rate,
    parse_shaping,
    relay_key,
    suspends,
    suspension_seconds,
)
from django_mailqueue.validation import InvalidValueError


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [("14/s", 14, 1), ("300/min", 300, 60), ("10000/h", 10000, 3600), ("50000/d", 50000, 86400), (" 5 / s ", 5, 1)],
)
def test_a_rate_is_a_count_per_period(text: str, count: int, period: float) -> None:
    rate = parse_rate(text)
    assert (rate.count, rate.period) == (count, period)
    assert str(rate) == text.replace(" ", "")


@pytest.mark.parametrize("text", ["0/s", "14", "14/sec", "1.5/s", "-1/s", 14, None, "14/s/s"])
def test_a_bad_rate_is_refused_saying_what_a_rate_looks_like(text: Any) -> None:
    with pytest.raises(InvalidValueError, match=r'"14/s"'):
        parse_rate(text)


def test_a_twentieth_of_a_rate_may_go_at_once_and_a_worker_asks_for_a_few_tokens_at_a_time() -> None:
    assert Rate(50, 1).burst == 2  # "50/s": at most 52 in any one second, 3 more left for the way to the relay
    assert Rate(50, 1).batch == 2  # 0.05 s of the rate (3), at most the bucket
    assert Rate(14, 1).burst == 1 and Rate(14, 1).batch == 1
    assert Rate(50000, 86400).burst == 2500 and Rate(50000, 86400).batch == 1
    assert Rate(1, 3600).burst == 1
    assert Rate(2000, 1).burst == 100 and Rate(2000, 1).batch == 100


def test_a_relay_takes_its_limits_in_its_route() -> None:
    routes = parse_routes(
        {
            "*": {
                "HOST": "email-smtp.eu-west-1.amazonaws.com",
                "RATE": "14/s",
                "CONNECTIONS": 5,
                "MESSAGES_PER_CONNECTION": 50,
            }
        }
    )
    route = routes["*"]
    assert route.kind == "relay"
    assert route.limits == Limits(Rate(14, 1), 5, 50)  # type: ignore[union-attr]
    assert relay_key("Email-SMTP.eu-west-1.amazonaws.com", 587) == "relay:email-smtp.eu-west-1.amazonaws.com:587"


def test_a_relay_without_limits_has_none() -> None:
    assert parse_routes({"*": {"HOST": "relay.example"}})["*"].limits == Limits()  # type: ignore[union-attr]


def test_an_mx_destination_without_an_entry_gets_the_defaults_keyed_by_its_own_domain() -> None:
    policy = parse_shaping({}).mx_policy("example.com", ["mx1.example.com"], concurrency=20)
    assert policy.key == "example.com"
    assert policy.limits == Limits(rate=None, connections=10, messages_per_connection=100)
    assert policy.rules == DEFAULT_RULES
    assert (policy.suspend, policy.suspend_max, policy.dead_after) == (60, 3600, 5)


@pytest.mark.parametrize(("concurrency", "connections"), [(1, 1), (2, 1), (5, 3), (20, 10), (100, 10)])
def test_the_default_connection_limit_leaves_slots_for_other_destinations(concurrency: int, connections: int) -> None:
    policy = parse_shaping(None).mx_policy("example.com", ["mx.example.com"], concurrency=concurrency)
    assert policy.limits.connections == connections


def test_a_suffix_covers_every_domain_whose_mx_hosts_are_all_under_it() -> None:
    shaping = parse_shaping({".Google.com": {"RATE": "20/s", "CONNECTIONS": 3}, "*": {"CONNECTIONS": 7}})
    gmail = shaping.mx_policy(
        "gmail.com", ["gmail-smtp-in.l.google.com", "alt1.gmail-smtp-in.l.google.com."], concurrency=20
    )
    hosted = shaping.mx_policy("firm.example", ["aspmx.l.google.com"], concurrency=20)
    assert gmail.key == hosted.key == ".google.com"
    assert gmail.limits == Limits(Rate(20, 1), 3, 100)
    mixed = shaping.mx_policy("mixed.example", ["aspmx.l.google.com", "mx.mixed.example"], concurrency=20)
    assert mixed.key == "mixed.example" and mixed.limits.connections == 7
    assert shaping.known_key("gmail.com") is None  # only its MX hosts can tell
    assert parse_shaping({"gmail.com": {}}).known_key("gmail.com") == "gmail.com"


def test_a_domains_own_entry_wins_over_a_suffix_and_the_longest_suffix_wins() -> None:
    shaping = parse_shaping(
        {".google.com": {"CONNECTIONS": 3}, ".l.google.com": {"CONNECTIONS": 4}, "gmail.com": {"CONNECTIONS": 5}}
    )
    assert shaping.mx_policy("gmail.com", ["gmail-smtp-in.l.google.com"], concurrency=20).limits.connections == 5
    assert shaping.mx_policy("firm.example", ["aspmx.l.google.com"], concurrency=20).key == ".l.google.com"
    assert shaping.mx_policy("other.example", ["mx.google.com"], concurrency=20).key == ".google.com"


def test_an_entry_takes_what_it_leaves_out_from_star() -> None:
    shaping = parse_shaping(
        {
            "*": {"SUSPEND": 30, "SUSPEND_MAX": 120, "RULES": [{"MATCH": "slow down", "SUSPEND": 10}]},
            "example.com": {"CONNECTIONS": 2, "DEFAULT_RULES": False},
        }
    )
    policy = shaping.mx_policy("example.com", ["mx.example.com"], concurrency=20)
    assert (policy.limits.connections, policy.suspend, policy.suspend_max) == (2, 30, 120)
    assert len(policy.rules) == 1  # star's rule, no defaults
    relay = shaping.relay_policy("relay.example", 587, Limits(connections=4))
    assert relay.key == "relay:relay.example:587" and relay.limits == Limits(connections=4)
    assert relay.suspend == 30 and len(relay.rules) == 1 + len(DEFAULT_RULES)


def test_an_international_domain_is_keyed_by_its_a_label() -> None:
    assert "xn--bcher-kva.example" in parse_shaping({"Bücher.example": {}}).entries


def test_a_bad_entry_is_refused_naming_it() -> None:
    with pytest.raises(InvalidValueError, match=r"\['gmail.com'\] CONNECTIONS must be at least 1"):
        parse_shaping({"gmail.com": {"CONNECTIONS": 0}})
    with pytest.raises(InvalidValueError, match="SUSPEND 600 is above SUSPEND_MAX 300"):
        parse_shaping({"*": {"SUSPEND_MAX": 300}, "x.example": {"SUSPEND": 600}})


PROVIDERS = [
    (421, "4.7.0", "Try again later, closing connection. (EHLO) - gsmtp", 60),
    (421, "4.7.28", "Gmail has detected an unusual rate of unsolicited mail originating from your IP address", 600),
    (421, "4.7.0", "[TSS04] Messages from 192.0.2.1 temporarily deferred due to unexpected volume", 900),
    (451, "4.7.650", "The mail server [192.0.2.1] has been temporarily rate limited due to IP reputation", 900),
    (454, "4.7.0", "Throttling failure: Maximum sending rate exceeded.", 5),
    (454, "4.7.0", "Throttling failure: Daily message quota exceeded.", 3600),
    (432, "4.3.2", "STOREDRV.ClientSubmit; sender thread limit exceeded", 60),
    (554, "5.2.0", "STOREDRV.Submission.Exception:SubmissionQuotaExceededException", None),
    (421, "4.5.127", "Message submission rate for this client has exceeded the configured limit", 60),
]


@pytest.mark.parametrize(("code", "status", "text", "seconds"), PROVIDERS)
def test_the_big_providers_throttling_replies_suspend(code: int, status: str, text: str, seconds: float) -> None:
    policy = parse_shaping({}).mx_policy("example.com", ["mx.example.com"], concurrency=20)
    assert suspends(Reply(code, status, text), policy) == seconds


@pytest.mark.parametrize(
    "reply",
    [
        Reply(451, "4.7.1", "Greylisted, try again in 5 minutes"),
        Reply(450, "4.2.1", "The user you are trying to contact is receiving mail at a rate that prevents delivery"),
        Reply(554, "5.7.0", "[TS03] All messages from 192.0.2.1 will be permanently deferred"),
        Reply(None, "4.4.1", "connect to mx[192.0.2.1]:25: Connection refused"),
        Reply(250, "2.0.0", "OK"),
    ],
)
def test_other_replies_do_not_suspend(reply: Reply) -> None:
    assert suspends(reply, parse_shaping({}).mx_policy("example.com", [], concurrency=20)) is None


def test_your_rules_come_before_the_default_ones_and_default_rules_false_leaves_any_421() -> None:
    own = parse_shaping({"*": {"RULES": [{"MATCH": r"4\.7\.28", "SUSPEND": 7}], "DEFAULT_RULES": False}})
    policy = own.mx_policy("example.com", [], concurrency=20)
    assert suspends(Reply(421, "4.7.28", "unusual rate"), policy) == 7
    assert suspends(Reply(451, "4.7.650", "rate limited"), policy) is None
    assert suspends(Reply(421, "4.3.2", "System not accepting network messages"), policy) == 60


def test_a_suspension_doubles_while_it_keeps_happening_up_to_the_cap() -> None:
    assert [suspension_seconds(60, strikes, 3600) for strikes in range(1, 9)] == [
        60,
        120,
        240,
        480,
        960,
        1920,
        3600,
        3600,
    ]
    assert suspension_seconds(900, 1, 300) == 300
    assert suspension_seconds(60, 10**6, 3600) == 3600


def test_a_destination_is_dead_after_dead_after_unreachable_attempts_or_one_cohort() -> None:
    shaping = parse_shaping({"*": {"DEAD_AFTER": 5}, "small.example": {"CONNECTIONS": 3}})
    policy = shaping.mx_policy("example.com", [], concurrency=20)
    assert [is_dead(n, policy) for n in (1, 4, 5, 6)] == [False, False, True, True]
    small = shaping.mx_policy("small.example", [], concurrency=20)
    assert [is_dead(n, small) for n in (2, 3)] == [False, True]


def test_check_warns_of_a_destination_that_may_take_every_slot() -> None:
    with override_settings(
        MAILQUEUE={"CONCURRENCY": 8, "SHAPING": {"gmail.com": {"CONNECTIONS": 8}, "*": {"CONNECTIONS": 4}}}
    ):
        (warning,) = check_shaping()
    assert warning.id == "mailqueue.W004" and "['gmail.com']['CONNECTIONS'] is 8" in warning.msg
    with override_settings(MAILQUEUE={"CONCURRENCY": 8, "SHAPING": {"*": {"CONNECTIONS": 7}}}):
        assert check_shaping() == []
