"""An operator works the queue in a real browser (headless Chromium), on the ORM store and on the Redis store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import User

from django_mailqueue.stores.base import QueueStore
from tests.admin.conftest import PASSWORD
from tests.admin.queue_data import Queue, record_history

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LIST_PATH = "/admin/django_mailqueue/queueditem/"


def ids(*items: Any) -> set[str]:
    return {str(item.id) for item in items}


def test_an_operator_lists_filters_searches_opens_and_acts(
    browser: Any,
    live_server: Any,
    operator: User,
    store: QueueStore,
    queue: Queue,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from tests.admin.browser import listed, log_in, messages, open_page, wait_for_new_page

    record_history(datetime.now(UTC))
    base = live_server.url
    log_in(browser, base, "operator", PASSWORD, LIST_PATH)

    # the list: every item, each state shown
    assert listed(browser) == {str(i) for i in queue.ids()}
    states = {e.text for e in browser.find_elements(By.CSS_SELECTOR, "td.field-state .mq-state")}
    assert states == {"due", "scheduled", "deferred", "leased"}

    # filter by state, then by recipient domain
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-state-deferred"))
    assert listed(browser) == ids(queue.deferred, queue.partly_delivered)
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-state-All"))
    browser.find_element(By.ID, "mq-domain").send_keys("example.org")
    wait_for_new_page(browser, browser.find_element(By.CSS_SELECTOR, "#mq-filter-form input[type=submit]"))
    assert listed(browser) == ids(queue.due[1], queue.due[2], queue.due[3])

    # search by address
    open_page(browser, base + LIST_PATH)
    browser.find_element(By.ID, "searchbar").send_keys("ivan@")
    wait_for_new_page(browser, browser.find_element(By.CSS_SELECTOR, "#changelist-search input[type=submit]"))
    assert listed(browser) == ids(queue.scheduled)

    # open an item from the list
    open_page(browser, base + LIST_PATH)
    item = queue.partly_delivered
    wait_for_new_page(browser, browser.find_element(By.CSS_SELECTOR, f'tr[data-item="{item.id}"] th a'))
    content = browser.find_element(By.ID, "content").text
    assert "Invoice 2030-17" in content and "billing@origin.test" in content
    recipients = browser.find_element(By.ID, "mq-recipients").text
    assert "accounts@dest.test delivered 250 2.0.0 Ok: queued as 4F2A1" in recipients
    assert "greylisted@dest.test pending 451 4.7.1 Greylisted" in recipients
    assert "invoice-2030-17.pdf" in browser.find_element(By.ID, "mq-attachments").text

    # send one now, from its page
    open_page(browser, f"{base}{LIST_PATH}{queue.scheduled.id}/change/")
    before = datetime.now(UTC)
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-send_now"))
    assert any("1 queued message due now" in m for m in messages(browser)), messages(browser)
    sent = store.get(queue.scheduled.id)
    assert sent is not None and before <= sent.next_attempt <= datetime.now(UTC)
    assert browser.find_element(By.ID, "mq-item-state").text == "due"

    # reschedule one, from the list, through the intermediate form
    open_page(browser, base + LIST_PATH)
    browser.find_element(By.CSS_SELECTOR, f'input.action-select[value="{queue.newsletter.id}"]').click()
    Select(browser.find_element(By.ID, "mq-action")).select_by_value("reschedule")
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-go"))
    assert "March newsletter" in browser.find_element(By.ID, "mq-selected").text
    browser.find_element(By.ID, "id_at_0").send_keys("2031-02-03")
    browser.find_element(By.ID, "id_at_1").send_keys("04:05")
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-confirm"))
    assert "past the lifetime" in browser.find_element(By.ID, "mq-past-lifetime").text
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-confirm"))  # reschedule anyway
    assert any("1 queued message rescheduled" in m for m in messages(browser)), messages(browser)
    moved = store.get(queue.newsletter.id)
    assert moved is not None and moved.next_attempt == datetime(2031, 2, 3, 4, 5, tzinfo=UTC)

    # cancel two, from the list, after the confirmation page
    for victim in (queue.due[2], queue.due[4]):
        browser.find_element(By.CSS_SELECTOR, f'input.action-select[value="{victim.id}"]').click()
    Select(browser.find_element(By.ID, "mq-action")).select_by_value("cancel")
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-go"))
    assert "Are you sure you want to cancel these 2 queued messages?" in browser.find_element(By.ID, "content").text
    assert store.get(queue.due[2].id) is not None
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-confirm"))
    assert any("2 queued messages cancelled" in m for m in messages(browser)), messages(browser)
    assert store.get(queue.due[2].id) is None and store.get(queue.due[4].id) is None
    assert listed(browser) == {str(i) for i in queue.ids()} - ids(queue.due[2], queue.due[4])

    # the overview
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-overview-link"))
    assert browser.find_element(By.ID, "mq-total").text == "8"
    assert int(browser.find_element(By.ID, "mq-delivered-24h").text) > 0
    assert browser.find_elements(By.CSS_SELECTOR, "svg.mq-chart rect.mq-bar-delivered")

    # the admin log says who did what
    log = LogEntry.objects.filter(user=User.objects.get(username="operator"))
    assert sorted((e.object_id, e.action_flag) for e in log) == sorted(
        [
            (str(queue.scheduled.id), CHANGE),
            (str(queue.newsletter.id), CHANGE),
            (str(queue.due[2].id), DELETION),
            (str(queue.due[4].id), DELETION),
        ]
    )


def test_a_view_only_user_sees_no_action_in_the_browser(
    browser: Any, live_server: Any, viewer: User, store: QueueStore, queue: Queue
) -> None:
    from selenium.webdriver.common.by import By

    from tests.admin.browser import listed, log_in, open_page

    log_in(browser, live_server.url, "viewer", PASSWORD, LIST_PATH)
    assert listed(browser) == {str(i) for i in queue.ids()}
    assert not browser.find_elements(By.ID, "mq-action")
    assert not browser.find_elements(By.CSS_SELECTOR, "input.action-select")
    open_page(browser, f"{live_server.url}{LIST_PATH}{queue.scheduled.id}/change/")
    assert "Reminder: renew" in browser.find_element(By.ID, "content").text
    assert not browser.find_elements(By.CSS_SELECTOR, "form.mq-item-actions button")
