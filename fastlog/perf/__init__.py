# fastlog/perf: the load-testing harness behind `fastlog perf produce|consume|e2e`.
#
# Owns: workload generation (payloads, keys, pacing), the drivers for our own client and
# for librdkafka (confluent-kafka), latency histograms and the summary (text, JSON, plot).
# Everything runs in the calling process on one thread (our client: one asyncio loop;
# confluent: librdkafka's own threads plus the caller's poll loop). perf/compare.py runs
# these commands as subprocesses against several brokers.
"""fastlog's load-testing harness (see `fastlog perf --help`)."""
