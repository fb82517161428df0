"""Selenium over Debian's chromium-driver, as the console's browser tests and bench drive it.

The driver and browser are the machine's (`/usr/bin/chromedriver`, `chromium`), named
explicitly so Selenium never tries to download one. The browser's console log and its network
log (the `performance` log's `Network.requestWillBeSent`) are kept, to check that the page logs
no error and requests nothing from another origin.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from tests.support import chromium_path


def chromedriver_path() -> str:
    """The driver the browser tests use; skipped without it, except in CI."""
    found = shutil.which("chromedriver") or (
        "/usr/lib/chromium/chromedriver"
        if os.path.exists("/usr/lib/chromium/chromedriver")
        else None
    )
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromedriver is not installed (.ci/run installs chromium-driver)")
        pytest.skip("chromedriver is not installed (apt-get install chromium-driver)")
    return found


@contextmanager
def chrome(width: int = 1400, height: int = 1000) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = chromium_path()
    for argument in (
        "--headless=new",
        "--no-sandbox",  # it runs as root here
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(chromedriver_path()))
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: webdriver.Chrome, what: str, condition: Callable[[], Any], timeout: float = 10):
    """Poll `condition` in the page until it is truthy; fail naming `what`."""
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(
        lambda _: condition(), message=f"the console never showed {what}"
    )


def open_console(driver: webdriver.Chrome, url: str, key: str) -> None:
    """Load /console, type the key into the field labelled API key, press Open."""
    driver.get(f"{url}/console")
    label = driver.find_element(By.XPATH, "//label[normalize-space()='API key']")
    field = driver.find_element(By.ID, label.get_attribute("for"))
    assert field.get_attribute("type") == "password"
    field.send_keys(key)
    driver.find_element(By.XPATH, "//button[normalize-space()='Open']").click()


def region(driver: webdriver.Chrome, name: str) -> WebElement:
    return driver.find_element(By.CSS_SELECTOR, f"section[aria-label='{name}']")


def errors_logged(driver: webdriver.Chrome) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def requested(driver: webdriver.Chrome) -> list[str]:
    """Every URL the page asked for since the last call (the network log is read once)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls
