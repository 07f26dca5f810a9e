"""The suppression list's rules without I/O: an address's key, which outcomes list it (through `decide`), and
what a listed recipient comes to."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from django_mailqueue.conf import QueueSettings, load_settings
from django_mailqueue.core.items import QueueItem, Recipient, RecipientOutcome, RecipientState, Reply, Suppression
from django_mailqueue.suppression import SuppressionSettings, listed_outcome, suppression_key
from django_mailqueue.worker.record import AttemptOutcome, decide

NOW = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)


def test_the_key_keeps_the_local_part_and_lowercases_the_domain_as_dns_reads_it() -> None:
    assert suppression_key("Bob.Smith@Example.COM") == "Bob.Smith@example.com"
    assert suppression_key("bob@Bücher.example") == "bob@xn--bcher-kva.example"
    assert suppression_key("bob@xn--bcher-kva.example") == "bob@xn--bcher-kva.example"
    assert suppression_key('"Odd@Local"@X.ORG') == '"Odd@Local"@x.org'
    assert suppression_key("webmaster") == "webmaster"  # a bare local part, for a relay


def item(*addresses: str, sender: str = "s@origin.test") -> QueueItem:
    return QueueItem(
        id=uuid.uuid4(),
        sender=sender,
        recipients=tuple(Recipient(a) for a in addresses),
        size=10,
        created=NOW - timedelta(minutes=5),
        next_attempt=NOW,
        revision=1,
        owner="w",
    )


def failed(address: str, code: int | None, status: str, text: str = "no") -> RecipientOutcome:
    return RecipientOutcome(address, RecipientState.FAILED, Reply(code, status, text), "mx.dest.test")


def settings(**raw: object) -> QueueSettings:
    return load_settings({"ROUTES": {"*": "mx"}, **raw})


def test_a_permanent_failure_of_a_listed_status_lists_the_address_with_its_reply() -> None:
    mail = item("Gone@Dest.Test", "nodomain@nx.test", "full@dest.test", "fine@dest.test", "later@dest.test")
    outcome = AttemptOutcome(
        (
            failed("Gone@Dest.Test", 550, "5.1.1", "No such user"),
            failed("nodomain@nx.test", None, "5.1.2", "no such domain"),
            failed("full@dest.test", 552, "5.2.2", "mailbox full"),  # not a status of the list
            RecipientOutcome("fine@dest.test", RecipientState.DELIVERED, Reply(250, "2.0.0", "ok")),
            RecipientOutcome("later@dest.test", RecipientState.PENDING, Reply(450, "4.2.1", "try later")),
        )
    )
    record = decide(mail, outcome, settings(), now=NOW, rng=random.Random(1))
    assert record.completion.suppress == (
        Suppression("Gone@dest.test", Reply(550, "5.1.1", "No such user"), NOW, mail.id),
        Suppression("nodomain@nx.test", Reply(None, "5.1.2", "no such domain"), NOW, mail.id),
    )
    assert record.without_dsns().completion.suppress == record.completion.suppress


def test_nothing_is_listed_when_off_nor_for_a_status_left_out_nor_again_for_a_listed_recipient() -> None:
    mail = item("a@dest.test", "b@dest.test")
    outcome = AttemptOutcome((failed("a@dest.test", 550, "5.1.1"), failed("b@dest.test", 550, "5.2.1")))
    off = decide(mail, outcome, settings(SUPPRESSION=None), now=NOW, rng=random.Random(1))
    assert off.completion.suppress == ()
    only_521 = decide(mail, outcome, settings(SUPPRESSION={"STATUSES": ["5.2.1"]}), now=NOW, rng=random.Random(1))
    assert [e.address for e in only_521.completion.suppress] == ["b@dest.test"]
    listed = decide(
        mail, replace(outcome, listed=frozenset({"a@dest.test"})), settings(), now=NOW, rng=random.Random(1)
    )
    assert [e.address for e in listed.completion.suppress] == ["b@dest.test"]


def test_a_recipient_expired_with_a_temporary_reply_is_not_listed() -> None:
    mail = replace(item("slow@dest.test"), created=NOW - timedelta(days=6))
    outcome = AttemptOutcome((RecipientOutcome("slow@dest.test", RecipientState.PENDING, Reply(451, "4.1.1", "x")),))
    record = decide(mail, outcome, settings(), now=NOW, rng=random.Random(1))
    assert record.decided[0].state is RecipientState.FAILED and record.completion.suppress == ()


def test_a_listed_recipient_fails_with_the_original_status_saying_since_when() -> None:
    entry = Suppression("gone@dest.test", Reply(550, "5.1.1", "No such user"), NOW, uuid.uuid4())
    assert listed_outcome("Gone@dest.test", entry) == RecipientOutcome(
        "Gone@dest.test",
        RecipientState.FAILED,
        Reply(
            None,
            "5.1.1",
            "suppressed since 2030-05-06 07:08:09 UTC: the address is on the suppression list after "
            "550 5.1.1 No such user",
        ),
    )
    by_hand = Suppression("gone@dest.test", Reply(None, "5.2.1", "closed account (support ticket 12)"), NOW)
    assert listed_outcome("gone@dest.test", by_hand).reply.text.endswith(
        "list after closed account (support ticket 12)"
    )


def test_the_cut_off_is_days_before_now() -> None:
    assert SuppressionSettings(days=30).cut_off(NOW) == NOW - timedelta(days=30)
