"""PriorityGate: interactive work overtakes queued background work; FIFO within a priority."""

from __future__ import annotations

import asyncio

from engine.llm.gate import PriorityGate


async def test_priority_then_fifo_order():
    gate, order = PriorityGate(), []
    await gate.acquire()

    async def job(name: str, prio: int) -> None:
        await gate.acquire(prio)
        order.append(name)
        gate.release()

    tasks = [
        asyncio.create_task(job(n, p))
        for n, p in [("bg1", 10), ("chat1", 0), ("bg2", 10), ("chat2", 0)]
    ]
    await asyncio.sleep(0)
    gate.release()
    await asyncio.gather(*tasks)
    assert order == ["chat1", "chat2", "bg1", "bg2"]
    assert not gate.locked()


async def test_cancelled_waiter_is_skipped():
    gate = PriorityGate()
    await gate.acquire()
    waiter = asyncio.create_task(gate.acquire(0))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.sleep(0)
    gate.release()
    assert not gate.locked()
    await asyncio.wait_for(gate.acquire(), 1)
    assert gate.locked()
