"""Failed mail kept and sent again, in headless Chromium at 1,366 × 900 with Django's sidebar open: a real worker
fails a recipient on a loopback aiosmtpd MX, the operator finds the item under the "failed" filter, sends it again,
and the worker delivers it to that recipient — once, and not again to the one delivered before."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.mail import send_mail
from django.core.management import call_command

from django_mailqueue.core.items import ItemQuery, ItemState, RecipientState
from django_mailqueue.stores import get_store
from tests.admin.conftest import ORM_STORE, PASSWORD, make_staff, redis_store_config
from tests.admin.test_browser_list import HEIGHT, HISTORY_PATH, LIST_PATH, WIDTH, assert_no_sideways_scroll, shoot
from tests.support.services import drop_redis_keys

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: what the MX answers the recipient until the operator's fix (an account the provider had closed)
REFUSED = "550 5.7.1 Account expired: renew it to receive mail"


@pytest.fixture(params=["orm", "redis"])
def failing_world(request: pytest.FixtureRequest, mail_world: Any, settings: Any) -> Iterator[Any]:
    """The loopback mail world on the ORM store (SQLite) or Redis, its MX refusing client@dest.test for now."""
    config = ORM_STORE if request.param == "orm" else redis_store_config(request.getfixturevalue("redis_url"))
    settings.MAILQUEUE = mail_world.mailqueue(config)
    mail_world.mx.handler.rcpt_replies["client@dest.test"] = REFUSED
    try:
        yield mail_world
    finally:
        if request.param == "redis":
            drop_redis_keys(request.getfixturevalue("redis_url"), config["OPTIONS"]["key_prefix"])


@pytest.fixture
def laptop(browser: Any) -> Iterator[Any]:
    """The session's browser at 1,366 × 900, with the admin's navigation sidebar open."""
    browser.set_window_size(WIDTH, HEIGHT)
    yield browser
    browser.set_window_size(1400, 1000)


def work_once() -> str:
    out = StringIO()
    call_command("mailqueue_work", "--once", stdout=out, stderr=StringIO())
    return out.getvalue()


def delivered_to(world: Any, address: str) -> int:
    return sum(1 for message in world.mx.messages if address in message.rcpt_tos)


def test_a_failed_item_is_kept_sent_again_from_the_list_and_delivered(
    failing_world: Any, laptop: Any, live_server: Any, screenshots: Path | None, request: pytest.FixtureRequest
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from tests.admin.browser import listed, log_in, messages, open_page, wait_for_new_page

    browser, world = laptop, failing_world
    send_mail("Invoice 42", "Your invoice.\n", "billing@origin.test", ["team@dest.test", "client@dest.test"])
    work_once()
    store = get_store()
    (kept,) = store.list(ItemQuery(state=ItemState.FAILED, now=store_now()))
    assert [r.state for r in kept.recipients] == [RecipientState.DELIVERED, RecipientState.FAILED]
    assert str(kept.recipients[1].reply) == REFUSED
    assert delivered_to(world, "team@dest.test") == 1 and delivered_to(world, "client@dest.test") == 0
    # the failure DSN went to the sender, and left; the failed item stays
    assert delivered_to(world, "billing@origin.test") == 1
    assert store.count() == 1

    make_staff("operator", "view_queueditem", "send_again_queueditem", "view_deliveryrecord")
    log_in(browser, live_server.url, "operator", PASSWORD, LIST_PATH + "?state=failed")
    assert listed(browser) == {str(kept.id)}
    assert browser.find_element(By.CSS_SELECTOR, f"tr[data-item='{kept.id}'] .mq-state").text == "failed"
    assert "failed" in browser.find_element(By.CSS_SELECTOR, f"tr[data-item='{kept.id}'] .field-next").text
    assert browser.find_element(By.ID, "mq-state-total-failed").text == "(1)"
    assert_no_sideways_scroll(browser)
    shoot(
        browser, screenshots if request.node.callspec.params["failing_world"] == "orm" else None, "admin-queue-failed"
    )

    # the history's record of the failure links to the item while it is kept
    open_page(browser, live_server.url + HISTORY_PATH + f"?q={kept.id}")
    links = browser.find_elements(By.CSS_SELECTOR, "a.mq-item-link")
    assert links and all(link.get_attribute("href").endswith(f"{LIST_PATH}{kept.id}/change/") for link in links)
    assert "failed" in browser.find_element(By.ID, "result_list").text

    # the item's page offers Send again (and no Send now for an item that is never due)
    open_page(browser, live_server.url + LIST_PATH + f"{kept.id}/change/")
    assert browser.find_element(By.ID, "mq-item-state").text == "failed"
    assert browser.find_elements(By.ID, "mq-send_again") and not browser.find_elements(By.ID, "mq-send_now")
    assert "kept to be sent again" in browser.find_element(By.ID, "mq-next-attempt").text

    # the provider renews the account; the operator sends the item again from the filtered list
    del world.mx.handler.rcpt_replies["client@dest.test"]
    open_page(browser, live_server.url + LIST_PATH + "?state=failed")
    browser.find_element(By.CSS_SELECTOR, f"tr[data-item='{kept.id}'] input.action-select").click()
    Select(browser.find_element(By.ID, "mq-action")).select_by_value("send_again")
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-go"))
    assert any("1 queued message sent again" in m for m in messages(browser)), messages(browser)
    again = store.get(kept.id)
    assert again is not None and again.state_at(store_now()) is ItemState.DUE
    assert [r.state for r in again.recipients] == [RecipientState.DELIVERED, RecipientState.PENDING]

    # a real worker delivers it: to the recipient that failed, and not again to the one that had it
    work_once()
    assert store.get(kept.id) is None
    assert delivered_to(world, "client@dest.test") == 1 and delivered_to(world, "team@dest.test") == 1
    (message,) = [m for m in world.mx.messages if "client@dest.test" in m.rcpt_tos]
    assert b"Subject: Invoice 42" in message.data and message.mail_from == "billing@origin.test"
    open_page(browser, live_server.url + LIST_PATH + "?state=failed")
    assert browser.find_element(By.ID, "mq-empty").text == "No queued message matches these filters."


def store_now() -> Any:
    from django_mailqueue.core.clock import SystemClock

    return SystemClock().now()
