"""Fixtures for the `fastlog` CLI tests: a real fastlog-server per module, and `fastlog`
itself run as a subprocess through its installed entry point (.venv/bin/fastlog).

FASTLOG_TEST_BOOTSTRAP=host:port uses an already running broker instead.
"""

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.broker_fixture import BrokerProcess

FASTLOG = Path(sys.executable).with_name("fastlog")


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    external = os.environ.get("FASTLOG_TEST_BOOTSTRAP")
    if external:
        yield external
        return
    b = BrokerProcess(tmp_path_factory.mktemp("broker") / "data",
                      overrides={"num.partitions": "1",
                                 "group.initial.rebalance.delay.ms": "0"})
    b.start()
    yield b.bootstrap
    if b.alive():
        code = b.stop()
        assert code == 0, f"broker exited with {code}:\n{b.log_tail()}"


@pytest.fixture
def topic_name(request):
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def fastlog():
    """fastlog(*args, input=b"") -> CompletedProcess (stdout/stderr as text), 60 s bound."""
    def run(*args, input: bytes = b"", timeout: float = 60):
        cmd = [str(FASTLOG)] if FASTLOG.exists() else [sys.executable, "-m", "fastlog.cli.main"]
        proc = subprocess.run(cmd + [str(a) for a in args], input=input, capture_output=True,
                              timeout=timeout)
        proc.stdout = proc.stdout.decode(errors="replace")
        proc.stderr = proc.stderr.decode(errors="replace")
        return proc
    return run


@pytest.fixture
def closed_port():
    """A local port with nothing listening on it."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
