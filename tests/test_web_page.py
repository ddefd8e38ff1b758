"""The web page of ``simulst serve`` in a real browser (headless Chromium driven by Selenium).

The server runs in-process with the real Whisper tiny.en; the page streams the JFK recording - through Chromium's
fake microphone, or as a chosen file sent at real-time pace - and the live captions must show the speech.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server_fixtures import serving
from tests.shared_assets import JFK, needs_shared
from tests.shared_assets import JFK_PHRASE as PHRASE

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

pytestmark = [
    pytest.mark.real,
    needs_shared,
    pytest.mark.skipif(not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
                       reason=f"needs {CHROMIUM} and {CHROMEDRIVER} (Debian's chromium and chromium-driver)"),
]

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service as ChromeService  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

STARTS: list[object] = []  # the start requests the page's server opened streams for


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of an in-process server with the real model (its start requests go to
    :data:`STARTS`)."""
    from simulst.models.loading import load_model
    from simulst.server.app import create_app
    from simulst.server.protocol import StartRequest
    from simulst.server.service import OpenedStream, ServerConfig, Service

    class Recording(Service):
        def open(self, start: StartRequest) -> OpenedStream:
            STARTS.append(start)
            return super().open(start)

    with serving(create_app(Recording(load_model(), ServerConfig()))) as running:
        yield running.http


TOKEN = "page-s3cret.42"


@pytest.fixture(scope="module")
def token_server_url() -> Iterator[str]:
    """An in-process server that needs the token :data:`TOKEN`."""
    from simulst.models.loading import load_model
    from simulst.server.app import create_app
    from simulst.server.service import ServerConfig, Service

    with serving(create_app(Service(load_model(), ServerConfig(token=TOKEN)))) as running:
        yield running.http


def _browser(wav: Path) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1100,900", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 f"--use-file-for-fake-audio-capture={wav}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # an explicit driver path: Selenium Manager (which would download one) is not used
    return webdriver.Chrome(service=ChromeService(executable_path=str(CHROMEDRIVER)), options=options)


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    # Chromium's fake microphone plays the 16 kHz JFK wav as it is
    driver = _browser(JFK)
    try:
        yield driver
    finally:
        driver.quit()


def _words(text: str) -> str:
    """Lower case, punctuation dropped, single spaces."""
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


def _state(driver: webdriver.Chrome) -> str:
    return driver.find_element(By.ID, "status").get_attribute("data-state") or ""


def _diagnostics(driver: webdriver.Chrome) -> str:
    """What the page shows and logged, for a failure's message."""
    logs = "\n".join(entry["message"] for entry in driver.get_log("browser"))
    return (f"status={_state(driver)!r} error={driver.find_element(By.ID, 'error').text!r} "
            f"captions={driver.find_element(By.ID, 'captions').text!r}\nbrowser log:\n{logs}")


def _open_page(driver: webdriver.Chrome, url: str) -> None:
    driver.get(url + "/")
    # the page is ready once /api/config has filled the controls
    WebDriverWait(driver, 15).until(lambda d: d.find_element(By.ID, "start").is_enabled())
    policies = [o.get_attribute("value") for o in driver.find_elements(By.CSS_SELECTOR, "#policy option")]
    assert "la-2" in policies
    assert driver.find_element(By.ID, "chunk").get_attribute("value") == "600"


def _wait_for_captions(driver: webdriver.Chrome, timeout: float) -> str:
    def shown(d: webdriver.Chrome) -> str | bool:
        if _state(d) == "error":
            raise AssertionError(f"the page reports an error: {_diagnostics(d)}")
        text = d.find_element(By.ID, "captions").text
        return text if PHRASE.search(_words(text)) else False

    try:
        return str(WebDriverWait(driver, timeout, poll_frequency=0.25).until(shown))
    except TimeoutException:
        pytest.fail(f"no caption matching {PHRASE.pattern!r} within {timeout:g} s: {_diagnostics(driver)}")


