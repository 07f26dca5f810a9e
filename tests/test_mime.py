"""The fast plain-text writer against Django's own message(): the same bytes, or no answer at all."""

from __future__ import annotations

import email.utils
from collections.abc import Iterator

import pytest
from django.core.mail import EmailMessage, EmailMultiAlternatives, send_mail
from django.core.mail import message as django_message
from django.test import override_settings
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from django_mailqueue import mime
from django_mailqueue.envelopes import message_to_item

#: The Date writer itself: the fixture below puts a fixed date in its place.
_real_date_now = mime._date_now

pytestmark = pytest.mark.skipif(not mime.SUPPORTED, reason="the fast path is off on this Django")


@pytest.fixture(autouse=True)
def fixed_date_and_id(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(django_message, "formatdate", lambda localtime=False: "Mon, 30 Nov 2026 12:00:00 -0000")
    monkeypatch.setattr(mime, "_date_now", lambda localtime: "Mon, 30 Nov 2026 12:00:00 -0000")
    for module in (django_message, mime):
        monkeypatch.setattr(module, "make_msgid", lambda domain=None: f"<1.2.3@{domain}>")
    yield


@pytest.mark.parametrize("localtime", [False, True])
@pytest.mark.parametrize("zone", ["UTC", "America/Chicago", "Asia/Kolkata"])
def test_the_date_made_once_a_second_is_the_one_django_writes(localtime: bool, zone: str) -> None:
    with override_settings(TIME_ZONE=zone):
        for _ in range(5):  # the second may turn between the two
            before = email.utils.formatdate(localtime=localtime)
            ours = _real_date_now(localtime)
            if before == email.utils.formatdate(localtime=localtime):
                break
        assert ours == before


def django_bytes(message: EmailMessage) -> tuple[bytes, str]:
    written = message.message()
    data = written.as_bytes(linesep="\r\n")  # type: ignore[call-arg]
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    return data, str(written["Message-ID"])


def assert_same_or_declined(message: EmailMessage) -> bool:
    fast = mime.plain_message_bytes(message)
    if fast is None:
        return False
    assert fast == django_bytes(message)
    return True


class Subclass(EmailMessage):
    pass


def test_send_mail_messages_are_written_fast_and_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    # send_mail() builds an EmailMultiAlternatives, without alternatives unless html_message is given.
    sent: list[EmailMessage] = []
    monkeypatch.setattr(EmailMultiAlternatives, "send", lambda self, fail_silently=False: sent.append(self) or 1)
    send_mail("Subject", "Body\n", "a@example.com", ["b@example.com"])
    (message,) = sent
    assert assert_same_or_declined(message)


def test_a_typical_message_is_written_fast_and_exactly() -> None:
    message = EmailMessage(
        "Your order 1234",
        "Hello,\n\nit shipped.\n",
        "Shop <shop@example.com>",
        ["a@example.com", "Bo Bee <b@example.org>"],
        cc=["c@example.net"],
        reply_to=["help@example.com"],
    )
    assert assert_same_or_declined(message)


@pytest.mark.parametrize(
    "body",
    [
        "",
        "no newline at the end",
        "ends\n",
        "crlf\r\nlines\r\n",
        "bare\rcr",
        "mixed\r\n\n\r.\r\n..\n",
        "ünïcödé bödy\n",
        "emoji 📬\r\n",
        "x" * 998 + "\n",
        "é" * 499 + "\n",
        "\n\n\n",
        ".\n",
        "line\x0bvertical tab\x0cform feed\n",
        "u2028\u2028separator",
    ],
)
def test_bodies(body: str) -> None:
    assert assert_same_or_declined(EmailMessage("s", body, "a@example.com", ["b@example.com"]))


@pytest.mark.parametrize("body", ["x" * 999, "é" * 500, "ok\n" + "y" * 2000])
def test_a_line_longer_than_998_bytes_goes_to_django_which_quotes_it(body: str) -> None:
    message = EmailMessage("s", body, "a@example.com", ["b@example.com"])
    assert mime.plain_message_bytes(message) is None
    assert b"quoted-printable" in message_to_item(message, max_message_size=10**6).message


@pytest.mark.parametrize(
    "message",
    [
        EmailMessage("Grüße", "b", "a@example.com", ["b@example.com"]),
        EmailMessage("s", "b", "Jörg <a@example.com>", ["b@example.com"]),
        EmailMessage("s", "b", "a@example.com", ["b@exämple.com"]),
        EmailMessage("s" * 80, "b", "a@example.com", ["b@example.com"]),
        EmailMessage("s", "b", "a@example.com", [f"r{i}@example.com" for i in range(5)]),
        EmailMessage("s", "b", "a@example.com", ["b@example.com"], headers={"X-Tag": "t"}),
        EmailMessage("", "b", "a@example.com", ["b@example.com"]),
        EmailMessage("a  b", "b", "a@example.com", ["b@example.com"]),
        EmailMessage("=?utf-8?q?x?=", "b", "a@example.com", ["b@example.com"]),
        Subclass("s", "b", "a@example.com", ["b@example.com"]),
    ],
    ids=[
        "utf8 subject",
        "utf8 from name",
        "idn to",
        "long subject",
        "long to",
        "extra header",
        "empty subject",
        "double space",
        "encoded word",
        "subclass",
    ],
)
def test_what_the_fast_path_declines_django_writes(message: EmailMessage) -> None:
    assert mime.plain_message_bytes(message) is None
    assert message_to_item(message, max_message_size=10**6).message == django_bytes(message)[0]


def test_attachments_html_and_other_charsets_are_declined() -> None:
    with_file = EmailMessage("s", "b", "a@example.com", ["b@example.com"])
    with_file.attach("a.txt", "x", "text/plain")
    html = EmailMessage("s", "<p>b</p>", "a@example.com", ["b@example.com"])
    html.content_subtype = "html"
    latin = EmailMessage("s", "b", "a@example.com", ["b@example.com"])
    latin.encoding = "iso-8859-1"
    alternatives = EmailMultiAlternatives("s", "b", "a@example.com", ["b@example.com"])
    alternatives.attach_alternative("<p>b</p>", "text/html")
    for message in (with_file, html, latin, alternatives):
        assert mime.plain_message_bytes(message) is None


HEADER_TEXT = st.lists(
    st.sampled_from([*"abcXYZ019 .-_<>@;,:=?\"'()[]\t!#~", "é", "\u00a0", "  ", "word ", "=?", "?="]), max_size=40
).map("".join)
BODY_TEXT = st.lists(
    st.sampled_from([*"ab .-=\t", "\r", "\n", "\r\n", "é", "📬", "\x0b", "\u2028", "From ", "\n.\n"]), max_size=150
).map("".join)
ADDRESS = st.one_of(
    st.from_regex(r"[a-z]{1,8}@[a-z]{1,8}\.(com|org|test)", fullmatch=True),
    st.builds(
        lambda name, addr: f"{name} <{addr}>",
        HEADER_TEXT.filter(lambda s: s.strip() != ""),
        st.from_regex(r"[a-z]{1,8}@[a-z]{1,8}\.com", fullmatch=True),
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    subject=HEADER_TEXT,
    body=BODY_TEXT,
    sender=ADDRESS,
    to=st.lists(ADDRESS, min_size=1, max_size=3),
    cc=st.lists(ADDRESS, max_size=2),
    reply_to=st.lists(ADDRESS, max_size=1),
    long_line=st.booleans(),
)
def test_whatever_the_fast_path_writes_is_byte_for_byte_djangos(
    subject: str, body: str, sender: str, to: list[str], cc: list[str], reply_to: list[str], long_line: bool
) -> None:
    if long_line:
        body += "é" * 600
    message = EmailMessage(subject, body, sender, to, cc=cc, reply_to=reply_to)
    try:
        expected = django_bytes(message)
    except Exception:  # noqa: BLE001 - what Django cannot write, the fast path must not write either
        assert mime.plain_message_bytes(message) is None
        return
    fast = mime.plain_message_bytes(message)
    event("written fast" if fast is not None else "declined")
    if fast is not None:
        assert fast == expected
