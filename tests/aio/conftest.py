"""Every aio test runs on asyncio's default loop, on uvloop and on uringkit.loop (asyncio's
loop waiting on io_uring), once per engine (io_uring, and the thread pool that takes
over when io_uring is blocked)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from conftest import PROBED

ENGINES = (["io_uring"] if PROBED else []) + ["threads"]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("URINGKIT_ENGINE", request.param)
    yield request.param


LOOPS = ["asyncio", "uvloop"] + (["uringkit"] if PROBED else [])


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

        if kind == "uvloop":
            uvloop = pytest.importorskip("uvloop")
            return uvloop.run(main())
        if kind == "uringkit":
            import uringkit.loop

            return uringkit.loop.run(main())
        return asyncio.run(main())

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
        if kind == "uvloop":
            uvloop = pytest.importorskip("uvloop")
            return uvloop.run(fn())
        if kind == "uringkit":
            import uringkit.loop

            return uringkit.loop.run(fn())
        return asyncio.run(fn())

    return runner
