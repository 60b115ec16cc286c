"""A real fastlog-server for the group tests, tuned so groups form and fail over fast:
short initial rebalance delay, short minimum session timeout, few offsets partitions."""

import sys

import pytest

from tests.broker_fixture import BrokerProcess

GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "200",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "4",
    "num.partitions": "4",
}


class GroupBroker(BrokerProcess):
    def command(self) -> list[str]:
        args = [sys.executable, "-m", "tests.server.group._server_with_groups"]
        props = {"listeners": f"PLAINTEXT://{self.host}:{self.port}",
                 "log.dirs": str(self.data_dir), **self.overrides}
        for k, v in props.items():
            args += ["--override", f"{k}={v}"]
        return args


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    b = GroupBroker(tmp_path_factory.mktemp("groups") / "data", overrides=GROUP_OVERRIDES)
    b.start()
    yield b
    if b.alive():
        b.stop()
