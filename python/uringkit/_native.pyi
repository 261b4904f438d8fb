"""Type stubs for the native core (checked by ``python -m mypy.stubtest uringkit._native``)."""

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol, Self, final

from typing_extensions import Buffer as _BufferProtocol
from typing_extensions import TypedDict, Unpack, disjoint_base

class _SqeOpts(TypedDict, total=False):
    """The keywords every Ring op takes (docs/ring.md, "Common keywords"); all optional,
    defaults in brackets."""

    user_data: int  # [0] your tag, returned in the completion
    link: bool  # [False] IOSQE_IO_LINK
    hardlink: bool  # [False] IOSQE_IO_HARDLINK
    drain: bool  # [False] IOSQE_IO_DRAIN
    async_: bool  # [False] IOSQE_ASYNC
    skip_success: bool  # [False] IOSQE_CQE_SKIP_SUCCESS

__version__: str
__all__ = [
    "AlignedBuffer",
    "Buffer",
    "BufferRing",
    "BufferView",
    "Completion",
    "EchoServer",
    "Fixed",
    "KvScan",
    "KvView",
    "KvStore",
    "LibaioContext",
    "Ring",
    "__version__",
    "block_io_uring",
    "block_syscalls",
    "dio_alignment",
    "echo_load",
    "kernel_release",
    "libaio_check",
    "memlock_limit",
    "op_table",
    "is_local_fs",
    "open_cached",
    "stat_cached",
    "pread_nowait",
    "pread_nowait_many",
    "read_cached_many",
    "read_helper_chunks",
    "run_job",
    "seccomp_mode",
]

class _HasFileno(Protocol):
    def fileno(self) -> int: ...

_Path = str | bytes | os.PathLike[str] | os.PathLike[bytes]
_Address = tuple[str, int] | tuple[str, int, int, int] | str | bytes

