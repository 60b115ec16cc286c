"""A real fastlog-server for the group tests, tuned so groups form and fail over fast:
short initial rebalance delay, short minimum session timeout, few offsets partitions."""

import pytest

from tests.server.group.clients import GROUP_OVERRIDES, GroupBroker


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    b = GroupBroker(tmp_path_factory.mktemp("groups") / "data", overrides=GROUP_OVERRIDES)
    b.start()
    yield b
    if b.alive():
        b.stop()
