"""fastlog: a Kafka-wire-compatible partitioned commit-log broker.

The package is layered (see DESIGN in the README): compiled codecs and indexes at the
bottom (``_codec``, ``_index``), storage in ``server.log``, the wire protocol in
``protocol``, the network in ``_net``, and the broker's request handling in ``server``.
"""

__version__ = "0.1.0"
