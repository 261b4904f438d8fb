"""Every aio test runs on asyncio's default loop, on uvloop and on uringkit.loop (asyncio's
loop waiting on io_uring), once per engine (io_uring, and the thread pool that takes
over when io_uring is blocked)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from conftest import LOOPS, PROBED, run_on_loop

ENGINES = (["io_uring"] if PROBED else []) + ["threads"]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("URINGKIT_ENGINE", request.param)
    yield request.param


@pytest.fixture(params=LOOPS)
def run(
    request: pytest.FixtureRequest, engine: str
) -> Callable[[Callable[[], Awaitable[Any]]], Any]:
    kind = request.param

    def runner(fn: Callable[[], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            from uringkit import aio

            assert aio.backend_name() == engine
            return await fn()

        return run_on_loop(kind, main())

    return runner


@pytest.fixture(params=LOOPS)
def ring_run(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Callable[[Callable[[], Awaitable[Any]]], Any]:
    """For behaviour only the io_uring backend has (cancelling an op in the kernel)."""
    if not PROBED:
        pytest.skip("io_uring unavailable")
    monkeypatch.setenv("URINGKIT_ENGINE", "io_uring")
    kind = request.param

    def runner(fn: Callable[[], Awaitable[Any]]) -> Any:
        return run_on_loop(kind, fn())

    return runner