@final
class Fixed:
    """A registered file: index into the ring's fixed file table."""

    def __new__(cls, index: int) -> Self: ...
    @property
    def index(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

_Fd = int | Fixed | _HasFileno

@final
class Completion:
    @property
    def user_data(self) -> int: ...
    @property
    def res(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def more(self) -> bool: ...
    @property
    def notif(self) -> bool: ...
    @property
    def sock_nonempty(self) -> bool: ...
    @property
    def ok(self) -> bool: ...
    @property
    def op(self) -> str: ...
    @property
    def errno(self) -> int | None: ...
    @property
    def buffer_id(self) -> int | None: ...
    @property
    def buffer(self) -> Any: ...
    @property
    def result(self) -> Any: ...
    @property
    def message(self) -> str | None: ...
    def raise_for_error(self) -> int: ...

@final
class Buffer:
    """A registered (fixed) buffer; supports the buffer protocol."""

    @property
    def index(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def address(self) -> int: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class AlignedBuffer:
    """Page-aligned memory for O_DIRECT; supports the buffer protocol."""

    def __new__(cls, size: int) -> Self: ...
    @property
    def address(self) -> int: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class BufferView:
    """Zero-copy view of one provided buffer's data."""

    @property
    def buffer_id(self) -> int: ...
    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class BufferRing:
    """A provided-buffer ring (kernel 5.19+)."""

    @property
    def group_id(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def available(self) -> int: ...
    def view(self, completion: Completion) -> BufferView: ...
    def take(self, completion: Completion) -> bytes: ...
    def take_msg(self, completion: Completion) -> tuple[bytes, Any]: ...
    def take_all(self, completions: list[Completion]) -> bytes: ...
    def recycle(self, buffer_id: int) -> bool: ...

@final
class Ring:
    def __new__(
        cls,
        entries: int = 256,
        *,
        sqpoll: bool = False,
        sq_thread_idle_ms: int = 1000,
        sq_thread_cpu: int | None = None,
        iopoll: bool = False,
        coop_taskrun: bool = False,
        single_issuer: bool = False,
        defer_taskrun: bool = False,
        cq_entries: int | None = None,
        disabled: bool = False,
    ) -> Self: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *_args: object) -> None: ...
    @property
    def closed(self) -> bool: ...
    def fileno(self) -> int: ...
    @property
    def entries(self) -> int: ...
    @property
    def cq_entries(self) -> int: ...
    @property
    def sq_space_left(self) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def cq_ready(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def submit_calls(self) -> int: ...
    @property
    def cq_overflow(self) -> int: ...
    @property
    def features(self) -> frozenset[str]: ...
    @property
    def config(self) -> dict[str, Any]: ...
    @staticmethod
    def probe() -> frozenset[str]: ...
    def submit(self) -> int: ...
    def wait(self, min_complete: int = 1, timeout: float | None = None) -> list[Completion]: ...
    def dispatch(
        self,
        futures: dict[int, Any],
        wake: list[Any] | None = None,
        min_complete: int = 0,
        timeout: float | None = None,
    ) -> list[Completion]: ...
    def read_future(
        self,
        fd: _Fd,
        buf: _BufferProtocol,
        nbytes: int,
        offset: int,
        new_future: Callable[[], Any],
        futures: dict[int, Any],
        early: int = 8,
    ) -> Any: ...
    def read_bytes_future(
        self,
        fd: _Fd,
        nbytes: int,
        offset: int,
        new_future: Callable[[], Any],
        futures: dict[int, Any],
        early: int = 8,
    ) -> Any | None: ...
    def completions(self, max: int | None = None) -> list[Completion]: ...
    def nop(
        self,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def read(
        self,
        fd: _Fd,
        buf: _BufferProtocol | None = None,
        offset: int = ...,
        *,
        nbytes: int | None = None,
        buffer_ring: BufferRing | None = None,
        multishot: bool = False,
        rw_flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def write(
        self,
        fd: _Fd,
        data: _BufferProtocol,
        offset: int = ...,
        *,
        nbytes: int | None = None,
        rw_flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def readv(
        self,
        fd: _Fd,
        buffers: Iterable[_BufferProtocol],
        offset: int = ...,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def writev(
        self,
        fd: _Fd,
        buffers: Iterable[_BufferProtocol],
        offset: int = ...,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def read_fixed(
        self,
        fd: _Fd,
        buf: Buffer,
        offset: int = ...,
        *,
        nbytes: int | None = None,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def write_fixed(
        self,
        fd: _Fd,
        buf: Buffer,
        offset: int = ...,
        *,
        nbytes: int | None = None,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def fsync(
        self,
        fd: _Fd,
        *,
        datasync: bool = False,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def fallocate(
        self,
        fd: _Fd,
        length: int,
        offset: int = 0,
        *,
        mode: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def openat(
        self,
        path: _Path,
        flags: int = ...,
        mode: int = 0o644,
        *,
        dir_fd: int = ...,
        fixed_slot: int | None = None,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def close(
        self,
        fd: _Fd | None = None,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def statx(
        self,
        path: _Path,
        *,
        dir_fd: int = ...,
        flags: int = 0,
        mask: int = ...,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def renameat(
        self,
        old: _Path,
        new: _Path,
        *,
        old_dir_fd: int = ...,
        new_dir_fd: int = ...,
        flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def unlinkat(
        self,
        path: _Path,
        *,
        dir_fd: int = ...,
        flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def mkdirat(
        self,
        path: _Path,
        mode: int = 0o777,
        *,
        dir_fd: int = ...,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def symlinkat(
        self,
        target: _Path,
        link_path: _Path,
        *,
        dir_fd: int = ...,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def linkat(
        self,
        old: _Path,
        new: _Path,
        *,
        old_dir_fd: int = ...,
        new_dir_fd: int = ...,
        flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def splice(
        self,
        fd_in: _Fd,
        off_in: int,
        fd_out: _Fd,
        off_out: int,
        nbytes: int,
        *,
        flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def tee(
        self,
        fd_in: _Fd,
        fd_out: _Fd,
        nbytes: int,
        *,
        flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def accept(
        self,
        fd: _Fd,
        *,
        multishot: bool = False,
        flags: int = ...,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def connect(
        self,
        fd: _Fd,
        address: _Address,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def recv(
        self,
        fd: _Fd,
        buf: _BufferProtocol | None = None,
        *,
        nbytes: int | None = None,
        flags: int = 0,
        multishot: bool = False,
        buffer_ring: BufferRing | None = None,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def send(
        self,
        fd: _Fd,
        data: _BufferProtocol,
        *,
        nbytes: int | None = None,
        flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def send_zc(
        self,
        fd: _Fd,
        data: _BufferProtocol,
        *,
        nbytes: int | None = None,
        flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def sendmsg(
        self,
        fd: _Fd,
        buffers: Iterable[_BufferProtocol],
        address: _Address | None = None,
        *,
        flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def sendmsg_zc(
        self,
        fd: _Fd,
        buffers: Iterable[_BufferProtocol],
        address: _Address | None = None,
        *,
        flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def recvmsg(
        self,
        fd: _Fd,
        buffers: Iterable[_BufferProtocol] | None = None,
        *,
        flags: int = 0,
        multishot: bool = False,
        buffer_ring: BufferRing | None = None,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def shutdown(
        self,
        fd: _Fd,
        how: int,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def socket(
        self,
        domain: int,
        type_: int,
        protocol: int = 0,
        *,
        fixed_slot: int | None = None,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def timeout(
        self,
        seconds: float,
        *,
        count: int = 0,
        absolute: bool = False,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def link_timeout(
        self,
        seconds: float,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def cancel(
        self,
        target: int | None = None,
        *,
        fd: _Fd | None = None,
        all: bool = False,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def openat2(
        self,
        path: _Path,
        flags: int = ...,
        mode: int | None = None,
        *,
        resolve: int = 0,
        dir_fd: int = ...,
        fixed_slot: int | None = None,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def waitid(
        self,
        idtype: int,
        id: int,
        options: int,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def msg_ring(
        self,
        target: Ring | int,
        res: int = 0,
        *,
        data: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def poll_add(
        self,
        fd: _Fd,
        mask: int = 1,
        *,
        multishot: bool = False,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def poll_remove(
        self,
        target: int,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def sync_file_range(
        self,
        fd: _Fd,
        length: int = 0,
        offset: int = 0,
        *,
        flags: int = 2,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def fadvise(
        self,
        fd: _Fd,
        offset: int,
        length: int,
        advice: int,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def madvise(
        self,
        buf: _BufferProtocol,
        advice: int,
        *,
        length: int | None = None,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def getxattr(
        self,
        path: _Path | _Fd,
        name: _Path,
        *,
        size: int = 65536,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def setxattr(
        self,
        path: _Path | _Fd,
        name: _Path,
        value: _BufferProtocol,
        *,
        flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def futex_wait(
        self,
        buf: _BufferProtocol,
        val: int,
        *,
        mask: int = 4294967295,
        futex_flags: int = 2,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def futex_wake(
        self,
        buf: _BufferProtocol,
        count: int = 1,
        *,
        mask: int = 4294967295,
        futex_flags: int = 2,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def futex_waitv(
        self,
        futexes: Sequence[tuple[_BufferProtocol, int]],
        *,
        futex_flags: int = 2,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def readv_fixed(
        self,
        fd: _Fd,
        buf: Buffer,
        ranges: Sequence[tuple[int, int]],
        offset: int = ...,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def writev_fixed(
        self,
        fd: _Fd,
        buf: Buffer,
        ranges: Sequence[tuple[int, int]],
        offset: int = ...,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def epoll_ctl(
        self,
        epfd: _Fd,
        op: int,
        fd: int,
        events: int = 0,
        *,
        data: int | None = None,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def epoll_wait(
        self,
        epfd: _Fd,
        maxevents: int = 64,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def pipe(
        self,
        *,
        flags: int = 0,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def ftruncate(
        self,
        fd: _Fd,
        length: int,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def bind(
        self,
        fd: _Fd,
        address: _Address,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def listen(
        self,
        fd: _Fd,
        backlog: int = 128,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def timeout_remove(
        self,
        target: int,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def timeout_update(
        self,
        target: int,
        seconds: float,
        *,
        absolute: bool = False,
        **opts: Unpack[_SqeOpts],
    ) -> None: ...
    def read_batch(
        self,
        fd: _Fd,
        buf: _BufferProtocol,
        offsets: list[int],
        size: int,
        *,
        helper: bool = True,
    ) -> list[int]: ...
    def write_batch(
        self, fd: _Fd, buf: _BufferProtocol, offsets: list[int], size: int
    ) -> list[int]: ...
    def restrict(
        self,
        ops: list[str],
        *,
        register: list[str] = ...,
        allowed_flags: list[str] | None = None,
        required_flags: list[str] = ...,
    ) -> None: ...
    def enable(self) -> None: ...
    def register_personality(self) -> int: ...
    def unregister_personality(self, id: int) -> None: ...
    @property
    def personality(self) -> int: ...
    @personality.setter
    def personality(self, id: int) -> None: ...
    def iowq_max_workers(self, bounded: int = 0, unbounded: int = 0) -> tuple[int, int]: ...
    def iowq_affinity(self, cpus: list[int] | None) -> None: ...
    def register_napi(self, busy_poll_us: int, *, prefer_busy_poll: bool = False) -> None: ...
    def unregister_napi(self) -> None: ...
    def register_eventfd(self, fd: int, *, async_only: bool = False) -> None: ...
    def unregister_eventfd(self) -> None: ...
    def register_files(self, fds: list[int]) -> None: ...
    def register_files_sparse(self, count: int) -> None: ...
    def update_files(self, offset: int, fds: list[int]) -> int: ...
    def unregister_files(self) -> None: ...
    def register_buffers(self, count: int, size: int) -> list[Buffer]: ...
    def unregister_buffers(self) -> None: ...
    def register_read_pool(self, count: int, size: int) -> None: ...
    @property
    def read_pool_free(self) -> int | None: ...
    def buffer_ring(self, group_id: int, count: int, size: int) -> BufferRing: ...

def op_table() -> list[tuple[str, int, str]]: ...
def kernel_release() -> str: ...
def memlock_limit() -> int | None: ...
def seccomp_mode() -> int | None: ...
def block_io_uring(errno: int = ...) -> None: ...
def block_syscalls(numbers: list[int], errno: int = ...) -> None: ...
def dio_alignment(fd: int) -> tuple[int, int] | None: ...
def libaio_check() -> int: ...
def run_job(
    spec: dict[str, Any],
    progress: Callable[[int, int, float, bool], bool | None] | None = None,
    interval: float = 0.5,
) -> dict[str, Any]: ...
def open_cached(path: str | bytes | os.PathLike[Any], flags: int, dir_fd: int = ...) -> int: ...
def is_local_fs(fd: int) -> bool: ...
def stat_cached(
    path: str | bytes | os.PathLike[Any], follow_symlinks: bool = True, dir_fd: int = ...
) -> tuple[Any, ...] | None: ...
def pread_nowait(fd: int, n: int, offset: int) -> bytes | None: ...
def read_helper_chunks() -> int: ...
def read_cached_many(
    fd: int, ranges: Sequence[tuple[int, int]]
) -> tuple[list[bytes | int], int]: ...
def pread_nowait_many(
    fd: int, buf: _BufferProtocol, ranges: list[tuple[int, int]]
) -> list[int]: ...

@final
class KvScan:
    def key_list(self) -> list[bytes]: ...
    def next_items(self, n: int) -> list[tuple[bytes, bytes]]: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> tuple[bytes, bytes]: ...

@disjoint_base
class KvView:
    def __new__(cls, store: KvStore) -> Self: ...
    def get(self, key: bytes, default: bytes | None = None) -> bytes | None: ...
    def get_cached(self, key: bytes) -> bytes | None: ...
    def multi_get(self, keys: list[bytes]) -> list[bytes | None]: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int: ...
    def scan(
        self,
        prefix: bytes | None = None,
        start: bytes | None = None,
        stop: bytes | None = None,
        reverse: bool = False,
    ) -> KvScan: ...
    def page(
        self,
        prefix: bytes | None,
        start: bytes | None,
        stop: bytes | None,
        after: bytes | None,
        n: int,
        include_value: bool,
    ) -> list[Any]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

@final
class KvStore:
    def __new__(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: str = "sync",
        batch_ms: int = 10,
        batch_bytes: int = ...,
        create: bool = True,
        repair: bool = False,
        segment_size: int = ...,
        io_uring: bool = True,
        direct: bool = False,
        index_snapshot: bool = True,
        warm: bool = True,
        sqpoll: bool = False,
        read_only: bool = False,
        auto_compact: float | None = ...,
        auto_compact_bytes: int = ...,
        compression: str | None = None,
        compression_level: int | None = None,
    ) -> Self: ...
    def put(self, key: bytes, value: bytes) -> None: ...
    def get(self, key: bytes) -> bytes | None: ...
    def delete(self, key: bytes) -> bool: ...
    def multi_get(self, keys: list[bytes]) -> list[bytes | None]: ...
    def batch(self, ops: Iterable[tuple[bytes, _BufferProtocol | None]]) -> None: ...
    def enqueue(self, ops: Sequence[tuple[bytes, bytes | None]], atomic: bool = False) -> int: ...
    def enqueue_put(self, key: bytes, value: bytes) -> int: ...
    def write_nowait(
        self, ops: Sequence[tuple[bytes, bytes | None]], atomic: bool = False
    ) -> bool: ...
    def get_cached(self, key: bytes) -> bytes | None: ...
    def all_cached(self, keys: Sequence[bytes]) -> bool: ...
    def lead_async(self) -> tuple[int, int, bytes | AlignedBuffer, int] | None: ...
    def finish_async(self, wrote: int, synced: int) -> None: ...
    def wait_ticket(self, ticket: int) -> None: ...
    def collect(self, tickets: list[int]) -> list[OSError | Literal[True] | None]: ...
    def contains(self, key: bytes) -> bool: ...
    def __len__(self) -> int: ...
    def keys(self) -> list[bytes]: ...
    def scan(
        self,
        prefix: bytes | None = None,
        start: bytes | None = None,
        stop: bytes | None = None,
        reverse: bool = False,
    ) -> KvScan: ...
    def items(self) -> list[tuple[bytes, bytes]]: ...
    def values(self) -> list[bytes]: ...
    def compact(self) -> tuple[int, int]: ...
    def checkpoint(self, path: str | os.PathLike[str]) -> tuple[int, int, int]: ...
    def refresh(self) -> tuple[int, int, int, bool]: ...
    def warm_up(self) -> bool: ...
    def sync(self) -> None: ...
    def stats(self) -> dict[str, int]: ...
    def check(self) -> tuple[int, list[str]]: ...
    def recovery(self) -> dict[str, Any]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

@final
class LibaioContext:
    def __new__(cls, depth: int, eventfd: int) -> Self: ...
    def read(
        self, fd: int, buf: _BufferProtocol, offset: int, user_data: int, nbytes: int | None = None
    ) -> None: ...
    def write(self, fd: int, data: _BufferProtocol, offset: int, user_data: int) -> None: ...
    def completions(self) -> list[tuple[int, int]]: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def eventfd(self) -> int: ...
    def close(self) -> None: ...

@final
class EchoServer:
    def __new__(
        cls,
        fd: int,
        zero_copy: bool = False,
        buffers: int = 2048,
        buffer_size: int = 4096,
        max_connections: int = 4096,
        fixed_files: bool = True,
    ) -> Self: ...
    def stop(self) -> None: ...
    @property
    def running(self) -> bool: ...
    def stats(self) -> dict[str, int]: ...

def echo_load(
    host: str,
    port: int,
    connections: int = 64,
    size: int = 4096,
    seconds: float = 2.0,
    warmup: float = 0.5,
) -> dict[str, float]: ...
