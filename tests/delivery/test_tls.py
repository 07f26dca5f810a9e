"""TLS: opportunistic STARTTLS on MX routes (plain text retry); required, verified TLS on relays; AUTH only over TLS."""

from __future__ import annotations

import pytest

from django_mailqueue.conf import RelayRoute
from django_mailqueue.core.items import RecipientState
from django_mailqueue.delivery import Deliverer
from tests.delivery.conftest import MESSAGE, MakeSettings, mx_domain
from tests.support.certs import CertificateAuthority
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import BROKEN_TLS, DEFAULT_EHLO, ServerPool

EHLO_WITH_STARTTLS = DEFAULT_EHLO.replace(b"250 SMTPUTF8", b"250-SMTPUTF8\r\n250 STARTTLS")


@pytest.fixture
def trust_test_ca(monkeypatch: pytest.MonkeyPatch, test_ca: CertificateAuthority) -> None:
    """The "system trust store" is the test CA (OpenSSL reads SSL_CERT_FILE)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(test_ca.ca_file))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


@pytest.fixture
def distrust_test_ca(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A trust store without the test CA."""
    empty = tmp_path_factory.mktemp("no-ca") / "empty.pem"
    empty.write_text("")
    monkeypatch.setenv("SSL_CERT_FILE", str(empty))
    monkeypatch.setenv("SSL_CERT_DIR", str(empty.parent))


def relay(
    port: int,
    *,
    tls: str = "starttls",
    username: str | None = "relayuser",
    password: str | None = "relay-secret",
    host: str = "127.0.0.2",
) -> dict[str, RelayRoute]:
    return {"*": RelayRoute(host=host, port=port, username=username, password=password, tls=tls)}  # type: ignore[arg-type]