def _wait_for_state(driver: webdriver.Chrome, state: str, timeout: float) -> None:
    try:
        WebDriverWait(driver, timeout, poll_frequency=0.25).until(lambda d: _state(d) in (state, "error"))
    except TimeoutException:
        pytest.fail(f"the status did not become {state!r} within {timeout:g} s: {_diagnostics(driver)}")
    assert _state(driver) == state, _diagnostics(driver)


def _latency_ms(driver: webdriver.Chrome) -> float:
    """The last emission's lag shown by the latency readout."""
    text = driver.find_element(By.ID, "latency").text
    match = re.search(r"lag (-?\d+) ms", text)
    assert match, f"no latency number in {text!r}"
    return float(match.group(1))


def test_microphone_captions(browser: webdriver.Chrome, server_url: str, tmp_path: Path) -> None:
    """The fake microphone (Chromium plays the JFK wav) → captions, latency readout, a screenshot."""
    _open_page(browser, server_url)
    browser.find_element(By.ID, "source-mic").click()
    browser.find_element(By.ID, "start").click()
    _wait_for_state(browser, "streaming", 15)
    assert browser.find_element(By.ID, "channel-source").is_selected()
    assert not browser.find_element(By.ID, "channel-target").is_enabled()  # a transcription has one channel

    _wait_for_captions(browser, 45)
    lag = _latency_ms(browser)
    assert -1000 < lag < 30000
    browser.find_element(By.ID, "stop").click()
    _wait_for_state(browser, "finished", 20)
    assert PHRASE.search(_words(browser.find_element(By.ID, "final").text))
    assert browser.find_element(By.ID, "start").is_enabled()

    artifacts = Path(os.environ.get("SIMULST_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    screenshot = artifacts / "web_page.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.is_file() and screenshot.stat().st_size > 0


def test_file_captions(browser: webdriver.Chrome, server_url: str) -> None:
    """A chosen file, sent at real-time pace, → captions; the stream ends by itself at the file's end. The prompt
    typed in the page goes in the start message."""
    _open_page(browser, server_url)
    browser.find_element(By.ID, "file").send_keys(str(JFK))
    browser.find_element(By.ID, "prompt").send_keys("  President Kennedy's inaugural address. ")
    STARTS.clear()
    assert browser.find_element(By.ID, "source-file").is_selected()  # choosing a file selects the file input
    started = time.monotonic()
    browser.find_element(By.ID, "start").click()
    _wait_for_captions(browser, 45)
    _wait_for_state(browser, "finished", 30)
    took = time.monotonic() - started
    assert took >= 10.5, f"an 11 s file finished in {took:.1f} s: it was not sent at real-time pace"
    final = _words(browser.find_element(By.ID, "final").text)
    assert final.startswith("and so my fellow americans") and PHRASE.search(final), final
    _latency_ms(browser)
    assert [getattr(start, "prompt", None) for start in STARTS] == ["President Kennedy's inaugural address."]


def test_token_entered_in_the_page(browser: webdriver.Chrome, token_server_url: str) -> None:
    """A server with a token: the page asks for it and sends it in the websocket's subprotocol, never in the
    address; a wrong token is refused with the server's message, the right one streams."""
    _open_page(browser, token_server_url)
    field = browser.find_element(By.ID, "token")
    assert field.is_displayed() and field.get_attribute("type") == "password"
    browser.find_element(By.ID, "file").send_keys(str(JFK))
    field.send_keys("wrong-token")
    browser.find_element(By.ID, "start").click()
    _wait_for_state(browser, "error", 15)
    assert "valid token" in browser.find_element(By.ID, "error").text
    field.clear()
    field.send_keys(TOKEN + "\n")  # (Enter in the field submits nothing)
    browser.find_element(By.ID, "start").click()
    _wait_for_captions(browser, 45)
    _wait_for_state(browser, "finished", 30)
    assert PHRASE.search(_words(browser.find_element(By.ID, "final").text))
    assert browser.current_url == token_server_url + "/"  # the token never reached the address bar
    assert TOKEN not in "\n".join(entry["message"] for entry in browser.get_log("browser"))
