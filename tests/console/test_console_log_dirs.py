"""The console's overview lists each broker's log dirs: a real broker with two dirs, one on
a tmpfs made read-only while it runs (tests/tmpfs_fixture.py), so a write there fails and
the dir goes offline; the overview then shows that dir's error and the other dir online,
and the topics page still shows the sizes the online dir holds."""

import re

from fastlog.client import SyncAdmin, SyncProducer
from fastlog.protocol import Errors
from fastlog.testing import BrokerProcess, ConsoleProcess
from tests.console.test_console_http import _cells
from tests.server.wire import Wire, batch, produce
from tests.tmpfs_fixture import read_only, small_tmpfs


def test_an_offline_log_dir_shows_its_error(tmp_path):
    with small_tmpfs(tmp_path / "disk", "20m") as disk:
        good = tmp_path / "data"
        broker = BrokerProcess(good, {"offsets.topic.num.partitions": "1",
                                      "log.dirs": f"{good},{disk}"})
        with broker:
            with SyncAdmin(broker.bootstrap) as admin:
                admin.create_topic("spread", 2, 1, {"segment.bytes": "100"})
            failing = 0 if (disk / "spread-0").is_dir() else 1
            console = ConsoleProcess(broker.bootstrap).start()
            w = Wire(broker)
            try:
                assert produce(w, "spread", batch([b"x" * 200]), partition=failing).error_code == 0
                with read_only(disk):
                    # The next batch needs a new segment's file in the read-only dir: EROFS.
                    r = produce(w, "spread", batch([b"x" * 200]), partition=failing)
                    assert r.error_code == Errors.KAFKA_STORAGE_ERROR
                    with SyncProducer(broker.bootstrap) as producer:
                        producer.send("spread", b"y" * 200, partition=1 - failing).result(30)
                    status, body, _ = console.get("/")
                    assert status == 200
                    dirs = {row[1]: row for row in _cells(body, "log-dirs")}
                    assert set(dirs) == {str(good), str(disk)}
                    assert dirs[str(disk)][2] == "offline (KAFKA_STORAGE_ERROR)"
                    assert dirs[str(disk)][3:5] == ["-", "-"]
                    assert dirs[str(good)][2] == "online"
                    status, body, _ = console.get("/topics", q="spread")
                    ((_, _, _, size, _, _),) = _cells(body, "topics")
                    assert status == 200 and re.fullmatch(r"\d+ B", size), size
            finally:
                w.close()
                assert console.stop() in (None, 0)
