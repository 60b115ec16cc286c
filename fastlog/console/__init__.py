"""fastlog's web console: `fastlog console --bootstrap-server HOST:PORT`.

A small web application (aiohttp, server-rendered HTML, a little JavaScript, no CDN) over
any Kafka-compatible cluster. It is a client: it talks to the cluster only through
fastlog.client (Admin, Producer, Consumer) and, when given, the brokers' /metrics.

- ``app``: the aiohttp application, its pages and its guards (read-only, CSRF, errors);
- ``pages``: HTML escaping, the page layout and the record value formats;
- ``sampler``: the periodic end-offset, committed-offset and /metrics samples behind the
  charts and the topics' messages per second;
- ``static/``: the stylesheet, the script and the vendored chart library (uPlot).
"""
