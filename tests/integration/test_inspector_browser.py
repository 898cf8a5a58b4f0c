"""The web inspector end to end in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``).

Selenium drives ``/usr/bin/chromium`` through ``/usr/bin/chromedriver`` (override with
``CHROMIUM_BINARY`` / ``CHROMEDRIVER``); nothing is downloaded (``SE_OFFLINE=true``). Without them
the tests are skipped with the reason -- except when ``CI=true``, where that is a failure.

The first test saves a screenshot of a user's page to ``benchmarks/results/inspector.png`` and
checks that it really rendered (dark header bar, light page, many distinct colours from text).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.inspector import InspectorServer, make_server
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
SCREENSHOT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "inspector.png"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)
EVERY = MemoryFilter(statuses=("active", "superseded", "archived", "deleted"))


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"CI=true but the browser test cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def _binaries() -> tuple[str, str]:
    chromium = os.environ.get("CHROMIUM_BINARY") or shutil.which("chromium") or "/usr/bin/chromium"
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not Path(chromium).exists():
        _unavailable(f"no Chromium at {chromium} (apt-get install chromium chromium-driver)")
    if not Path(driver).exists():
        _unavailable(f"no chromedriver at {driver} (apt-get install chromium-driver)")
    return chromium, driver


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium, driver = _binaries()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed (pip install 'hybrid-memory[dev]')")
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager fetch anything
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    drv = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    drv.set_page_load_timeout(30)
    try:
        yield drv
    finally:
        drv.quit()


@pytest.fixture(scope="module")
def mem(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HybridMemory]:
    path = tmp_path_factory.mktemp("inspector") / "memory.db"
    # The story runs three days past the frozen clock: allow that much future skew (writer.max_future_skew_seconds).
    cfg = HybridMemoryConfig(writer={"max_future_skew_seconds": 4 * 86400})
    m = HybridMemory(store=LocalStore(path), embedder=HashingEmbedder(), trace=True, clock=lambda: T0, config=cfg)
    m.add_turn("alice", "s1", "user", "Remember: I am allergic to peanuts, call me at 13812345678", timestamp=T0)
    m.add_turn("alice", "s1", "user", "I prefer green tea in the morning", timestamp=T0)
    m.add_turn("alice", "s1", "assistant", "Noted, no peanuts and green tea.", timestamp=T0)
    m.build_context("peanut allergy", user_id="alice", session_id="s1", now=T0 + timedelta(days=1))
    m.remember("alice", "I live in Berlin", importance=0.8, timestamp=T0, tags=("home",))
    m.remember("alice", "I moved to Munich, I live in Munich now", importance=0.8, timestamp=T0 + timedelta(days=3))
    m.remember("alice", "Alice runs the Berlin marathon every September", importance=0.6, timestamp=T0)
    m.add_turn("李雷", "c1", "user", "记住：我喜欢喝乌龙茶，不要加糖。", timestamp=T0)
    m.remember("李雷", "下个月15号我要去东京出差，预算一万元", importance=0.7, timestamp=T0, session_id="c1")
    m.build_context("喝什么茶？", user_id="李雷", session_id="c2", now=T0 + timedelta(days=2))
    yield m
    m.close()


def _server(mem: HybridMemory, allow_edit: bool) -> Iterator[InspectorServer]:
    server = make_server(mem, port=0, allow_edit=allow_edit)
    server.serve_in_thread()
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def ro(mem: HybridMemory) -> Iterator[InspectorServer]:
    yield from _server(mem, allow_edit=False)


@pytest.fixture
def rw(mem: HybridMemory) -> Iterator[InspectorServer]:
    yield from _server(mem, allow_edit=True)


def _by(kind: str) -> Any:
    from selenium.webdriver.common.by import By

    return getattr(By, kind)


def _click_and_wait(browser: Any, element: Any) -> None:
    """Click something that navigates, and wait until the new page has replaced the old one.

    The old document is marked from JavaScript; the wait ends when the window holds a complete document
    without the mark. Chromium answers a query that falls between the two documents with a generic
    ``WebDriverException`` (e.g. "Node with given id does not belong to the document"), not always with
    ``StaleElementReferenceException``, so the poll retries any WebDriver error until the timeout.
    """
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    browser.execute_script("document.__hmOldPage = true;")
    element.click()
    WebDriverWait(browser, 15, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script("return document.readyState === 'complete' && !document.__hmOldPage")
    )


def _rows(browser: Any, table_class: str) -> list[list[str]]:
    rows = browser.find_elements(_by("CSS_SELECTOR"), f"table.{table_class} tbody tr")
    return [[td.text for td in r.find_elements(_by("TAG_NAME"), "td")] for r in rows]


def test_home_page_renders_and_screenshot(browser: Any, ro: InspectorServer) -> None:
    browser.get(ro.url)
    assert browser.title == "Users · hybrid-memory inspector"
    users = {r[0]: r for r in _rows(browser, "users")}
    assert set(users) == {"alice", "李雷"}
    assert users["alice"][1:6] == ["4", "1", "0", "0", "5"]  # active, superseded, archived, deleted, total
    assert browser.find_element(_by("CSS_SELECTOR"), "header .mode").text == "read-only"

    _click_and_wait(browser, browser.find_element(_by("LINK_TEXT"), "alice"))
    _click_and_wait(browser, browser.find_element(_by("LINK_TEXT"), "all"))
    assert browser.title == "User alice · hybrid-memory inspector"
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOT))

    from PIL import Image

    with Image.open(SCREENSHOT) as raw:
        img = raw.convert("RGB")
        width, height = img.size
        assert (width, height) == (1280, browser.execute_script("return window.innerHeight"))
        header = img.getpixel((5, 5))
        page = img.getpixel((width // 2, height - 5))
        assert isinstance(header, tuple) and isinstance(page, tuple)
        assert sum(header) < 200, f"header bar should be dark, got {header}"
        assert sum(page) > 600, f"page background should be light, got {page}"
        colours = img.getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 100  # anti-aliased text, badges, links: not a blank page


def test_user_page_memories_chain_review_queue_and_sessions(browser: Any, ro: InspectorServer) -> None:
    browser.get(ro.url + "user?" + urlencode({"u": "alice", "status": "all"}))
    memories = _rows(browser, "memories")
    contents = [r[-1] for r in memories]
    assert "Remember: I am allergic to peanuts, call me at [PHONE]" in contents
    assert any(c.startswith("I live in Berlin") and "superseded" in c for c in contents)
    chain = browser.find_element(_by("CSS_SELECTOR"), ".chain").text
    assert chain.index("I live in Berlin") < chain.index("I moved to Munich")
    review = _rows(browser, "review")
    assert review and review[0][0] == "superseded" and "declared change" in review[0][3]
    sessions = {r[0]: r for r in _rows(browser, "sessions")}
    assert sessions["s1"][1] == "4" and "(no session)" in sessions


def test_search_shows_score_components(browser: Any, ro: InspectorServer) -> None:
    browser.get(ro.url + "user?u=alice")
    box = browser.find_element(_by("CSS_SELECTOR"), "form.search input[name=q]")
    box.send_keys("Munich")
    alpha = browser.find_element(_by("CSS_SELECTOR"), "form.search input[name=alpha]")
    alpha.send_keys("0")
    _click_and_wait(browser, browser.find_element(_by("CSS_SELECTOR"), "form.search button"))
    heads = [th.text for th in browser.find_elements(_by("CSS_SELECTOR"), "table.results th")]
    assert heads == ["#", "score", "relevance", "bm25", "cosine", "importance", "recency", "heat", "status", "memory"]
    top = _rows(browser, "results")[0]
    assert top[-1] == "I moved to Munich, I live in Munich now"
    assert float(top[3]) > 0  # BM25 matched (alpha 0 = pure keyword)
    assert float(top[2]) == 1.0  # best relevance after relative score fusion
    assert "alpha 0" in browser.find_element(_by("CSS_SELECTOR"), "div.card.muted").text


def test_memory_page_follows_the_superseded_chain(browser: Any, ro: InspectorServer, mem: HybridMemory) -> None:
    berlin = next(r for r in mem.store.list("alice", filter=EVERY) if r.content == "I live in Berlin")
    browser.get(ro.url + "memory?" + urlencode({"u": "alice", "id": berlin.id}))
    assert browser.find_element(_by("CSS_SELECTOR"), "pre.content").text == "I live in Berlin"
    assert not browser.find_elements(_by("CSS_SELECTOR"), "form.edit")  # read-only
    _click_and_wait(browser, browser.find_element(_by("PARTIAL_LINK_TEXT"), "I moved to Munich"))
    assert browser.find_element(_by("CSS_SELECTOR"), "pre.content").text == "I moved to Munich, I live in Munich now"
    assert "v2" in browser.find_element(_by("CSS_SELECTOR"), ".chain").text


def test_replay_shows_candidates_cuts_and_fused_text(browser: Any, ro: InspectorServer) -> None:
    browser.get(ro.url + "user?u=alice")
    _click_and_wait(browser, browser.find_element(_by("LINK_TEXT"), "s1"))
    steps = browser.find_elements(_by("CSS_SELECTOR"), ".step")
    assert [s.text.split()[1] for s in steps] == ["add_turn", "add_turn", "add_turn", "build_context"]
    cands = _rows(browser, "candidates")
    assert cands and all(r[0] == "dropped" and r[-1] == "duplicates the short-term window" for r in cands)
    browser.get(ro.url + "replay?" + urlencode({"u": "李雷", "s": "c2"}))
    cands = _rows(browser, "candidates")
    assert cands[0][0] == "injected" and "乌龙茶" in cands[0][8]
    fused = browser.find_element(_by("CSS_SELECTOR"), "pre.fused").text
    assert fused.startswith("<memory-context>") and "乌龙茶" in fused
    _click_and_wait(browser, browser.find_element(_by("LINK_TEXT"), "JSON export"))
    data = json.loads(browser.find_element(_by("TAG_NAME"), "body").text)
    assert data[0]["kind"] == "build_context" and data[0]["candidates"][0]["outcome"] == "injected"


def test_editing_and_deleting_when_allowed(browser: Any, rw: InspectorServer, mem: HybridMemory) -> None:
    target = next(r for r in mem.store.list("alice") if r.content.startswith("Alice runs the Berlin marathon"))
    browser.get(rw.url + "memory?" + urlencode({"u": "alice", "id": target.id}))
    assert browser.find_element(_by("CSS_SELECTOR"), "header .mode").text == "editing allowed"
    imp = browser.find_element(_by("CSS_SELECTOR"), "form.edit input[name=importance]")
    imp.clear()
    imp.send_keys("0.25")
    tags = browser.find_element(_by("CSS_SELECTOR"), "form.edit input[name=tags]")
    tags.send_keys("sport, running")
    _click_and_wait(browser, browser.find_element(_by("CSS_SELECTOR"), "form.edit button"))
    grid = browser.find_element(_by("CSS_SELECTOR"), ".grid").text
    assert "0.25" in grid and "sport, running" in grid
    stored = mem.store.get("alice", [target.id])[0]
    assert stored.importance == 0.25 and stored.tags == ("sport", "running")

    _click_and_wait(browser, browser.find_element(_by("CSS_SELECTOR"), "form.delete button"))
    assert browser.title == "User alice · hybrid-memory inspector"
    assert mem.store.get("alice", [target.id]) == []
    assert all("marathon" not in r[-1] for r in _rows(browser, "memories"))
