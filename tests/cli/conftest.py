"""Fixtures for the `fastlog` CLI tests: a real fastlog-server per module and a unique
topic name (tests/client_fixture.py; FASTLOG_TEST_BOOTSTRAP=host:port uses an already
running broker instead), and `fastlog` itself run as a subprocess through its installed
entry point (.venv/bin/fastlog).
"""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client_fixture import bootstrap, topic_name  # noqa: F401 - fixtures

FASTLOG = Path(sys.executable).with_name("fastlog")


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
