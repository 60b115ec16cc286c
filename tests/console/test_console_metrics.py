"""The web console's broker charts from a broker's own /metrics (--metrics-url): bytes and
messages in per second follow what is produced; a URL that does not answer is reported on
the charts page, not an error."""

import json
import time

from fastlog.client import SyncAdmin, SyncProducer
from fastlog.testing import BrokerProcess, ConsoleProcess
from tests.server.scrape import http_overrides


def _charts(console) -> dict:
    return json.loads(console.get("/charts/data")[1])


def test_broker_metrics_are_charted(tmp_path, closed_port):
    props, port = http_overrides()
    url = f"http://127.0.0.1:{port}/metrics"
    dead = f"http://127.0.0.1:{closed_port}/metrics"
    console = None
    with BrokerProcess(tmp_path / "data", overrides=props) as broker:
        try:
            console = ConsoleProcess(broker.bootstrap, "--sample-interval", "1",
                                     "--metrics-url", url, "--metrics-url", dead).start()
            with SyncAdmin(broker.bootstrap) as admin:
                admin.create_topic("metered", 1, 1)
            deadline = time.monotonic() + 20
            data = {}
            with SyncProducer(broker.bootstrap) as producer:
                while time.monotonic() < deadline:
                    for f in [producer.send("metered", b"x" * 100) for _ in range(50)]:
                        f.result(30)
                    data = _charts(console)
                    if any(data["brokers"][url]["bytes_in"][1:]):
                        break
                    time.sleep(0.3)
            assert any(v for v in data["brokers"][url]["bytes_in"] if v), data["brokers"][url]
            assert any(v for v in data["brokers"][url]["messages_in"] if v)
            assert not any(data["brokers"][dead]["bytes_in"])
            assert "cannot read the broker's metrics" in (data["problem"] or "")
            status, body, _ = console.get("/charts")
            assert status == 200 and "--metrics-url" not in body
        finally:
            if console is not None:
                assert console.stop() == 0
