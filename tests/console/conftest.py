"""Fixtures for the web console's tests: a real fastlog-server per module
(tests/client_fixture.py), `fastlog console` itself as a subprocess against it, and a
headless Chromium (Debian's, driven by Playwright) for the browser tests.

    console_factory("--read-only") -> ConsoleProcess   (stopped at teardown)
    console.url("/topics")                              "http://127.0.0.1:PORT/topics"
"""

import re
import select
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.client_fixture import bootstrap, topic_name  # noqa: F401
from tests.zk_fixture import zk_server_fixture

zk_server = zk_server_fixture()

CHROMIUM = "/usr/bin/chromium"
START_TIMEOUT_S = 30.0
CSRF = re.compile(r'name=csrf value="([^"]+)"')


class ConsoleProcess:
    """`python -m fastlog.cli.main console --port 0 ...` and the URL it prints."""

    def __init__(self, bootstrap_server: str, *args: str):
        self.cmd = [sys.executable, "-m", "fastlog.cli.main", "console",
                    "--bootstrap-server", bootstrap_server, "--port", "0", *args]
        self.proc: subprocess.Popen | None = None
        self.base = ""

    def start(self) -> "ConsoleProcess":
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        line = b""
        while time.monotonic() < deadline and self.proc.poll() is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                break
        found = re.search(rb"at (http://\S+?)/\s*$", line)
        if not found:
            self.stop()
            err = self.proc.stderr.read().decode(errors="replace")
            raise AssertionError(f"console did not start: {line!r} {err}")
        self.base = found.group(1).decode()
        return self

    def url(self, path: str = "/", **query) -> str:
        q = urllib.parse.urlencode(query)
        return self.base + path + (f"?{q}" if q else "")

    def get(self, path: str = "/", **query) -> tuple[int, str, dict]:
        """(status, body, headers) of a GET, bounded by 30 s."""
        return _open(urllib.request.Request(self.url(path, **query)))

    def post(self, path: str, fields: dict) -> tuple[int, str, dict]:
        """(status, body, headers) of a form POST; redirects are not followed."""
        data = urllib.parse.urlencode(fields).encode()
        return _open(urllib.request.Request(self.url(path), data=data, method="POST"))

    def csrf(self) -> str:
        """The per-process token the forms carry (read from the topics page)."""
        _, body, _ = self.get("/topics")
        found = CSRF.search(body)
        assert found, "no form with a CSRF token on the topics page"
        return found.group(1)

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def _open(request) -> tuple[int, str, dict]:
    try:
        with _opener.open(request, timeout=30) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


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
