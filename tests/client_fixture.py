"""Fixtures shared by the client and CLI tests (tests/client, tests/cli): one real
fastlog-server per test module, a topic name unique to each test and a closed port; and
run_fastlog(), the `fastlog` command run as a subprocess (also used by tests/server/group).

FASTLOG_TEST_BOOTSTRAP=host:port points the tests at an already running Kafka-compatible
broker instead (useful while developing against a peer broker); by default each module
starts its own fastlog-server (fastlog.testing.BrokerProcess). A conftest.py uses them
with `from tests.client_fixture import bootstrap, closed_port, topic_name  # noqa: F401`.
"""

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from fastlog.testing import BrokerProcess

FASTLOG = Path(sys.executable).with_name("fastlog")


def run_fastlog(*args, input: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `fastlog ARGS...` through its installed entry point (.venv/bin/fastlog, else
    `python -m fastlog.cli.main`); stdout/stderr decoded to text, bounded by timeout."""
    cmd = [str(FASTLOG)] if FASTLOG.exists() else [sys.executable, "-m", "fastlog.cli.main"]
    proc = subprocess.run(cmd + [str(a) for a in args], input=input, capture_output=True,
                          timeout=timeout)
    proc.stdout = proc.stdout.decode(errors="replace")
    proc.stderr = proc.stderr.decode(errors="replace")
    return proc


def bootstrap_fixture(overrides: dict | None = None):
    """The module-scoped `bootstrap` fixture, its broker started with `overrides` too (a
    test module that needs other settings assigns `bootstrap = bootstrap_fixture({...})`)."""

    @pytest.fixture(scope="module")
    def bootstrap(tmp_path_factory):
        external = os.environ.get("FASTLOG_TEST_BOOTSTRAP")
        if external:
            yield external
            return
        b = BrokerProcess(tmp_path_factory.mktemp("broker") / "data",
                          overrides={"num.partitions": "1",
                                     "group.initial.rebalance.delay.ms": "0",
                                     **(overrides or {})})
        b.start()
        yield b.bootstrap
        if b.alive():
            code = b.stop()
            assert code == 0, f"broker exited with {code}:\n{b.log_tail()}"

    return bootstrap


bootstrap = bootstrap_fixture()


@pytest.fixture
def topic_name(request):
    """A topic name unique to this test (tests share one broker per module)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def closed_port():
    """A local port with nothing listening on it."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
