# fastlog/client/sync.py: blocking wrappers around the asyncio producer, consumer, admin.
#
# Each wrapper owns a private event loop running in a daemon thread; the async object is
# created and used only on that loop, and every public method submits a coroutine to it
# and blocks the calling thread on the result. Methods may be called from any thread (one
# call at a time per wrapper is the expected use; concurrent calls are serialised by the
# loop). close() stops the loop and joins its thread.
# run_async is the other way to call the client from blocking code (the command line's
# tools, the perf harness): one coroutine on a fresh loop of the calling thread.

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading

from fastlog.client import errors


def run_async(coro):
    """Run a coroutine on a fresh event loop (uvloop when available) and return its result."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


class _LoopThread:
    """An event loop running forever in its own daemon thread."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro, timeout: float | None = None):
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise errors.ClientTimeout(f"operation did not complete within {timeout:g} s") \
                from None

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class _SyncWrapper:
    """Calls through to an async object on a private loop: coroutines are awaited there."""

    _factory = None

    def __init__(self, *args, **kwargs):
        self._runner = _LoopThread(type(self).__name__)

        async def make():
            obj = type(self)._factory(*args, **kwargs)
            await obj.start()
            return obj

        try:
            self._obj = self._runner.run(make())
        except BaseException:
            self._runner.stop()
            raise

    def _call(self, name, *args, **kwargs):
        attr = getattr(self._obj, name)

        async def call():
            result = attr(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result

        return self._runner.run(call())

    def __getattr__(self, name):
        attr = getattr(self._obj, name)
        if not callable(attr):
            return attr
        return lambda *a, **kw: self._call(name, *a, **kw)

    def close(self) -> None:
        if self._runner.loop.is_closed():
            return
        try:
            self._runner.run(self._obj.close())
        finally:
            self._runner.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _producer():
    from fastlog.client.producer import Producer
    return Producer


class SyncProducer(_SyncWrapper):
    """Blocking producer. send() returns a concurrent.futures.Future of RecordMetadata."""

    _factory = staticmethod(lambda *a, **kw: _producer()(*a, **kw))

    def send(self, topic, value=None, key=None, **kwargs) -> concurrent.futures.Future:
        async def queue():
            handle = await self._obj.send(topic, value, key, **kwargs)
            return asyncio.ensure_future(_await(handle))

        return self._bridge(self._runner.run(queue()))

    def send_batch(self, topic, partition, records) -> concurrent.futures.Future:
        """Future of the base offset of one batch built from prepared records."""
        async def queue():
            return asyncio.ensure_future(
                _await(await self._obj.send_batch(topic, partition, records)))

        return self._bridge(self._runner.run(queue()))

    def _bridge(self, task) -> concurrent.futures.Future:
        """A thread-safe future completed when the loop-side task completes."""
        out: concurrent.futures.Future = concurrent.futures.Future()

        def done(t):
            if t.cancelled():
                out.cancel()
            elif t.exception() is not None:
                out.set_exception(t.exception())
            else:
                out.set_result(t.result())

        self._runner.loop.call_soon_threadsafe(task.add_done_callback, done)
        return out

    def send_and_wait(self, topic, value=None, key=None, **kwargs):
        return self._call("send_and_wait", topic, value, key, **kwargs)

    def flush(self, timeout: float | None = None) -> None:
        self._call("flush", timeout)


async def _await(handle):
    return await handle


class SyncConsumer(_SyncWrapper):
    """Blocking consumer: poll(timeout_ms) returns {TopicPartition: [records]}."""

    _factory = staticmethod(lambda *a, **kw: _consumer()(*a, **kw))

    def poll(self, timeout_ms: float = 0, max_records: int | None = None):
        return self._call("getmany", timeout_ms, max_records)

    def __iter__(self):
        while True:
            for tp, records in self.poll(1000).items():
                for r in records:
                    yield tp, r


def _consumer():
    from fastlog.client.consumer import Consumer
    return Consumer


class SyncAdmin(_SyncWrapper):
    """Blocking admin client: the same methods as Admin, returning their results."""

    _factory = staticmethod(lambda *a, **kw: _admin()(*a, **kw))


def _admin():
    from fastlog.client.admin import Admin
    return Admin
