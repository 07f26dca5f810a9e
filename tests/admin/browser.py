"""Small Selenium helpers for the admin's browser tests: log in, submit and wait, read the list."""

from __future__ import annotations

from typing import Any

from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

TIMEOUT = 15


def _replaced(old: WebElement) -> Any:
    """A wait condition: `old` no longer belongs to the document.

    Selenium's `staleness_of` knows only StaleElementReferenceException; while the
    page is being replaced, ChromeDriver may instead answer "Node with given id does
    not belong to the document" (a plain WebDriverException), which means the same.
    """

    def check(_: WebDriver) -> bool:
        try:
            old.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc):
                return True
            raise
        return False

    return check


def wait_for_new_page(browser: WebDriver, click: WebElement) -> None:
    """Click `click` and wait until the page it leads to has replaced this one."""
    old = browser.find_element(By.TAG_NAME, "html")
    click.click()
    WebDriverWait(browser, TIMEOUT, poll_frequency=0.02).until(_replaced(old))
    WebDriverWait(browser, TIMEOUT, poll_frequency=0.02).until(
        lambda b: b.execute_script("return document.readyState") == "complete"
    )


def open_page(browser: WebDriver, url: str) -> None:
    browser.get(url)
    WebDriverWait(browser, TIMEOUT, poll_frequency=0.02).until(
        lambda b: b.execute_script("return document.readyState") == "complete"
    )


def log_in(browser: WebDriver, base_url: str, username: str, password: str, next_path: str) -> None:
    browser.delete_all_cookies()
    open_page(browser, f"{base_url}/admin/login/?next={next_path}")
    browser.find_element(By.ID, "id_username").send_keys(username)
    browser.find_element(By.ID, "id_password").send_keys(password)
    wait_for_new_page(browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))
    assert next_path in browser.current_url, browser.current_url


def listed(browser: WebDriver) -> set[str]:
    """The item ids the list page shows."""
    return {row.get_attribute("data-item") or "" for row in browser.find_elements(By.CSS_SELECTOR, "tr[data-item]")}


def messages(browser: WebDriver) -> list[str]:
    return [li.text for li in browser.find_elements(By.CSS_SELECTOR, "ul.messagelist li")]


def screenshot(
    browser: WebDriver, path: Any, *, width: int = 1440, max_height: int = 3000, fold_sidebar: bool = True
) -> None:
    """A PNG of the page's content, the admin's navigation sidebar folded away (then unfolded again) unless not."""
    toggle = browser.find_elements("id", "toggle-nav-sidebar")
    size = browser.get_window_size()
    folded = (
        fold_sidebar
        and bool(toggle)
        and toggle[0].is_displayed()
        and bool(browser.execute_script("return document.getElementById('main').classList.contains('shifted')"))
    )
    if folded:
        toggle[0].click()
    browser.set_window_size(width, 900)
    # the page's height, and what the window adds around the page (headless Chromium's is not nothing)
    height, chrome = browser.execute_script(
        "window.scrollTo(0, 0);return [document.documentElement.scrollHeight, window.outerHeight - window.innerHeight];"
    )
    browser.set_window_size(width, min(max(int(height), 500), max_height) + int(chrome))
    browser.execute_script("window.scrollTo(0, 0);")
    try:
        browser.save_screenshot(str(path))
    finally:
        browser.set_window_size(size["width"], size["height"])
        if folded:
            browser.find_element("id", "toggle-nav-sidebar").click()
