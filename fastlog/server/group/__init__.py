"""The group coordinator (issue 5): consumer groups and committed offsets.

``GroupCoordinator(broker)`` owns the groups (start with ``await startup()``, stop with
``await shutdown()``); ``GROUP_HANDLERS`` maps each group ApiKey to its handler for the
broker's dispatch table. Record formats of ``__consumer_offsets``: schemas.py (pure, any
thread); where they are stored: offsets.py. The coordinator and its handlers run on the
broker's event-loop thread only.
"""

from .apis import GROUP_HANDLERS
from .coordinator import GroupCoordinator

__all__ = ["GROUP_HANDLERS", "GroupCoordinator"]
