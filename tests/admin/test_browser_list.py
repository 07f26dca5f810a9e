"""The queue list at 1,366 × 900 with Django's sidebar open, in headless Chromium: select every item matching
a filter and cancel 3,000 at once, sort, read the totals, and no page wider than the window."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from django_mailqueue.core.items import ItemOrder, NewItem, Reply
from django_mailqueue.stores.base import QueueStore
from tests.admin.conftest import PASSWORD
from tests.admin.queue_data import Queue, record_history

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LIST_PATH = "/admin/django_mailqueue/queueditem/"
HISTORY_PATH = "/admin/django_mailqueue/deliveryrecord/"
#: A laptop screen, as the issue measured it.
WIDTH, HEIGHT = 1366, 900
#: How many items the "cancel a whole mistake" test queues.
MISTAKE = 3_000


@pytest.fixture
def laptop(browser: Any) -> Any:
    """The session's browser at 1,366 × 900, with the admin's navigation sidebar open."""
    browser.set_window_size(WIDTH, HEIGHT)
    yield browser
    browser.set_window_size(1400, 1000)


def sidebar_open(browser: Any) -> bool:
    return bool(
        browser.execute_script(
            "const s = document.getElementById('nav-sidebar');"
            "return !!s && s.getBoundingClientRect().width > 100 && document.getElementById('main')"
            ".classList.contains('shifted');"
        )
    )


def overflow(browser: Any) -> dict[str, list[int]]:
    """scrollWidth and clientWidth of the page and of every element that could scroll sideways."""
    found: dict[str, list[int]] = browser.execute_script(
        "const out = {page: [document.documentElement.scrollWidth, document.documentElement.clientWidth]};"
        "for (const sel of ['#changelist .results', '#content', '#content-main', '#changelist']) {"
        "  const e = document.querySelector(sel); if (e) out[sel] = [e.scrollWidth, e.clientWidth]; }"
        "return out;"
    )
    return found


def assert_no_sideways_scroll(browser: Any) -> None:
    assert sidebar_open(browser)
    widths = overflow(browser)
    assert all(scroll <= client for scroll, client in widths.values()), widths


def shoot(browser: Any, screenshots: Path | None, name: str) -> None:
    """A PNG of the page at 1,366 px, sidebar open, as tall as its content (up to 2,400 px)."""
    if screenshots is None:
        return
    from tests.admin.browser import screenshot

    screenshot(browser, screenshots / f"{name}.png", width=WIDTH, max_height=2400, fold_sidebar=False)


def test_lists_fit_the_screen_sort_and_count(
    laptop: Any,
    live_server: Any,
    operator: User,
    store: QueueStore,
    queue: Queue,
    screenshots: Path | None,
    request: pytest.FixtureRequest,
) -> None:
    from selenium.webdriver.common.by import By

    from tests.admin.browser import listed, log_in, open_page, wait_for_new_page

    browser = laptop
    orm = request.node.callspec.params["store"] == "orm"
    shots = screenshots if orm else None
    now = datetime.now(UTC)
    record_history(now)
    dsn = store.add(
        NewItem(
            sender="",
            recipients=("alice@origin.test",),
            message=b"Subject: Undelivered Mail Returned to Sender\r\n\r\n.\r\n",
            subject="Undelivered Mail Returned to Sender",
        ),
        now=now,
    )
    log_in(browser, live_server.url, "operator", PASSWORD, LIST_PATH)
    base = live_server.url + LIST_PATH

    # the list fits, with every column, and says how many there are
    assert_no_sideways_scroll(browser)
    assert browser.find_element(By.ID, "mq-total").text == "11"
    headers = [th.text.capitalize() for th in browser.find_elements(By.CSS_SELECTOR, "#result_list thead th")]
    assert headers[1:] == [
        "Item",
        "State",
        "Queue",
        "Sender",
        "Recipients",
        "Attempts",
        "Next attempt ▲",
        "Last reply",
        "Age",
    ]
    for cell in browser.find_elements(By.CSS_SELECTOR, "#result_list td.field-sender"):
        address = cell.text
        assert "\n" not in address or address.split("\n")[0].endswith("@"), address  # wraps only after the @
    assert browser.find_element(By.CSS_SELECTOR, f'tr[data-item="{dsn.id}"] td.field-sender').text == "<>"
    if store.bounded_counts:
        assert browser.find_element(By.ID, "mq-state-total-due").text == "(6)"
    shoot(browser, shots, "admin-queue-list")

    # sorting: next attempt the other way, then by age where the store can
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-sort-next"))
    shown = [r.get_attribute("data-item") for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-item]")]
    assert shown == [str(i.id) for i in store.list(order=ItemOrder.NEXT_ATTEMPT_DESC)]
    assert "NEXT ATTEMPT ▼" in browser.find_element(By.CSS_SELECTOR, "#result_list thead").text.upper()
    if ItemOrder.NEWEST in store.orders:
        wait_for_new_page(browser, browser.find_element(By.ID, "mq-sort-age"))
        shown = [r.get_attribute("data-item") for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-item]")]
        assert shown[0] == str(dsn.id) and shown == [str(i.id) for i in store.list(order=ItemOrder.NEWEST)]
    else:
        assert not browser.find_elements(By.ID, "mq-sort-age")

    # search by subject and by the id the list shows
    open_page(browser, base + "?q=newsletter")
    assert listed(browser) == {str(queue.newsletter.id)}
    open_page(browser, base + f"?q={queue.deferred.id.hex[:8]}")
    assert str(queue.deferred.id) in listed(browser)

    # a page past the end says so
    open_page(browser, base + "?p=99")
    assert browser.find_element(By.ID, "mq-empty").text == "Page 99 is past the end: 11 items, the last page is 1."

    # one item, its HTML preview, the overview (from the sidebar), the history: each fits
    open_page(browser, f"{base}{queue.partly_delivered.id}/change/")
    assert_no_sideways_scroll(browser)
    shoot(browser, shots, "admin-queue-item")
    open_page(browser, f"{base}{queue.due[1].id}/change/")
    shoot(browser, shots, "admin-queue-item-html")
    # a suspended destination with a long reply, on the overview
    long_reply = Reply(421, "4.7.28", "Our system has detected an unusual rate of unsolicited mail " * 6)
    store.suspend(".google.com", until=now + timedelta(minutes=10), reply=long_reply, now=now)
    entry = browser.find_element(By.CSS_SELECTOR, "#nav-sidebar a[href$='/queueoverview/']")
    assert entry.text == "Queue overview"
    wait_for_new_page(browser, entry)
    assert browser.current_url.endswith(LIST_PATH + "overview/")
    assert_no_sideways_scroll(browser)
    assert ".google.com" in browser.find_element(By.ID, "mq-suspended").text
    shoot(browser, shots, "admin-overview")
    open_page(browser, live_server.url + HISTORY_PATH)
    assert_no_sideways_scroll(browser)
    first_item = browser.find_elements(By.CSS_SELECTOR, "#result_list td.field-item")[0].text
    assert len(first_item) == 9 and first_item.endswith("…")
    shoot(browser, shots, "admin-history")

    # the reschedule form: the admin's date and time widget, and a warning past the lifetime
    open_page(browser, base)
    browser.find_element(By.CSS_SELECTOR, f'input.action-select[value="{queue.scheduled.id}"]').click()
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, "mq-action")).select_by_value("reschedule")
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-go"))
    assert browser.find_elements(By.CSS_SELECTOR, ".datetimeshortcuts a")  # "Today", the calendar, "Now", the clock
    later = now + timedelta(days=30)
    browser.find_element(By.ID, "id_at_0").send_keys(later.strftime("%Y-%m-%d"))
    browser.find_element(By.ID, "id_at_1").send_keys("10:00:00")
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-confirm"))
    assert "past the lifetime" in browser.find_element(By.ID, "mq-past-lifetime").text
    shoot(browser, shots, "admin-queue-reschedule")
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-confirm"))
    moved = store.get(queue.scheduled.id)
    assert moved is not None and moved.next_attempt == later.replace(hour=10, minute=0, second=0, microsecond=0)


def test_select_every_item_matching_a_filter_and_cancel_3000_at_once(
    laptop: Any,
    live_server: Any,
    operator: User,
    store: QueueStore,
    screenshots: Path | None,
    request: pytest.FixtureRequest,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from tests.admin.browser import log_in, messages, open_page, wait_for_new_page

    browser = laptop
    shots = screenshots if request.node.callspec.params["store"] == "orm" else None
    now = datetime.now(UTC)
    message = b"Subject: Oops\r\n\r\nA mistake.\r\n"
    mistake = store.add_many(
        [NewItem("promo@origin.test", (f"user{n}@oops.test",), message, subject="Oops") for n in range(MISTAKE)],
        now=now,
    )
    keep = store.add_many(
        [NewItem("billing@origin.test", (f"client{n}@dest.test",), message, subject="Invoice") for n in range(3)],
        now=now,
    )
    log_in(browser, live_server.url, "operator", PASSWORD, LIST_PATH + "?domain=oops.test")

    # the header checkbox selects the page, then "select all" the whole filter
    counter = browser.find_element(By.CSS_SELECTOR, "span.action-counter")
    assert counter.text == "0 of 50 selected"
    browser.find_element(By.ID, "action-toggle").click()
    assert counter.text == "50 of 50 selected"
    question = browser.find_element(By.ID, "mq-select-across")
    expected_total = "3,000" if store.bounded_counts else ""
    assert question.text == " ".join(filter(None, ["Select all", expected_total, "items matching this filter"]))
    question.click()
    assert browser.find_element(By.ID, "mq-all-selected").is_displayed()
    Select(browser.find_element(By.ID, "mq-action")).select_by_value("cancel")
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-go"))

    # the confirmation page counts them, names a few, and asks
    assert browser.find_element(By.ID, "mq-across-count").text == "3,000"
    assert "recipient domain 'oops.test'" in browser.find_element(By.ID, "mq-across").text
    assert "Are you sure you want to cancel these 3000 queued messages?" in browser.find_element(By.ID, "content").text
    assert_no_sideways_scroll(browser)
    shoot(browser, shots, "admin-queue-cancel-filter")
    assert store.count() == MISTAKE + 3
    started = time.monotonic()
    wait_for_new_page(browser, browser.find_element(By.ID, "mq-confirm"))
    took = time.monotonic() - started
    print(f"admin: {MISTAKE} items cancelled in one action on {type(store).__name__} in {took:.1f} s")
    assert any(f"{MISTAKE} queued messages cancelled" in m for m in messages(browser)), messages(browser)
    assert {i.id for i in store.list(limit=100)} == {i.id for i in keep}
    assert all(store.get(item.id) is None for item in mistake[:: MISTAKE // 30])

    open_page(browser, live_server.url + LIST_PATH + "?domain=oops.test")
    assert browser.find_element(By.ID, "mq-empty").text == "No queued message matches these filters."
