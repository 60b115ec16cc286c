"""The transaction coordinator (issue 20): transactional ids, their producer ids and
epochs, and the two-phase commit of their transactions.

``TransactionCoordinator(broker)`` owns the ids (start with ``await startup()``, stop with
``await shutdown()``); ``TXN_HANDLERS`` maps each transaction ApiKey to its handler for
the broker's dispatch table, and ``handle_init_transactional_producer`` answers
InitProducerId with a transactional id. Record formats of ``__transaction_state``:
schemas.py (pure, any thread); markers to partitions: markers.py. The coordinator and its
handlers run on the broker's event-loop thread only.
"""

from .apis import TXN_HANDLERS, handle_init_transactional_producer
from .coordinator import TXN_STATE_TOPIC, TransactionCoordinator

__all__ = ["TXN_HANDLERS", "TXN_STATE_TOPIC", "TransactionCoordinator",
           "handle_init_transactional_producer"]