async def test_starttls_is_used_on_an_mx_route_when_offered(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", starttls=True)

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert server.messages[0].tls is True
    assert server.commands[:4] == ["EHLO", "STARTTLS", "EHLO", "MAIL"]


async def test_failed_handshake_on_an_mx_route_retries_the_same_host_in_plain_text(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.scripted("127.0.0.2", replies={"EHLO": EHLO_WITH_STARTTLS, "STARTTLS": BROKEN_TLS})

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.DELIVERED
    assert outcome.remote_mta == "mx1.example.test"
    assert server.connections == 2
    assert server.commands == ["EHLO", "STARTTLS", "EHLO", "MAIL", "RCPT", "DATA", "QUIT"]
    assert len(server.data) == 1
    assert result.errors == ()


async def test_starttls_refused_by_reply_goes_on_in_plain_text(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.scripted("127.0.0.2", replies={"EHLO": EHLO_WITH_STARTTLS})  # STARTTLS: 454

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert server.connections == 1
    assert server.commands[:3] == ["EHLO", "STARTTLS", "MAIL"]


async def test_relay_requiring_starttls_that_is_not_offered_gets_no_auth(
    smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    server = smtp_servers.smtp(
        "127.0.0.2", starttls=False, auth=("relayuser", "relay-secret"), auth_require_tls=False
    )  # it would even take AUTH in plain text

    result = await Deliverer(make_settings(routes=relay(smtp_servers.port))).deliver(
        "sender@origin.test", ["rcpt@example.test", "other@elsewhere.test"], MESSAGE
    )

    for outcome in result.outcomes:
        assert outcome.state is RecipientState.PENDING
        assert outcome.reply.status == "4.7.4"
        assert outcome.reply.code is None
    assert server.commands == ["EHLO", "QUIT"]
    assert "AUTH" not in server.commands
    assert [e.code for e in result.errors] == ["INVALID_OPTION"]
    assert "STARTTLS" in result.errors[0].message


@pytest.mark.usefixtures("trust_test_ca")
async def test_relay_with_tls_and_auth_delivers_with_checked_credentials(
    smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    server = smtp_servers.smtp("127.0.0.2", starttls=True, auth=("relayuser", "relay-secret"), auth_required=True)

    result = await Deliverer(make_settings(routes=relay(smtp_servers.port))).deliver(
        "sender@origin.test", ["rcpt@example.test", "other@elsewhere.test"], MESSAGE
    )

    assert [o.state for o in result.outcomes] == [RecipientState.DELIVERED] * 2
    assert {o.remote_mta for o in result.outcomes} == {"127.0.0.2"}
    (message,) = server.messages
    assert message.tls is True
    assert message.login == "relayuser"
    assert message.rcpt_tos == ["rcpt@example.test", "other@elsewhere.test"]
    assert server.commands[:4] == ["EHLO", "STARTTLS", "EHLO", "AUTH"]
    assert result.errors == ()


@pytest.mark.usefixtures("trust_test_ca")
async def test_relay_refusing_the_credentials_defers_and_tells_the_operator(
    smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    server = smtp_servers.smtp("127.0.0.2", starttls=True, auth=("relayuser", "another-password"), auth_required=True)

    result = await Deliverer(make_settings(routes=relay(smtp_servers.port))).deliver(
        "sender@origin.test", ["rcpt@example.test"], MESSAGE
    )

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert (outcome.reply.code, outcome.reply.status) == (535, "4.7.8")
    assert server.messages == []
    assert [e.code for e in result.errors] == ["INVALID_OPTION"]


@pytest.mark.usefixtures("distrust_test_ca")
async def test_relay_certificate_not_trusted_defers_4_7_5_without_auth(
    smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    server = smtp_servers.smtp("127.0.0.2", starttls=True, auth=("relayuser", "relay-secret"))

    result = await Deliverer(make_settings(routes=relay(smtp_servers.port))).deliver(
        "sender@origin.test", ["rcpt@example.test"], MESSAGE
    )

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status == "4.7.5"
    assert "AUTH" not in server.commands and "MAIL" not in server.commands
    assert server.messages == []
    assert [e.code for e in result.errors] == ["INVALID_OPTION"]


@pytest.mark.usefixtures("trust_test_ca")
async def test_relay_certificate_not_matching_the_host_defers_4_7_5(
    smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    server = smtp_servers.smtp("127.0.0.5", starttls=True)  # 127.0.0.5 is not in the certificate

    result = await Deliverer(make_settings(routes=relay(smtp_servers.port, host="127.0.0.5"))).deliver(
        "sender@origin.test", ["rcpt@example.test"], MESSAGE
    )

    assert result.outcomes[0].state is RecipientState.PENDING
    assert result.outcomes[0].reply.status == "4.7.5"
    assert server.messages == []


@pytest.mark.usefixtures("trust_test_ca")
async def test_relay_with_implicit_tls_delivers(smtp_servers: ServerPool, make_settings: MakeSettings) -> None:
    server = smtp_servers.smtp("127.0.0.2", implicit_tls=True, auth=("relayuser", "relay-secret"))

    result = await Deliverer(make_settings(routes=relay(smtp_servers.port, tls="implicit"))).deliver(
        "sender@origin.test", ["rcpt@example.test"], MESSAGE
    )

    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert server.messages[0].tls is True
    assert server.messages[0].login == "relayuser"
    assert "STARTTLS" not in server.commands


async def test_relay_tls_context_hook(
    smtp_servers: ServerPool, make_settings: MakeSettings, test_ca: CertificateAuthority
) -> None:
    server = smtp_servers.smtp("127.0.0.2", starttls=True)
    deliverer = Deliverer(
        make_settings(routes=relay(smtp_servers.port, username=None, password=None)),
        relay_tls_context=lambda route: test_ca.client_context(),
    )

    result = await deliverer.deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert server.messages[0].tls is True
    assert server.messages[0].login is None


async def test_relay_with_tls_none_sends_plain_text_even_with_auth(
    smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    server = smtp_servers.smtp("127.0.0.2", starttls=True, auth=("relayuser", "relay-secret"), auth_require_tls=False)

    result = await Deliverer(make_settings(routes=relay(smtp_servers.port, tls="none"))).deliver(
        "sender@origin.test", ["rcpt@example.test"], MESSAGE
    )

    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert server.messages[0].tls is False
    assert server.messages[0].login == "relayuser"
    assert "STARTTLS" not in server.commands


async def test_relay_host_that_does_not_exist_is_a_misconfigured_route(make_settings: MakeSettings) -> None:
    routes = relay(2525, host="no-such-relay.invalid")

    result = await Deliverer(make_settings(routes=routes)).deliver("sender@origin.test", ["rcpt@x.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status in ("4.3.5", "4.4.3")  # 4.4.3 where the machine's resolver cannot answer at all
    if outcome.reply.status == "4.3.5":
        assert [e.code for e in result.errors] == ["INVALID_OPTION"]


@pytest.mark.usefixtures("distrust_test_ca")
async def test_relay_with_implicit_tls_and_an_untrusted_certificate_defers_4_7_5(
    smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    server = smtp_servers.smtp("127.0.0.2", implicit_tls=True, auth=("relayuser", "relay-secret"))

    result = await Deliverer(make_settings(routes=relay(smtp_servers.port, tls="implicit"))).deliver(
        "sender@origin.test", ["rcpt@example.test"], MESSAGE
    )

    (outcome,) = result.outcomes
    assert (outcome.state, outcome.reply.status) == (RecipientState.PENDING, "4.7.5")
    assert "certificate" in outcome.reply.text.lower()
    assert [e.code for e in result.errors] == ["INVALID_OPTION"]
    assert server.commands == []
