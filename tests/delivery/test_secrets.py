"""A relay password never appears in a reply, an error, an exception or a log line — even from a leaky server."""

from __future__ import annotations

import base64
import logging

import pytest

from django_mailqueue.conf import RelayRoute
from django_mailqueue.core.items import RecipientState
from django_mailqueue.core.masking import SecretMask
from django_mailqueue.delivery import Deliverer, SmtpTransport, Target
from tests.delivery.conftest import FAST, MESSAGE, MakeSettings
from tests.support.smtp_server import CLOSE, DEFAULT_EHLO, SILENT, Action, ServerPool, auth_echo

PASSWORD = "Tr0ub4dor&3-hunter2"
USERNAME = "relayuser"
EHLO_WITH_AUTH = DEFAULT_EHLO.replace(b"250 SMTPUTF8", b"250-SMTPUTF8\r\n250 AUTH PLAIN LOGIN")

SECRET_FORMS = [
    PASSWORD,
    base64.b64encode(PASSWORD.encode()).decode(),
    base64.b64encode(f"\0{USERNAME}\0{PASSWORD}".encode()).decode(),
]


def leaked(text: str) -> list[str]:
    return [form for form in SECRET_FORMS if form in text]


PLAIN_ONLY = EHLO_WITH_AUTH.replace(b"AUTH PLAIN LOGIN", b"AUTH PLAIN")
LOGIN_ONLY = EHLO_WITH_AUTH.replace(b"AUTH PLAIN LOGIN", b"AUTH LOGIN")
READY = b"220 relay ready\r\n"


def login_echo(line: bytes) -> bytes:
    """AUTH LOGIN: ask for the password, then refuse it, echoing it (the password line has no verb)."""
    return b"334 UGFzc3dvcmQ6\r\n"


SCENARIOS: dict[str, tuple[bytes, Action, bytes, dict[str, Action]]] = {
    "PLAIN echoed in a 535": (PLAIN_ONLY, auth_echo, READY, {}),
    "PLAIN echoed in a 421": (PLAIN_ONLY, lambda line: b"421 4.7.0 closing, you sent " + line + b"\r\n", READY, {}),
    "PLAIN echoed as garbage": (PLAIN_ONLY, lambda line: b"??? " + line + b"\r\n", READY, {}),
    "LOGIN password echoed": (LOGIN_ONLY, login_echo, READY, {"*": lambda line: b"535 5.7.8 bad " + line + b"\r\n"}),
    "both mechanisms, echoed": (EHLO_WITH_AUTH, auth_echo, READY, {}),
    "greeting holding the password": (EHLO_WITH_AUTH, auth_echo, f"554 5.3.2 not now {PASSWORD}\r\n".encode(), {}),
    "drop at AUTH": (EHLO_WITH_AUTH, CLOSE, READY, {}),
    "silence at AUTH": (EHLO_WITH_AUTH, SILENT, READY, {}),
}


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS.keys())
async def test_relay_password_never_leaks(
    scenario: tuple[bytes, Action, bytes, dict[str, Action]],
    smtp_servers: ServerPool,
    make_settings: MakeSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ehlo, auth, greeting, unknown = scenario
    caplog.set_level(logging.DEBUG)
    replies: dict[str, Action] = {"EHLO": ehlo, "AUTH": auth}
    if "*" in unknown:  # the bare base64 password line of AUTH LOGIN arrives as an unknown "verb"
        replies[base64.b64encode(PASSWORD.encode()).decode().upper()] = unknown["*"]
    server = smtp_servers.scripted("127.0.0.2", replies=replies, greeting=greeting)
    routes = {
        "*": RelayRoute(host="127.0.0.2", port=smtp_servers.port, username=USERNAME, password=PASSWORD, tls="none")
    }

    result = await Deliverer(make_settings(routes=routes, greeting=1.0)).deliver(
        "sender@origin.test", ["rcpt@example.test"], MESSAGE
    )

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    if greeting == READY:
        assert any(line.startswith(b"AUTH") for line in server.lines)  # the credentials did go out (TLS "none")
    texts = [outcome.reply.text, str(outcome.reply), repr(result)]
    texts += [str(e) for e in result.errors] + [repr(e) for e in result.errors]
    texts += [record.getMessage() for record in caplog.records]
    texts += [caplog.text]
    for text in texts:
        assert leaked(text) == [], text


async def test_echoed_credentials_are_masked_not_dropped(
    smtp_servers: ServerPool, make_settings: MakeSettings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    smtp_servers.scripted("127.0.0.2", replies={"EHLO": PLAIN_ONLY, "AUTH": auth_echo})
    routes = {
        "*": RelayRoute(host="127.0.0.2", port=smtp_servers.port, username=USERNAME, password=PASSWORD, tls="none")
    }

    result = await Deliverer(make_settings(routes=routes)).deliver("sender@origin.test", ["r@example.test"], MESSAGE)

    reply = result.outcomes[0].reply
    assert (reply.code, reply.status) == (535, "4.7.8")
    assert "********" in reply.text and USERNAME in reply.text
    assert [e.code for e in result.errors] == ["INVALID_OPTION"]
    assert "********" in result.errors[0].message


def test_target_repr_and_mask() -> None:
    from django_mailqueue.conf import Timeouts

    target = Target(
        host="relay.test",
        address="127.0.0.2",
        port=25,
        tls="none",
        tls_context=None,
        helo_name="client.test",
        timeouts=Timeouts(**FAST),
        deadline=0.0,
        username=USERNAME,
        password=PASSWORD,
    )
    assert PASSWORD not in repr(target)
    assert leaked(target.mask(" / ".join(SECRET_FORMS))) == []
    assert SecretMask(None)("nothing to hide") == "nothing to hide"
    assert isinstance(SmtpTransport(), SmtpTransport)
