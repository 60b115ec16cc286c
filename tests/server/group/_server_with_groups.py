"""Run fastlog-server with the group coordinator wired in, whether or not the broker has
wired it itself yet (then this adds nothing): KafkaApis gets GROUP_HANDLERS for keys it
lacks and BrokerServer.startup() starts a GroupCoordinator if it has none.

Used by tests/server/group/conftest.py as the broker command: python -m this module."""

import sys

from fastlog.cli import server as cli_server
from fastlog.server import apis, broker
from fastlog.server.group import GROUP_HANDLERS, GroupCoordinator

_orig_init = apis.KafkaApis.__init__
_orig_startup = broker.BrokerServer.startup


def _init(self, b):
    _orig_init(self, b)
    for key, handler in GROUP_HANDLERS.items():
        self.handlers.setdefault(key, handler)


async def _startup(self):
    await _orig_startup(self)
    if self.group_coordinator is None:
        self.group_coordinator = GroupCoordinator(self)
        await self.group_coordinator.startup()


apis.KafkaApis.__init__ = _init
broker.BrokerServer.startup = _startup

if __name__ == "__main__":
    sys.exit(cli_server.main())
