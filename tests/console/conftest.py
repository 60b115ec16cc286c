"""Fixtures for the web console's tests: a real fastlog-server per module
(tests/client_fixture.py), `fastlog console` itself as a subprocess against it
(fastlog.testing.ConsoleProcess), and a
headless Chromium (Debian's, driven by Playwright) for the browser tests.

    console_factory("--read-only") -> ConsoleProcess   (stopped at teardown)
    console.url("/topics")                              "http://127.0.0.1:PORT/topics"
"""

import pytest

from fastlog.testing import ConsoleProcess
from tests.client_fixture import bootstrap, closed_port, topic_name  # noqa: F401
from tests.zk_fixture import zk_server_fixture

zk_server = zk_server_fixture()

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def console_factory(bootstrap):  # noqa: F811 - the fixture imported above
    made: list[ConsoleProcess] = []

    def make(*args: str, bootstrap_server: str | None = None) -> ConsoleProcess:
        c = ConsoleProcess(bootstrap_server or bootstrap, "--sample-interval", "1", *args)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        code = c.stop()
        assert code in (None, 0), f"console exited with {code}"


@pytest.fixture(scope="module")
def console(console_factory):
    return console_factory()


@pytest.fixture(scope="module")
def read_only_console(console_factory):
    return console_factory("--read-only")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.set_default_timeout(20000)
    p = context.new_page()
    p.on("dialog", lambda d: d.accept())
    yield p
    context.close()
