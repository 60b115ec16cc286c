"""The group coordinator (issue 5): consumer groups and committed offsets.

``GroupCoordinator(broker)`` owns the groups (start with ``await startup()``, stop with
``await shutdown()``); ``GROUP_HANDLERS`` maps each group ApiKey to its handler for the
broker's dispatch table.
"""

from .apis import GROUP_HANDLERS
from .coordinator import GroupCoordinator

__all__ = ["GROUP_HANDLERS", "GroupCoordinator"]
