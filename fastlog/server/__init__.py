"""The broker: configuration (``config``), lifecycle (``broker``), request handlers behind
one dispatch table (``apis``), partitions, replication and purgatory (``replica_manager``,
``partition``, ``replica_fetcher``, ``purgatory``), idempotent-producer state
(``producer_state``), the metadata interface (``metadata``), consumer groups (``group/``)
and storage (``log/``).

Everything here that touches broker state runs on the broker's one asyncio API loop
thread; only fsyncs and file deletions go to the storage layer's background worker.
"""
