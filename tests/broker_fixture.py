"""A real `fastlog-server` subprocess for integration tests (any test folder may use it).

    from tests.broker_fixture import BrokerProcess
    with BrokerProcess(tmp_path / "data", overrides={"num.partitions": "3"}) as b:
        b.bootstrap          # "127.0.0.1:<port>"
        b.restart()          # SIGTERM + start again on the same port and data
        b.kill()             # SIGKILL (crash), then b.start() to recover

The broker listens on 127.0.0.1 port 0 on its first start (the kernel picks a free port,
no race) and prints the bound port on stdout; restarts reuse that port. Its stderr goes
to `<data>/../broker-<n>.log`, whose tail is shown when startup fails. Every wait is
bounded. pytest fixtures `broker` (one per module) and `broker_factory` live in
tests/server/conftest.py; other folders import them from here via `broker_fixtures()`.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

_LISTENING = re.compile(r"listening on PLAINTEXT://([^:\s]+):(\d+)")


def server_command() -> list[str]:
    """The broker command: $FASTLOG_TEST_SERVER (split on spaces) when set, e.g. to run a
    wrapped or instrumented server, else the installed `fastlog-server` script."""
    custom = os.environ.get("FASTLOG_TEST_SERVER")
    if custom:
        return custom.split()
    script = Path(sys.executable).with_name("fastlog-server")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "fastlog.cli.server"]


class BrokerProcess:
    def __init__(self, data_dir, overrides: dict[str, str] | None = None, port: int = 0,
                 startup_timeout: float = 30.0):
        self.data_dir = Path(data_dir)
        self.overrides = dict(overrides or {})
        self.port = port
        self.host = "127.0.0.1"
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.log_path: Path | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        args = server_command()
        props = {"listeners": f"PLAINTEXT://{self.host}:{self.port}",
                 "log.dirs": str(self.data_dir), **self.overrides}
        for k, v in props.items():
            args += ["--override", f"{k}={v}"]
        return args

    def start(self) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        # A restart binds the port of the first start again, and while the broker was down
        # any local socket may have taken that port as its ephemeral one (a client
        # reconnecting to it can even connect to itself): such holders are short-lived,
        # so retry the bind for a bounded time instead of failing on the first try.
        deadline = time.monotonic() + self.startup_timeout
        while not self._start_once():
            if time.monotonic() >= deadline:
                self._fail(f"port {self.port} stayed in use")
            time.sleep(0.5)
        return self

    def _start_once(self) -> bool:
        """One start; False only when a restart found its port taken (retried by start)."""
        self.starts += 1
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker-{self.starts}.log"
        err = open(self.log_path, "wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=err,
                                     stdin=subprocess.DEVNULL, env=env)
        err.close()
        deadline = time.monotonic() + self.startup_timeout
        buf = b""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            m = _LISTENING.search(buf.decode(errors="replace"))
            if m:
                self.port = int(m.group(2))
                self._wait_connectable(deadline)
                return True
        if self.port != 0:
            try:
                self.proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            else:
                tail = self.log_tail()
                if f"cannot listen on {self.host}:{self.port}" in tail and "in use" in tail:
                    self.proc.stdout.close()
                    return False
        self._fail(f"broker did not start (stdout: {buf.decode(errors='replace')!r})")
        raise AssertionError("unreachable")

    def _wait_connectable(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self._fail("broker printed its port but does not accept connections")

    def _fail(self, why: str) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        tail = self.log_tail()
        pytest.fail(f"{why}; exit code {self.proc.returncode if self.proc else None}; "
                    f"log tail:\n{tail}")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except (OSError, AttributeError):
            return "(no log)"

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait: the clean shutdown path. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"broker ignored SIGTERM for {timeout}s:\n{self.log_tail()}") from None
        finally:
            if self.proc.stdout:
                self.proc.stdout.close()

    def kill(self) -> None:
        """SIGKILL: a crash; nothing after the last write reached the page cache."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.alive():
            try:
                self.stop()
            except AssertionError:
                pass


def broker_fixtures():
    """(broker, broker_factory) pytest fixtures; assign both in a conftest.py:

        from tests.broker_fixture import broker_fixtures
        broker, broker_factory = broker_fixtures()
    """

    @pytest.fixture(scope="module")
    def broker(tmp_path_factory):
        """One broker per test module (tests must use their own topic names)."""
        b = BrokerProcess(tmp_path_factory.mktemp("broker") / "data")
        b.start()
        yield b
        if b.alive():
            code = b.stop()
            assert code == 0, f"broker exited with {code}:\n{b.log_tail()}"

    @pytest.fixture
    def broker_factory(tmp_path):
        """Start extra brokers with their own overrides; all stopped at teardown."""
        made: list[BrokerProcess] = []

        def make(overrides=None, name="data") -> BrokerProcess:
            b = BrokerProcess(tmp_path / name, overrides)
            made.append(b)
            return b.start()

        yield make
        for b in made:
            if b.alive():
                b.stop()

    return broker, broker_factory
