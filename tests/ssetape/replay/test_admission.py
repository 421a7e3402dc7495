"""The forward-mode server's handshake slots: a few handshakes at once, first come first
served, and a client that stalls inside its handshake gives its slot back."""

from __future__ import annotations

import asyncio

from ssetape.replay.admission import SLOTS, Admission, share
from ssetape.replay.front_workers import WorkerSpec


def test_no_more_handshakes_run_at_once_than_there_are_slots_and_all_are_served() -> None:
    async def main() -> tuple[int, list[int]]:
        admission = Admission(slots=3, hold=10)
        running, most, order = 0, 0, []

        async def handshake(i: int) -> None:
            nonlocal running, most
            async with admission.slot():
                order.append(i)
                running += 1
                most = max(most, running)
                await asyncio.sleep(0.005)
                running -= 1

        await asyncio.wait_for(asyncio.gather(*(handshake(i) for i in range(20))), 30)
        return most, order

    most, order = asyncio.run(main())
    assert most == 3
    assert order == list(range(20))  # in arrival order


def test_a_stalled_handshake_gives_its_slot_back() -> None:
    async def main() -> float:
        admission = Admission(slots=1, hold=0.05)
        stalled = asyncio.Event()

        async def stall() -> None:
            async with admission.slot():
                stalled.set()
                await asyncio.sleep(30)  # a client that never finishes its handshake

        task = asyncio.create_task(stall())
        await stalled.wait()
        loop = asyncio.get_running_loop()
        t = loop.time()
        async with admission.slot():
            waited = loop.time() - t
        task.cancel()
        return waited

    # Held 30 s, the slot comes back after 0.05 s (the bound is wide for a busy machine).
    assert asyncio.run(main()) < 5


def test_a_cancelled_waiter_takes_no_slot() -> None:
    async def main() -> bool:
        admission = Admission(slots=1, hold=10)
        holder_in = asyncio.Event()
        release = asyncio.Event()

        async def holder() -> None:
            async with admission.slot():
                holder_in.set()
                await release.wait()

        async def waiter() -> None:
            async with admission.slot():
                pass

        h = asyncio.create_task(holder())
        await holder_in.wait()
        w = asyncio.create_task(waiter())
        await asyncio.sleep(0.01)
        w.cancel()  # the client went away while it waited
        release.set()
        await h
        async with asyncio.timeout(5):
            async with admission.slot():
                return True

    assert asyncio.run(main())


def test_processes_on_one_port_split_one_budget_and_each_worker_is_told_its_share() -> None:
    assert share(1) == SLOTS
    for processes in (2, 3, SLOTS, 2 * SLOTS):
        # Each process can still answer a tunnel; together they run no more than one does.
        assert share(processes) >= 1
        assert processes * share(processes) <= max(SLOTS, processes)
    spec = WorkerSpec("t.db", "", "127.0.0.1", 0, 1.0, [], False, False, False, [], [], None,
                      share(2))  # fmt: skip
    assert WorkerSpec.from_line(spec.to_line()).slots == share(2) < SLOTS
