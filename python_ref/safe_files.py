"""Writing outputs so that nothing is lost: a file is written beside its target and renamed over it (a kill,
a crash or a full disk leaves the previous file whole), the temporaries carry a name a later write
recognises and removes, and an output is proven writable, and checked not to be an input, before any work.

A temporary is `<target>.partial-<pid>-<random>`: a later write of the same target removes those whose
process is gone. TINYGPT_KILL_IN_WRITE (a test hook, tests/python_ref/test_faults.py) makes a write kill
its own process at one point: after the bytes are written ("written") or after they are synced ("synced").
"""
from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import signal
from pathlib import Path

PARTIAL = ".partial-"
KILL_HOOK = "TINYGPT_KILL_IN_WRITE"


class OutputError(ValueError):
    """An output that cannot or must not be written; the message names it and says what to do."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: leave its file alone
    return True


def stale_partials(target: Path) -> list[Path]:
    """The temporaries of `target` left by writes whose process is gone (or by this process)."""
    pattern = re.compile(re.escape(target.name + PARTIAL) + r"(\d+)-[0-9a-f]+")
    found = []
    try:
        names = os.listdir(target.parent)
    except OSError:
        return []
    for name in names:
        m = pattern.fullmatch(name)
        if m and (int(m[1]) == os.getpid() or not _alive(int(m[1]))):
            found.append(target.parent / name)
    return found


def remove_stale_partials(target: str | Path) -> int:
    """Removes what interrupted writes of `target` left; returns how many."""
    removed = 0
    for p in stale_partials(Path(target)):
        try:
            p.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def _kill_here(point: str) -> None:
    if os.environ.get(KILL_HOOK) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def atomic_write(path: str | Path, chunks) -> None:
    """Writes chunks to a temporary beside `path`, syncs it, then renames it over `path`: all or nothing.
    A full disk or another write error is refused naming `path`, with the previous file unchanged."""
    path = Path(path)
    remove_stale_partials(path)
    tmp = path.with_name(f"{path.name}{PARTIAL}{os.getpid()}-{secrets.token_hex(4)}")
    needed = sum(len(memoryview(c).cast("B")) for c in chunks)
    try:
        # O_EXCL: never through a name someone placed there; mode 0666 less the umask, as an ordinary file
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            _kill_here("written")
            os.fsync(f.fileno())
        _kill_here("synced")
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise write_error(path, e, needed) from None
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """The rename itself made durable (where the platform allows a directory to be synced)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_error(path: Path, e: OSError, needed: int) -> OutputError:
    kept = "the previous file there is unchanged" if path.exists() else "nothing was written"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        try:
            free = f", {shutil.disk_usage(path.parent).free:,} free"
        except OSError:
            free = ""
        return OutputError(f"cannot write {path}: its disk is full ({needed:,} bytes needed{free}); {kept}. "
                           "Free some space and save again.")
    return OutputError(f"cannot write {path}: {e.strerror or e}; {kept}")


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (device and inode, not the name)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def check_output(option: str, out: str | Path, inputs: dict[str, str | Path | None] = (), replaces=None,
                 force: bool = False) -> None:
    """Before any work: `out` (given as `option`) can be written — its folder exists and takes a new file (a
    probe created and removed there), it is no folder and no special file — and it is none of `inputs`
    (name → path). `replaces(existing)` may say why replacing the existing file would destroy something
    (refused unless force)."""
    out = Path(out)
    folder = out.resolve().parent
    if out.is_dir():
        raise OutputError(f"{option} {out} is a folder; give a file name inside it")
    if not folder.is_dir():
        raise OutputError(f"{option} {out}: its folder {folder} does not exist (checked before any work)")
    if out.exists() and not out.is_file():
        raise OutputError(f"{option} {out} is not a regular file; give the path of a file to write")
    for name, path in dict(inputs).items():
        if path is not None and same_file(out, path) and not force:
            raise OutputError(f"{option} {out} is the same file as {name} {path}: writing it would destroy the "
                              "input; give another path, or pass --force")
    probe = folder / f"{out.name}{PARTIAL}{os.getpid()}-probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        os.unlink(probe)
    except OSError as e:
        raise OutputError(f"{option} {out} cannot be written: {e.strerror or e} in {folder} "
                          "(checked before any work)") from None
    if replaces is not None and out.exists() and not force:
        reason = replaces(out)
        if reason:
            raise OutputError(f"{option} {out} {reason}; pass --force to replace it anyway, or give another path")
