"""A FUSE filesystem that forgets what was never synced: the power cut of the crash tests.

SIGKILLing a writer proves only that what it wrote reached the kernel: the page cache
keeps every written byte, synced or not. To test what a crash of the *machine* leaves,
the store is put on this filesystem, whose page cache is the memory of its own process:

- Writes are kept in that process, page by page, on top of the files of a backing
  directory (the "disk"). Reads see them; the backing files do not, until an
  `fsync`/`fdatasync` of the file writes its dirty pages there.
- Meanwhile a writeback thread, as the kernel's would, writes dirty pages — half the
  time one at random, half the time a run of one file's in ascending order (the
  kernel's way) — some only in part (a random subset of their 512-byte sectors, the
  page staying dirty): what a power cut finds on the disk is any such mix — later
  pages without earlier ones, a written prefix with the tail lost whole, the file
  grown over holes, a page torn between sectors.
- The power cut is a SIGKILL of this process: everything not yet on the disk is gone.
  The mount then answers ENOTCONN until it is detached; mounting the backing directory
  again shows what survived.

Names (create, rename, unlink, link, mkdir, rmdir) go to the disk at once, or — with
`--lazy-names`, as the crash tests mount it — are volatile too until a directory is
fsynced: the mount after a crash undoes a random number of the newest ones not yet
synced (`_Journal`). With `--lazy-names` a file's size set by truncate or fallocate is
volatile the same way (undone with the bytes a shrink cut, unless the file was fsynced
after it or a directory fsync committed the journal): the crash may bring back the
zero tail a truncate cut, or a file at its old length. Without it, sizes go to the disk
at once.

`python -m uringkit.kv.lazyfs BACKING MOUNTPOINT` runs it in the foreground (root, or
a user allowed to mount FUSE; needs libfuse 3 and mfusepy). Used by
`uringkit.kv.crashtest` (`power=True`) and `benches/kv_crash.py --power`.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import json
import os
import random
import shutil
import stat
import sys
import threading
import time
from typing import Any

PAGE = 4096
SECTOR = 512

__all__ = ["LazyFS", "main"]


class _File:
    """The volatile state of one backing inode: its dirty pages (whole page images) and
    its size as the page cache sees it."""

    __slots__ = ("fd", "pages", "size", "opens")

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.pages: dict[int, bytearray] = {}
        self.size = size
        self.opens = 0


def _libc_fallocate() -> Any:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    f = libc.fallocate
    f.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    f.restype = ctypes.c_int
    return f


class _Journal:
    """Names not yet made durable (`metadata="lazy"`): every create, unlink, rename,
    link, mkdir and rmdir is applied to the disk at once and its undo appended to a
    journal beside it (`<backing>.meta`; a file replaced or removed is kept under
    `<backing>.stash/` meanwhile). An fsync of a directory commits everything before it
    (one journal for the filesystem, as ext4's). The next mount undoes a random number
    of the operations after the last commit, newest first: the crash kept a prefix of
    them. An fsync of a file commits nothing: a new file's name needs its directory
    synced (POSIX; ext4 is kinder)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.stash = root + ".stash"
        os.makedirs(self.stash, exist_ok=True)
        self.fd = os.open(root + ".meta", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.stashed: list[str] = []
        self.n = 0

    def note(self, *steps: list[Any]) -> None:
        """One operation about to be made: its undo steps, run in order. (Written first:
        a crash between the two leaves an undo for what did not happen, which `recover`
        recognises and skips.)"""
        os.write(self.fd, (json.dumps([list(st) for st in steps]) + "\n").encode())

    def void(self) -> None:
        """The operation just noted failed: nothing to undo."""
        os.write(self.fd, b"void\n")

    def keep(self, path: str) -> str:
        """A hard link to the file at `path` (about to be replaced or removed)."""
        self.n += 1
        name = os.path.join(self.stash, f"{os.getpid()}-{self.n}")
        os.link(path, name)
        self.stashed.append(name)
        return name

    def keep_bytes(self, data: bytes) -> str:
        """A stash file holding `data` (the bytes a truncate is about to cut)."""
        self.n += 1
        name = os.path.join(self.stash, f"{os.getpid()}-{self.n}")
        with open(name, "wb") as f:
            f.write(data)
        self.stashed.append(name)
        return name

    def synced(self, ino: int) -> None:
        """The file with backing inode `ino` was fsynced: its size changes so far are
        durable (its names are not)."""
        os.write(self.fd, f"synced {ino}\n".encode())

    def commit(self) -> None:
        os.write(self.fd, b"commit\n")
        for name in self.stashed:
            os.unlink(name)
        self.stashed.clear()

    @staticmethod
    def recover(root: str, rng: random.Random) -> int:
        """At mount, after a crash: undo a random suffix of the uncommitted operations.
        Returns how many were undone."""
        try:
            with open(root + ".meta") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return 0
        last = max((i for i, ln in enumerate(lines) if ln == "commit"), default=-1)
        pending: list[Any] = []
        for ln in lines[last + 1 :]:
            if ln == "void" and pending:
                pending.pop()
            elif ln.startswith("["):
                pending.append(json.loads(ln))
            elif ln.startswith("synced "):
                done = int(ln.split()[1])
                pending = [p for p in pending if not (p[0][0] == "size" and p[0][5] == done)]
        k = rng.randint(0, len(pending))
        if pending:
            print(f"lazyfs: the crash kept {len(pending) - k} of the {len(pending)} name "
                  "and size operations not yet synced", file=sys.stderr, flush=True)  # fmt: skip
        for steps in reversed(pending[len(pending) - k :]):
            for op, *args in steps:
                if op == "size":
                    _Journal._unsize(os.path.join(root, args[0]), *args[1:4])
                    continue
                ino = args.pop() if op == "rename" and len(args) == 3 else None
                a = [os.path.join(root, x) if not x.startswith("/") else x for x in args]
                # (each undo only where its operation happened: the crash may have come
                # between the journal's line and the operation)
                here = os.path.lexists(a[0])
                if op == "unlink" and here:
                    os.unlink(a[0])
                elif op == "rmdir" and here:
                    os.rmdir(a[0])
                elif op == "mkdir" and not here:
                    os.mkdir(a[0])
                elif op == "rename" and here and (ino is None or os.lstat(a[0]).st_ino == ino):
                    os.rename(a[0], a[1])
        os.unlink(root + ".meta")
        shutil.rmtree(root + ".stash", ignore_errors=True)
        return k

    @staticmethod
    def _unsize(path: str, old: int, length: int, cut: str | None) -> None:
        """Undo a size change of the file at `path` from `old` to `length`: the bytes a
        shrink cut (the stash file `cut`; None: zeros) written back, the length set to
        `old` again.
        (Harmless where the change never happened: the same bytes, the same length.)"""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return  # (removed for good since: a committed unlink)
        try:
            if cut is not None:
                with open(cut, "rb") as f:
                    os.pwrite(fd, f.read(), length)
            elif length < old:
                os.ftruncate(fd, length)  # (it cut zeros: what lies there now goes)
            os.ftruncate(fd, old)
        finally:
            os.close(fd)


class LazyFS:
    """The filesystem's operations (mfusepy's high-level API, paths relative to the
    backing directory `root`). `writeback`: the mean number of dirty pages the
    writeback thread writes per millisecond (0: none — a power cut loses every unsynced
    byte); `seed` makes its choices repeatable; `lazy_names`: names are volatile too
    until their directory is synced (`_Journal`)."""

    use_ns = True

    def __init__(
        self, root: str, seed: int = 0, writeback: float = 0.5, lazy_names: bool = False
    ) -> None:
        self.root = os.path.realpath(root)
        self.journal = _Journal(self.root) if lazy_names else None
        self.mutex = threading.Lock()
        self.files: dict[int, _File] = {}  # backing inode -> state
        self.handles: dict[int, int] = {}  # file handle -> backing inode
        self.next_fh = 1
        self.rng = random.Random(seed)
        self.writeback = writeback
        self.synced = 0  # pages written to the disk by fsync
        self.written_back = 0  # pages (or parts) written by the writeback thread
        self._fallocate = _libc_fallocate()
        if writeback > 0:
            threading.Thread(target=self._writeback_loop, daemon=True).start()

    # -- paths and inodes ---------------------------------------------------------------

    def _p(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    # -- the page cache -----------------------------------------------------------------

    def _page(self, f: _File, n: int) -> bytearray:
        page = f.pages.get(n)
        if page is None:
            page = bytearray(os.pread(f.fd, PAGE, n * PAGE).ljust(PAGE, b"\0"))
            f.pages[n] = page
        return page

    def _flush(self, f: _File) -> None:
        """fsync: every dirty page to the disk, and the size."""
        for n in sorted(f.pages):
            end = min(PAGE, f.size - n * PAGE)
            if end > 0:
                os.pwrite(f.fd, bytes(f.pages[n][:end]), n * PAGE)
            self.synced += 1
        f.pages.clear()
        if os.fstat(f.fd).st_size < f.size:
            os.ftruncate(f.fd, f.size)

    def _writeback_once(self) -> None:
        dirty = [(f, n) for f in self.files.values() for n in f.pages]
        if not dirty:
            return
        f, n = self.rng.choice(dirty)
        if self.rng.random() < 0.5:
            # as the kernel's writeback does: a run of a file's dirty pages in ascending
            # order — a crash then finds a written prefix of what was appended, the
            # file's size where a page write last set it, and the tail lost whole
            for m in sorted(p for p in f.pages if p >= n)[: self.rng.randint(1, 16)]:
                self._write_page(f, m)
            return
        self._write_page(f, n)

    def _write_page(self, f: _File, n: int) -> None:
        page = f.pages[n]
        end = min(PAGE, f.size - n * PAGE)
        if end <= 0:
            del f.pages[n]
            return
        if self.rng.random() < 0.3:
            # a torn page: some of its sectors reach the disk, the page stays dirty
            for s in range(0, end, SECTOR):
                if self.rng.random() < 0.5:
                    os.pwrite(f.fd, bytes(page[s : min(end, s + SECTOR)]), n * PAGE + s)
        else:
            os.pwrite(f.fd, bytes(page[:end]), n * PAGE)
            del f.pages[n]
        self.written_back += 1

    def _writeback_loop(self) -> None:
        while True:
            time.sleep(self.rng.expovariate(self.writeback) / 1000)
            with self.mutex:
                self._writeback_once()

    # -- attributes and directories -----------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        with self.mutex:
            try:
                if fh is not None and fh in self.handles:
                    st = os.fstat(self._file(fh).fd)
                else:
                    st = os.lstat(self._p(path))
            except OSError as e:
                raise _err(e) from None
            out: dict[str, Any] = {k: getattr(st, k) for k in _STAT}
            for t in ("st_atime", "st_mtime", "st_ctime"):
                out[t] = getattr(st, t + "_ns")
            f = self.files.get(st.st_ino)
            if f is not None:
                out["st_size"] = f.size
            return out

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._p(path))]

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._p(path), amode):
            raise _oserr(errno.EACCES)
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        st = os.statvfs(self.root)
        return {k: getattr(st, k) for k in _STATVFS}

    def mkdir(self, path: str, mode: int) -> int:
        with self.mutex:
            return self._noted(os.mkdir, (self._p(path), mode), ["rmdir", path])

    def rmdir(self, path: str) -> int:
        with self.mutex:
            return self._noted(os.rmdir, (self._p(path),), ["mkdir", path])

    def _note(self, *steps: list[Any]) -> None:
        # (paths in the filesystem are kept relative to the disk, stashed files absolute)
        j = self.journal
        if j is not None:
            j.note(*[[st[0], *(_rel(x, j.stash) for x in st[1:])] for st in steps])

    def _noted(self, fn: Any, args: tuple[Any, ...], *undo: list[Any]) -> int:
        """`fn(*args)`, its `undo` journaled first (and voided if it fails)."""
        self._note(*undo)
        try:
            fn(*args)
        except OSError as e:
            if self.journal is not None:
                self.journal.void()
            raise _err(e) from None
        return 0

    def _resize(self, path: str | None, fd: int, length: int, apply: Any) -> None:
        """`apply()`, which sets the backing file's (`fd`) size to `length` — volatile
        with lazy names: its undo (the bytes a shrink cuts, kept in the stash) is
        journaled first."""
        j = self.journal
        old = os.fstat(fd).st_size
        if j is None or not path or old == length:
            apply()
            return
        cut = None  # (a shrink that cuts only zeros keeps none: the undo zeroes)
        if length < old:
            data = os.pread(fd, old - length, length)
            if data.count(0) != len(data):
                cut = j.keep_bytes(data)
        j.note(["size", _rel(path, j.stash), old, length, cut, os.fstat(fd).st_ino])
        try:
            apply()
        except OSError:
            j.void()
            raise

    def _keep(self, p: str) -> str | None:
        return self.journal.keep(p) if self.journal is not None else None

    def chmod(self, path: str, mode: int) -> int:
        return _call(os.chmod, self._p(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> int:
        return _call(os.chown, self._p(path), uid, gid)

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        return _call(os.utime, self._p(path), ns=times)

    def symlink(self, target: str, source: str) -> int:
        with self.mutex:
            return self._noted(os.symlink, (source, self._p(target)), ["unlink", target])

    def readlink(self, path: str) -> str:
        try:
            return os.readlink(self._p(path))
        except OSError as e:
            raise _err(e) from None

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self.mutex:
            if self.journal is not None:
                self.journal.commit()
            return 0

    # -- names --------------------------------------------------------------------------

    def unlink(self, path: str) -> int:
        with self.mutex:
            p = self._p(path)
            try:
                st = os.lstat(p)
                kept = self._keep(p)
            except OSError as e:
                raise _err(e) from None
            undo = [["rename", kept, path]] if kept is not None else []
            self._noted(os.unlink, (p,), *undo)
            f = self.files.get(st.st_ino)
            if f is not None and st.st_nlink <= 1 and f.opens == 0:
                self._forget(st.st_ino)
            return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        with self.mutex:
            src, dst = self._p(old), self._p(new)
            if flags & ~1:  # RENAME_EXCHANGE, RENAME_WHITEOUT: not offered
                raise _oserr(errno.EINVAL)
            if flags & 1 and os.path.lexists(dst):  # RENAME_NOREPLACE
                raise _oserr(errno.EEXIST)
            try:
                moved = os.lstat(src)
                gone = os.lstat(dst) if os.path.lexists(dst) else None
                kept = None
                if gone is not None and not stat.S_ISDIR(gone.st_mode):
                    kept = self._keep(dst)
            except OSError as e:
                raise _err(e) from None
            undo: list[list[Any]] = [["rename", new, old, moved.st_ino]]
            if kept is not None:
                undo.append(["rename", kept, new])
            elif gone is not None:
                undo.append(["mkdir", new])  # (an empty directory it replaced)
            self._noted(os.rename, (src, dst), *undo)
            if gone is not None and gone.st_nlink <= 1:
                f = self.files.get(gone.st_ino)
                if f is not None and f.opens == 0:
                    self._forget(gone.st_ino)
            return 0

    def link(self, target: str, source: str) -> int:
        with self.mutex:
            return self._noted(os.link, (self._p(source), self._p(target)), ["unlink", target])

    def _forget(self, ino: int) -> None:
        f = self.files.pop(ino)
        os.close(f.fd)

    # -- files --------------------------------------------------------------------------

    def _open(self, p: str, flags: int, mode: int = 0o644) -> int:
        flags &= ~(os.O_APPEND | getattr(os, "O_DIRECT", 0) | os.O_TRUNC)
        flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
        fd = os.open(p, flags | os.O_CLOEXEC, mode)
        st = os.fstat(fd)
        f = self.files.get(st.st_ino)
        if f is None:
            f = self.files[st.st_ino] = _File(fd, st.st_size)
        else:
            os.close(fd)
        f.opens += 1
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = st.st_ino
        return fh

    def open(self, path: str, flags: int) -> int:
        with self.mutex:
            try:
                fh = self._open(self._p(path), flags)
            except OSError as e:
                raise _err(e) from None
            if flags & os.O_TRUNC:
                self._truncate(self.files[self.handles[fh]], 0, path)
            return fh

    def create(self, path: str, mode: int, flags: int = 0) -> int:
        with self.mutex:
            self._note(["unlink", path])
            try:
                return self._open(self._p(path), flags | os.O_CREAT, mode)
            except OSError as e:
                if self.journal is not None:
                    self.journal.void()
                raise _err(e) from None

    def release(self, path: str, fh: int) -> int:
        with self.mutex:
            ino = self.handles.pop(fh)
            f = self.files[ino]
            f.opens -= 1
            if f.opens == 0:
                if os.fstat(f.fd).st_nlink == 0:
                    self._forget(ino)
                elif not f.pages:
                    self._forget(ino)  # clean: nothing to keep (the size is the disk's)
            return 0

    def _file(self, fh: int) -> _File:
        return self.files[self.handles[fh]]

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self.mutex:
            f = self._file(fh)
            end = min(offset + size, f.size)
            if end <= offset:
                return b""
            out = bytearray(os.pread(f.fd, end - offset, offset).ljust(end - offset, b"\0"))
            for n in range(offset // PAGE, (end - 1) // PAGE + 1):
                page = f.pages.get(n)
                if page is not None:
                    lo, hi = max(offset, n * PAGE), min(end, n * PAGE + PAGE)
                    out[lo - offset : hi - offset] = page[lo - n * PAGE : hi - n * PAGE]
            return bytes(out)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self.mutex:
            f = self._file(fh)
            pos, end = offset, offset + len(data)
            while pos < end:
                n = pos // PAGE
                page = self._page(f, n)
                hi = min(end, n * PAGE + PAGE)
                page[pos - n * PAGE : hi - n * PAGE] = data[pos - offset : hi - offset]
                pos = hi
            f.size = max(f.size, end)
            return len(data)

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self.mutex:
            self._flush(self._file(fh))
            if self.journal is not None:
                self.journal.synced(self.handles[fh])
            return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def _truncate(self, f: _File, length: int, path: str | None) -> None:
        try:
            self._resize(path, f.fd, length, lambda: os.ftruncate(f.fd, length))
        except OSError as e:
            raise _err(e) from None
        for n in [n for n in f.pages if n * PAGE >= length]:
            del f.pages[n]
        last = f.pages.get(length // PAGE)
        if last is not None:
            last[length % PAGE :] = bytes(PAGE - length % PAGE)
        f.size = length

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self.mutex:
            if fh is not None and fh in self.handles:
                self._truncate(self._file(fh), length, path)
                return 0
            p = self._p(path)
            try:
                st = os.lstat(p)
            except OSError as e:
                raise _err(e) from None
            f = self.files.get(st.st_ino)
            if f is not None:
                self._truncate(f, length, path)
                return 0
            try:
                fd = os.open(p, os.O_RDWR | os.O_CLOEXEC)
            except OSError as e:
                raise _err(e) from None
            try:
                self._resize(path, fd, length, lambda: os.ftruncate(fd, length))
            except OSError as e:
                raise _err(e) from None
            finally:
                os.close(fd)
            return 0

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        with self.mutex:
            f = self._file(fh)

            def apply() -> None:
                if self._fallocate(f.fd, mode, offset, size) != 0:
                    raise _oserr(ctypes.get_errno())

            grows = not mode & 0x01 and offset + size > os.fstat(f.fd).st_size
            if grows:  # (a size change: volatile like a truncate)
                self._resize(path, f.fd, offset + size, apply)
            else:
                apply()
            if mode & 0x02 or mode & 0x10:  # PUNCH_HOLE, ZERO_RANGE: the pages read zeros
                for n in range(offset // PAGE, (offset + size - 1) // PAGE + 1):
                    page = f.pages.get(n)
                    if page is not None:
                        lo = max(offset, n * PAGE) - n * PAGE
                        hi = min(offset + size, n * PAGE + PAGE) - n * PAGE
                        page[lo:hi] = bytes(hi - lo)
            if not mode & 0x01:  # without KEEP_SIZE the file may grow
                f.size = max(f.size, offset + size)
            return 0


_STAT = (
    "st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks",
    "st_blksize",
)  # fmt: skip
_STATVFS = (
    "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
    "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax",
)  # fmt: skip


def _rel(path: Any, stash: str) -> Any:
    if not isinstance(path, str) or path.startswith(stash):
        return path  # (an inode number, or a stashed file: as it is)
    return path.lstrip("/")


def _oserr(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def _err(e: OSError) -> OSError:
    return _oserr(e.errno or errno.EIO)


def _call(fn: Any, *args: Any, **kw: Any) -> int:
    try:
        fn(*args, **kw)
    except OSError as e:
        raise _err(e) from None
    return 0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m uringkit.kv.lazyfs",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="example: python -m uringkit.kv.lazyfs /tmp/disk /tmp/mnt --seed 3 &",
    )
    ap.add_argument("backing", help="the directory that plays the disk")
    ap.add_argument("mountpoint")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--writeback", type=float, default=0.5,
        help="dirty pages written back per ms on average (0: none)",
    )  # fmt: skip
    ap.add_argument(
        "--lazy-names", action="store_true",
        help="names (create, rename, unlink…) and sizes (truncate, fallocate) are volatile "
        "too until a directory is fsynced (a size: or its file): the mount after a crash "
        "undoes a random suffix of those not yet synced",
    )  # fmt: skip
    a = ap.parse_args(argv)
    _Journal.recover(os.path.realpath(a.backing), random.Random(a.seed))
    import mfusepy  # type: ignore[import-untyped]

    class _Fuse(mfusepy.FUSE):  # type: ignore[misc]
        # (mfusepy drops rename's flags: RENAME_NOREPLACE must not become a replace)
        def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
            return int(self.operations.rename(old.decode(), new.decode(), flags))

    _Fuse(
        LazyFS(a.backing, a.seed, a.writeback, a.lazy_names),
        a.mountpoint,
        foreground=True,
        fsname="lazyfs",
        hard_remove=True,  # (an unlinked open file is not renamed to .fuse_hidden*)
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
    )


if __name__ == "__main__":
    main()


class Mount:
    """A LazyFS mount run as a child process: `up()` mounts `backing` at `mountpoint`,
    `cut()` is the power cut (SIGKILL of the filesystem, then the dead mount detached),
    after which `up()` mounts what the disk kept."""

    def __init__(self, backing: str | os.PathLike[str], mountpoint: str | os.PathLike[str]):
        self.backing, self.mountpoint = os.fspath(backing), os.fspath(mountpoint)
        os.makedirs(self.backing, exist_ok=True)
        os.makedirs(self.mountpoint, exist_ok=True)
        self.proc: Any = None

    def up(self, seed: int = 0, writeback: float = 0.5, lazy_names: bool = False) -> None:
        import subprocess

        # (its messages go to a file beside the disk: a pipe nobody reads would fill
        # and stop the filesystem)
        log = f"{self.backing}.lazyfs.log"
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uringkit.kv.lazyfs", self.backing, self.mountpoint,
                 "--seed", str(seed), "--writeback", str(writeback)]
                + (["--lazy-names"] if lazy_names else []),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        deadline = time.monotonic() + 20
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.cut()
                with open(log, errors="replace") as f:
                    said = f.read()[-2000:].strip()
                raise OSError(errno.EIO, f"lazyfs did not mount {self.mountpoint}: {said}")
            time.sleep(0.005)

    def cut(self) -> None:
        import signal

        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None
        _umount_detach(self.mountpoint)

    def __enter__(self) -> Mount:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()


def _umount_detach(path: str) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    while os.path.ismount(path) or _dead_mount(path):
        if libc.umount2(path.encode(), 2) != 0:  # MNT_DETACH
            e = ctypes.get_errno()
            if e == errno.EINVAL:  # not a mount point (any more)
                return
            raise OSError(e, f"umount {path}: {os.strerror(e)}")


def _dead_mount(path: str) -> bool:
    try:
        os.stat(path)
    except OSError as e:
        return e.errno == errno.ENOTCONN
    return False


def available() -> str | None:
    """Why a LazyFS mount cannot be made here, or None when it can."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as e:
        return f"mfusepy/libfuse3 unavailable: {e}"
    if os.geteuid() != 0:
        return "mounting FUSE needs root here"
    return None
