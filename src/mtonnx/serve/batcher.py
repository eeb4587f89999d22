"""Dynamic batching: sentences of concurrent requests share model calls, so the model runs few, full batches.

Every request's sentences go into one bounded queue (counted in sentences; a full queue refuses at once rather
than growing). One asyncio task forms batches: it takes the options of the oldest waiting sentence, then up to
`max_batch_size` sentences with those same options (beams, max_new_tokens), waiting at most `max_wait_s` after
that oldest sentence arrived for the batch to fill (default 0: sentences that arrive while the model is busy wait
anyway and fill the next call; waiting while it is idle only adds latency). The batch runs on one worker thread
(ONNX Runtime releases the GIL; the event loop never blocks), and each request gets back exactly its own results,
in its order. A failing model call fails the requests of that batch only.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

RunBatch = Callable[[list[str], Hashable], list[str]]
Observe = Callable[[int, float, bool], None]  # (sentences, seconds, failed) after every model call


class QueueFull(Exception):
    """The queue cannot take a request's sentences now (or the batcher is shutting down)."""


@dataclass
class _Job:
    texts: list[str]
    key: Hashable
    future: asyncio.Future
    results: list[str | None] = field(default_factory=list)
    remaining: int = 0


@dataclass
class _Item:
    job: _Job
    index: int
    arrived: float


class Batcher:
    """Collect sentences from concurrent requests into batches and run them on one worker thread."""

    def __init__(
        self,
        run: RunBatch,
        max_batch_size: int = 16,
        max_wait_s: float = 0.0,
        queue_size: int = 1024,
        observe: Observe | None = None,
    ):
        self.run, self.max_batch_size, self.max_wait_s, self.queue_size = run, max_batch_size, max_wait_s, queue_size
        self.observe = observe
        self._queues: dict[Hashable, deque[_Item]] = {}
        self._waiting = 0
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._closing = False

    @property
    def depth(self) -> int:
        """Sentences waiting in the queue (not yet in a model call)."""
        return self._waiting

    def start(self) -> None:
        """Start the batching task on the running event loop and the worker thread."""
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mtonnx-model")
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="mtonnx-batcher")

    async def call(self, fn: Callable, *args):
        """Run fn(*args) on the model's worker thread (between batches); e.g. the warm-up translation."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def submit(self, texts: list[str], key: Hashable) -> list[str]:
        """Queue texts (translated with options `key`) and wait for their results, in order.

        Raises QueueFull at once when the queue has no room for all of them; cancelling the wait (a timeout)
        drops the request's sentences that did not reach a model call yet.
        """
        if self._closing or self._task is None:
            raise QueueFull("the service is shutting down" if self._closing else "the batcher is not running")
        if self._waiting + len(texts) > self.queue_size:
            raise QueueFull(
                f"the queue holds {self._waiting} of at most {self.queue_size} sentences and this request needs "
                f"{len(texts)}"
            )
        if not texts:
            return []
        job = _Job(texts, key, asyncio.get_running_loop().create_future(), [None] * len(texts), len(texts))
        now = time.perf_counter()
        queue = self._queues.setdefault(key, deque())
        queue.extend(_Item(job, i, now) for i in range(len(texts)))
        self._waiting += len(texts)
        self._wakeup.set()
        return await job.future

    async def close(self) -> None:
        """Finish every queued and running batch, then stop the task and the worker thread."""
        if self._task is None:
            return
        self._closing = True
        self._wakeup.set()
        await self._task
        self._executor.shutdown(wait=True)
        self._task = None

    async def _loop(self) -> None:
        while True:
            oldest = self._oldest()
            if oldest is None:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            key, deadline = oldest.job.key, oldest.arrived + self.max_wait_s
            while not self._closing and len(self._queues[key]) < self.max_batch_size:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._wakeup.clear()
                timer = asyncio.get_running_loop().call_later(left, self._wakeup.set)
                await self._wakeup.wait()  # a new sentence, or the deadline
                timer.cancel()
            await self._run(self._take(key), key)

    def _oldest(self) -> _Item | None:
        """The oldest waiting sentence whose request still waits (items of cancelled requests are dropped)."""
        heads = []
        for key, queue in list(self._queues.items()):
            while queue and queue[0].job.future.done():
                queue.popleft()
                self._waiting -= 1
            if queue:
                heads.append(queue[0])
            else:
                del self._queues[key]
        return min(heads, key=lambda item: item.arrived, default=None)

    def _take(self, key: Hashable) -> list[_Item]:
        queue, batch = self._queues[key], []
        while queue and len(batch) < self.max_batch_size:
            item = queue.popleft()
            self._waiting -= 1
            if not item.job.future.done():
                batch.append(item)
        return batch

    async def _run(self, batch: list[_Item], key: Hashable) -> None:
        if not batch:
            return
        texts = [item.job.texts[item.index] for item in batch]
        start = time.perf_counter()
        try:
            results = await self.call(self.run, texts, key)
            if len(results) != len(texts):
                raise RuntimeError(f"the model returned {len(results)} results for {len(texts)} sentences")
        except Exception as err:  # the model failed: only this batch's requests fail
            self._observe(len(texts), start, failed=True)
            for item in batch:
                if not item.job.future.done():
                    item.job.future.set_exception(err)
            return
        self._observe(len(texts), start, failed=False)
        for item, result in zip(batch, results):
            job = item.job
            if job.future.done():
                continue
            job.results[item.index] = result
            job.remaining -= 1
            if job.remaining == 0:
                job.future.set_result(job.results)

    def _observe(self, sentences: int, start: float, failed: bool) -> None:
        if self.observe:
            self.observe(sentences, time.perf_counter() - start, failed)
