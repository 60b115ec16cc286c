"""`fastlog-server` honours SIGTERM while it is still starting (here: still reaching a
ZooKeeper that does not answer), instead of after its connection timeout."""

import signal
import subprocess
import sys
import time
from pathlib import Path

SERVER = Path(sys.executable).with_name("fastlog-server")


def test_sigterm_while_reaching_zookeeper_stops_the_server(tmp_path):
    proc = subprocess.Popen(
        [str(SERVER), "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", f"log.dirs={tmp_path / 'data'}",
         "--override", "zookeeper.connect=127.0.0.1:1",          # nothing listens there
         "--override", "zookeeper.connection.timeout.ms=600000"],  # would wait 10 minutes
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        # Well into the connection attempts: its first try is logged (a fixed sleep can
        # end before a loaded machine has even imported the server).
        deadline = time.monotonic() + 60
        line = ""
        while "Connecting to 127.0.0.1" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "the server exited before reaching ZooKeeper"
        assert "Connecting to 127.0.0.1" in line
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert proc.returncode == 0, err
    assert out.strip() == "fastlog-server: stopped before it started serving"
    assert "Traceback" not in err
