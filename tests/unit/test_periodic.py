"""A background step every interval: a failure is an outage, the loop goes on."""

import asyncio
import logging

from fairlane_runtime.errors import ServerUnavailableError
from fairlane_runtime.outage import OutageLog
from fairlane_runtime.periodic import Periodic


class _Counter:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


async def test_a_failing_step_is_recorded_and_tried_again() -> None:
    failures, calls = _Counter(), list[int]()

    async def step() -> None:
        calls.append(len(calls))
        if len(calls) <= 2:
            raise ServerUnavailableError("away")

    outage = OutageLog(logging.getLogger("test"), "step", failures)
    loop = Periodic("test-step", step, 0.001, outage)
    await loop.start()
    while len(calls) < 4:
        await asyncio.sleep(0.001)
    await loop.stop()
    assert failures.value == 2
    assert not outage.is_down  # the later steps succeeded
    await loop.stop()  # stopping twice is harmless


async def test_wait_first_leaves_the_first_step_for_one_interval_later() -> None:
    calls = list[int]()

    async def step() -> None:
        calls.append(1)

    outage = OutageLog(logging.getLogger("test"), "step", _Counter())
    eager = Periodic("eager", step, 3600.0, outage)
    patient = Periodic("patient", step, 3600.0, outage, wait_first=True)
    await patient.start()
    for _ in range(5):
        await asyncio.sleep(0)
    assert calls == []  # an hour to go
    await eager.start()
    while not calls:
        await asyncio.sleep(0)
    await eager.stop()
    await patient.stop()
    assert calls == [1]
