"""A priority-aware async lock for a backend that runs one generation at a time.

Interactive chat turns must not wait behind background work (document descriptions): waiters
are served by ``priority`` (lower first), first-come-first-served within a priority.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools


class PriorityGate:
    def __init__(self) -> None:
        self._held = False
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def locked(self) -> bool:
        return self._held

    async def acquire(self, priority: int = 0) -> None:
        if not self._held and not self._waiters:
            self._held = True
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted just as we were cancelled
                self.release()
            raise

    async def __aenter__(self) -> PriorityGate:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)  # ownership passes straight to the next waiter
                return
        self._held = False
