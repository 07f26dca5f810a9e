"""The suppression list's pages in headless Chromium at 1,366 × 900 with the sidebar open, on the ORM and the
Redis store: no page wider than the window; an address added by hand, found, then removed after the
confirmation page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_mailqueue.core.items import Reply, Suppression
from django_mailqueue.stores.base import QueueStore
from tests.admin.conftest import PASSWORD, make_staff
from tests.admin.test_browser_list import assert_no_sideways_scroll, laptop  # noqa: F401 (fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LIST_PATH = "/admin/django_mailqueue/suppressedaddress/"
LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


def test_add_find_and_remove_an_address(
    laptop: Any,  # noqa: F811
    live_server: Any,
    store: QueueStore,
) -> None:
    from selenium.webdriver.common.by import By

    from tests.admin.browser import log_in, messages, wait_for_new_page

    browser = laptop
    now = datetime.now(UTC)
    long_reply = "<a-very-long-local-part.of.someone@subdomain.of.a.rather-long-domain.example>: " + "x " * 80
    store.suppress([Suppression("gone@dest.test", Reply(550, "5.1.1", long_reply), now - timedelta(hours=1))])
    make_staff("keeper", "view_suppressedaddress", "add_suppressedaddress", "delete_suppressedaddress")
    log_in(browser, live_server.url, "keeper", PASSWORD, LIST_PATH)
    assert_no_sideways_scroll(browser)
    assert browser.find_element(By.ID, "mq-total").text == "1"

    # add by hand
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-suppress-add"))
    assert_no_sideways_scroll(browser)
    browser.find_element(By.ID, "id_addresses").send_keys("Closed@Other.TEST")
    browser.find_element(By.ID, "id_reason").send_keys("ticket 12")
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-confirm"))
    assert any("1 listed: Closed@other.test" in m for m in messages(browser))
    assert browser.find_element(By.ID, "mq-total").text == "2"

    # find it, then remove it after the confirmation page
    search = browser.find_element(By.ID, "searchbar")
    search.send_keys("other.test")
    wait_for_new_page(browser, browser.find_element(By.CSS_SELECTOR, "#changelist-search input[type=submit]"))
    rows = browser.find_elements(By.CSS_SELECTOR, "tr[data-address]")
    assert [r.get_attribute("data-address") for r in rows] == ["Closed@other.test"]
    rows[0].find_element(By.CSS_SELECTOR, "input.action-select").click()
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-remove"))
    assert "Take this address off the suppression list?" in browser.find_element(By.ID, "mq-question").text
    assert_no_sideways_scroll(browser)
    assert "Closed@other.test" in store.suppressed(["Closed@other.test"], since=LONG_AGO)  # not yet
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-confirm"))
    assert any("1 taken off the suppression list" in m for m in messages(browser))
    assert store.suppressed(["Closed@other.test", "gone@dest.test"], since=LONG_AGO).keys() == {"gone@dest.test"}
