"""The `run` fixture of the loop tests: each test written once, run on asyncio's loop,
uvloop, uringkit.loop (stream transports on the ring), uringkit.loop with every write a
SEND on the ring (what a busy loop does; a test has too few connections to make it
busy) and uringkit.loop with asyncio's own transports."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from conftest import LOOPS, PROBED, run_on_loop

Run = Callable[[Callable[[], Awaitable[Any]]], Any]


@pytest.fixture(params=LOOPS + (["uringkit-ring-sends", "uringkit-selector"] if PROBED else []))
def run(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Run:
    kind = request.param
    if kind == "uringkit-ring-sends":
        from uringkit.loop import _transport

        monkeypatch.setattr(_transport, "_BUSY", 0)

    def runner(fn: Callable[[], Awaitable[Any]]) -> Any:
        async def checked() -> Any:
            name = type(asyncio.get_running_loop()).__name__
            assert not kind.startswith("uringkit") or name == "UringEventLoop"
            return await fn()

        return run_on_loop(kind.replace("-ring-sends", ""), checked())

    runner.kind = kind  # type: ignore[attr-defined]
    return runner
