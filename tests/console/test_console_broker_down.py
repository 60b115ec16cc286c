"""The web console while its broker is down: each page is one sentence saying the cluster
did not answer (never a traceback, the console keeps serving), the charts report the
failed samples, and everything is back once the broker is."""

import html
import json
import re
import time

from fastlog.testing import BrokerProcess, ConsoleProcess


def test_pages_while_the_broker_is_down_and_after(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    console = None
    try:
        console = ConsoleProcess(broker.bootstrap, "--sample-interval", "1").start()
        assert console.get("/")[0] == 200
        broker.stop()
        for path in ("/", "/topics", "/groups", "/topics/t/messages"):
            status, body, _ = console.get(path)
            assert status == 502, (path, status)
            sentence = html.unescape(re.search(r'role="alert">(.*?)</p>', body).group(1))
            assert sentence.startswith("The cluster refused or did not answer: ")
            assert "Traceback" not in body
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            problem = json.loads(console.get("/charts/data")[1])["problem"]
            if problem:
                break
            time.sleep(0.3)
        assert problem and "127.0.0.1" in problem
        broker.start()
        deadline = time.monotonic() + 30
        status = 0
        while time.monotonic() < deadline and status != 200:
            status = console.get("/")[0]
            time.sleep(0.3)
        assert status == 200, "the console did not recover once the broker was back"
    finally:
        if console is not None:
            assert console.stop() == 0
        if broker.alive():
            broker.stop()
