"""File operations on folders an adversary controls: never follow a link, never open a
non-regular file, never block, cap every size and count.

The harness runs as root over an agent's workspace (and over checkpoints, sweep trial folders and
step logs written in it). Any path component there may be a symlink planted a moment ago, any file
a FIFO, a socket or a device, any file gigabytes long or sparse. Every harness access to such a
folder goes through this module:

- paths are walked one component at a time from a trusted root with `O_NOFOLLOW` (`openat`), so a
  link anywhere on the way is refused, not followed; `..` and absolute parts are refused;
- files are opened `O_NONBLOCK` (a FIFO never blocks the open) and checked with `fstat` on the
  descriptor actually opened: only regular files are read, and only up to a cap;
- writes go to a fresh temporary name (`O_CREAT | O_EXCL | O_NOFOLLOW`) in a folder reached the
  same way, are handed to the sandbox uid with `fchown` on that descriptor, then renamed over the
  target: a rename replaces a link, it never writes through one;
- copies take regular files and folders only, counting bytes and files while copying, so what is
  validated afterwards is exactly what was copied (no check-then-copy race).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

READ_CAP = 4 * 1024 * 1024  # default cap on one harness read of an agent-written file
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafePath(OSError):
    """A path the harness refuses to touch: a link, a special file, outside its root, too large."""


def _parts(rel: str | os.PathLike[str]) -> list[str]:
    text = os.fspath(rel)
    if os.path.isabs(text):
        raise UnsafePath(errno.EPERM, f"'{text}' must be relative to its root")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafePath(errno.EPERM, f"'{text}' leaves its root ('..')")
    return parts


def relative_to_root(path: str | os.PathLike[str], root: Path) -> str:
    """`path` (absolute under `root`, or relative to it) as a relative path, without resolving
    links (resolving would follow them)."""
    p = Path(os.path.normpath(os.fspath(path)))
    if not p.is_absolute():
        p = Path(os.path.normpath(Path(root) / p))
    root = Path(os.path.normpath(Path(root)))
    try:
        return str(p.relative_to(root))
    except ValueError:
        raise UnsafePath(errno.EPERM, f"'{path}' is outside {root}") from None


def open_dir(root: Path, rel: str | os.PathLike[str] = "", create: bool = False, mode: int = 0o755,
             owner: int | None = None) -> int:
    """A descriptor of the folder `root/rel`, reached without following any link below `root`
    (`root` itself is the harness's and trusted). With `create`, missing folders are made (and
    given to `owner`). The caller closes the descriptor."""
    fd = os.open(os.fspath(root), _DIR_FLAGS)
    try:
        for part in _parts(rel):
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                if owner is not None and os.geteuid() == 0:
                    os.fchown(nxt, owner, owner)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePath(exc.errno, f"'{part}' is a link or not a folder" if part == os.fspath(rel)
                                     else f"'{rel}': '{part}' is a link or not a folder") from None
                raise
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_file(root: Path, rel: str | os.PathLike[str]) -> int:
    parts = _parts(rel)
    if not parts:
        raise UnsafePath(errno.EISDIR, f"'{rel}' names the root folder, not a file")
    dfd = open_dir(root, "/".join(parts[:-1]))
    try:
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(exc.errno, f"'{rel}' is a link") from None
            raise
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePath(errno.EPERM, f"'{rel}' is not a regular file")
    os.set_blocking(fd, True)
    return fd


def read_bytes(root: Path, rel: str | os.PathLike[str], max_bytes: int = READ_CAP) -> bytes:
    """The file `root/rel`, a regular file reached without links, refused when over `max_bytes`."""
    fd = _open_file(root, rel)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise UnsafePath(errno.EFBIG, f"'{rel}' is {size} bytes, over the limit of {max_bytes}")
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:  # it grew while being read
            raise UnsafePath(errno.EFBIG, f"'{rel}' is over the limit of {max_bytes} bytes")
        return data
    finally:
        os.close(fd)


def read_head(root: Path, rel: str | os.PathLike[str], max_bytes: int) -> tuple[bytes, int]:
    """The first `max_bytes` of the file `root/rel` (regular, reached without links) and its size."""
    fd = _open_file(root, rel)
    try:
        return _read_at(fd, 0, max_bytes), os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_from(root: Path, rel: str | os.PathLike[str], offset: int, max_bytes: int = READ_CAP) -> bytes:
    """At most `max_bytes` of `root/rel` from byte `offset` (for logs read while they grow);
    b"" when the file is missing."""
    try:
        fd = _open_file(root, rel)
    except FileNotFoundError:
        return b""
    try:
        return _read_at(fd, offset, max_bytes)
    finally:
        os.close(fd)


def _read_at(fd: int, offset: int, max_bytes: int) -> bytes:
    chunks, left = [], max_bytes
    while left > 0:
        chunk = os.pread(fd, min(left, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def list_dir(root: Path, rel: str | os.PathLike[str], max_entries: int = 10_000) -> list[str] | None:
    """The names in the folder `root/rel` (folders end in '/'), or None when `rel` is not a folder;
    a link on the way is refused."""
    parts = _parts(rel)
    try:
        dfd = open_dir(root, "/".join(parts))
    except UnsafePath:
        if not parts:
            raise
        # the last part may be a file (read it instead) or a link (refused by the reader too)
        return None
    except NotADirectoryError:
        return None
    try:
        out = []
        with os.scandir(dfd) as it:
            for entry in it:
                if len(out) >= max_entries:
                    break
                out.append(entry.name + ("/" if entry.is_dir(follow_symlinks=False) else ""))
        return sorted(out)
    finally:
        os.close(dfd)


def read_text(root: Path, rel: str | os.PathLike[str], max_bytes: int = READ_CAP) -> str:
    return read_bytes(root, rel, max_bytes).decode("utf-8", "replace")


def try_read_text(root: Path, rel: str | os.PathLike[str], max_bytes: int = READ_CAP) -> str | None:
    """`read_text`, or None when the file is missing, a link, special or too large."""
    try:
        return read_text(root, rel, max_bytes)
    except OSError:
        return None


def write_bytes(root: Path, rel: str | os.PathLike[str], data: bytes, mode: int = 0o644,
                owner: int | None = None, dir_owner: int | None = None) -> None:
    """Write `root/rel` atomically: folders on the way reached (or made) without links, the data
    in a fresh file that is chowned by descriptor, then renamed over whatever `rel` was (a link
    there is replaced, never written through)."""
    parts = _parts(rel)
    if not parts:
        raise UnsafePath(errno.EISDIR, f"'{rel}' names the root folder, not a file")
    dfd = open_dir(root, "/".join(parts[:-1]), create=True, owner=dir_owner)
    tmp = f".{parts[-1]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if owner is not None and os.geteuid() == 0:
                os.fchown(fd, owner, owner)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


def write_text(root: Path, rel: str | os.PathLike[str], text: str, mode: int = 0o644, owner: int | None = None,
               dir_owner: int | None = None) -> None:
    write_bytes(root, rel, text.encode("utf-8"), mode=mode, owner=owner, dir_owner=dir_owner)


def make_dirs(root: Path, rel: str | os.PathLike[str], owner: int | None = None) -> None:
    """`root/rel` as a folder (made where missing, given to `owner`), no link followed."""
    os.close(open_dir(root, rel, create=True, owner=owner))


def remove_tree(root: Path, rel: str | os.PathLike[str]) -> None:
    """Remove `root/rel` (a folder or a file) if it is there; the way to it is walked without
    links, and the removal itself never follows one (shutil.rmtree with a folder descriptor)."""
    import shutil

    parts = _parts(rel)
    if not parts:
        raise UnsafePath(errno.EPERM, "refusing to remove the root folder")
    try:
        dfd = open_dir(root, "/".join(parts[:-1]))
    except (FileNotFoundError, UnsafePath):
        return  # nothing there to remove, or a link on the way: nothing of ours behind it
    try:
        try:
            st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(parts[-1], dir_fd=dfd)
        else:
            os.unlink(parts[-1], dir_fd=dfd)
    finally:
        os.close(dfd)


def lchown(path: Path, uid: int, gid: int) -> None:
    """chown that changes a link itself, never what it points to."""
    os.chown(path, uid, gid, follow_symlinks=False)


@dataclass
class FileEntry:
    rel: str  # relative to the walked root
    size: int  # apparent size (st_size)


def walk_files(root: Path, max_files: int = 100_000, skip_dirs: tuple[str, ...] = (),
               max_depth: int = 64) -> Iterator[FileEntry]:
    """Regular files under `root`, found without following links (links, FIFOs, sockets and
    devices are passed over); stops after `max_files` entries of any kind."""
    seen = 0
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        rel_dir, depth = stack.pop()
        try:
            dfd = open_dir(root, rel_dir)
        except OSError:
            continue
        entries: list[tuple[str, os.stat_result]] = []
        try:
            with os.scandir(dfd) as it:  # stat while the folder's descriptor is open: entries use it
                for entry in it:
                    with contextlib.suppress(OSError):
                        entries.append((entry.name, entry.stat(follow_symlinks=False)))
                    if len(entries) > max_files:
                        break
        except OSError:
            pass
        finally:
            os.close(dfd)
        entries.sort(key=lambda e: e[0])
        for name, st in entries:
            seen += 1
            if seen > max_files:
                return
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if stat.S_ISDIR(st.st_mode):
                if name not in skip_dirs and depth + 1 < max_depth:
                    stack.append((rel, depth + 1))
            elif stat.S_ISREG(st.st_mode):
                yield FileEntry(rel, st.st_size)


class CopyRefused(Exception):
    """Why a tree was not copied (the message is for the agent)."""


def copy_tree(src_root: Path, src_rel: str, dst: Path, max_bytes: int, max_files: int = 10_000,
              max_depth: int = 32) -> int:
    """Copy the folder `src_root/src_rel` to the new folder `dst`, regular files and folders only:
    a link, FIFO, socket or device anywhere refuses the copy, as does passing `max_bytes` (counted
    as bytes actually read, so a sparse or growing file cannot slip past) or `max_files`. Every
    file is read through the descriptor that was checked. Returns the bytes copied; on refusal
    `dst` is removed and CopyRefused says why."""
    dst = Path(dst)
    os.makedirs(dst.parent, exist_ok=True)
    os.mkdir(dst, 0o755)
    state = {"bytes": 0, "files": 0}
    try:
        sfd = open_dir(src_root, src_rel)
    except OSError as exc:
        os.rmdir(dst)
        raise CopyRefused(_why(exc) if isinstance(exc, UnsafePath) else f"cannot open '{src_rel}': {_why(exc)}") from None
    try:
        _copy_dir(sfd, dst, "", state, max_bytes, max_files, max_depth)
    except BaseException:
        import shutil

        shutil.rmtree(dst, ignore_errors=True)
        raise
    finally:
        os.close(sfd)
    return state["bytes"]


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc) if not isinstance(exc, UnsafePath) else str(exc.args[-1])


def _copy_dir(sfd: int, dst: Path, rel: str, state: dict[str, int], max_bytes: int, max_files: int,
              depth_left: int) -> None:
    if depth_left <= 0:
        raise CopyRefused(f"'{rel}' is nested too deep")
    with os.scandir(sfd) as it:
        names = sorted(e.name for e in it)
    for name in names:
        state["files"] += 1
        if state["files"] > max_files:
            raise CopyRefused(f"more than {max_files} files")
        here = f"{rel}/{name}" if rel else name
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=sfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CopyRefused(f"'{here}' is a link; submit plain files") from None
            if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):  # a socket or device
                raise CopyRefused(f"'{here}' is not a regular file") from None
            raise CopyRefused(f"cannot read '{here}': {_why(exc)}") from None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(dst / name, 0o755)
                _copy_dir(fd, dst / name, here, state, max_bytes, max_files, depth_left - 1)
                continue
            if not stat.S_ISREG(st.st_mode):
                raise CopyRefused(f"'{here}' is not a regular file")
            os.set_blocking(fd, True)
            with open(dst / name, "xb") as out:
                while True:
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        break
                    state["bytes"] += len(chunk)
                    if state["bytes"] > max_bytes:
                        raise CopyRefused(f"larger than the limit of {max_bytes / 1e6:.0f} MB")
                    out.write(chunk)
        finally:
            os.close(fd)
