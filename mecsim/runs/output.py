"""Safe run directories: claimed before work starts, written atomically, replaced only if ours.

* **Claim**: a run claims its target before any work with a reservation file
  beside it (``.NAME.claim``, created exclusively, holding an owner record:
  a random token, the process id and that process's start time), so two runs
  never pick the same default name and a second run into an explicit
  ``--out`` that another live run is writing is refused at once. A claim
  whose process is gone, or whose pid now belongs to a process started at
  another time, is stale and taken over.
* **Ownership of leftovers**: mecsim removes only what it can prove it wrote:
  claims holding its owner record, temporary directories holding
  :data:`OWNER` (written the moment they are made) and checkpoint
  temporaries starting with its checkpoint header, each of a process that is
  gone. A user's ``.photos.old-999999-keep/`` or ``.lock.claim`` holding a
  number is never touched.
* **Atomic write**: everything is written to a hidden temporary directory
  beside the target, renamed into place only when complete; a crash or a bad
  input never leaves a half-written run directory.
* **Marker**: every directory mecsim writes holds :data:`MARKER`.
  ``output.overwrite`` replaces only such a directory, and never the working
  directory, one of its parents, or a file.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mecsim.common import interrupts
from mecsim.common.errors import ConfigError

log = logging.getLogger(__name__)

MARKER = ".mecsim-run"
"""File every directory mecsim writes contains; only such a directory may be overwritten."""
OWNER = ".mecsim-owner"
"""File a temporary directory of mecsim's holds from its creation: its owner record."""
_TOKEN = secrets.token_hex(8)
"""This process's token in the owner records it writes."""


def _claim_path(run_dir: Path) -> Path:
    return run_dir.parent / f".{run_dir.name}.claim"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError, ValueError):
        return False
    except PermissionError:
        return True
    return True


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc; None elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_record(pid: int | None = None) -> str:
    """The owner record mecsim writes into its claims and temporaries (JSON)."""
    pid = os.getpid() if pid is None else pid
    record = {"mecsim": "owner", "token": _TOKEN, "pid": pid, "started": _start_time(pid)}
    return json.dumps(record) + "\n"


def _read_owner(path: Path) -> dict | None:
    """The owner record in ``path``, or None if it holds none (not mecsim's)."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.loads(f.read(4096))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("mecsim") != "owner":
        return None
    if not isinstance(record.get("pid"), int) or isinstance(record["pid"], bool):
        return None
    return record


def _running(record: dict) -> bool:
    """Whether the process that wrote ``record`` still runs (a reused pid does not)."""
    pid = record["pid"]
    if not _alive(pid):
        return False
    started, now = record.get("started"), _start_time(pid)
    return started is None or now is None or started == now


def _is_ours(record: dict) -> bool:
    return record["pid"] == os.getpid() and record.get("token") == _TOKEN


def _try_claim(run_dir: Path) -> bool:
    """Create the claim file exclusively (taking over a stale one of mecsim's); True if
    ours. A claim file that is not mecsim's is never removed."""
    claim = _claim_path(run_dir)
    for _ in range(2):
        try:
            with interrupts.deferred():  # never an empty claim: created with its record
                fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                with os.fdopen(fd, "w") as f:
                    f.write(owner_record())
            return True
        except FileExistsError:
            record = _read_owner(claim)
            if record is None:
                raise ConfigError(
                    "output.dir",
                    f"{claim} exists and is not mecsim's claim; remove it or choose another --out",
                ) from None
            if _running(record) and not _is_ours(record):
                return False
            claim.unlink(missing_ok=True)  # stale: its process is gone
    return False


def release(run_dir: Path) -> None:
    """Drop this process's claim on ``run_dir`` (if it holds one)."""
    claim = _claim_path(Path(run_dir))
    record = _read_owner(claim)
    if record is not None and _is_ours(record):
        claim.unlink(missing_ok=True)


def remove_stale_partials(parent: Path) -> list[Path]:
    """Remove half-written directories (``.NAME.partial-*``, ``.NAME.old-*``), checkpoint
    temporaries and claims left in ``parent`` by mecsim processes that are gone (killed
    mid-write), proven mecsim's by the owner record inside; return them."""
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for path in parent.glob(".*"):
        if not _stale_leftover(path):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    for path in removed:
        log.warning("removed %s, left by a mecsim run that was killed", path)
    return removed


def _stale_leftover(path: Path) -> bool:
    """Whether ``path`` is a leftover of a mecsim process that is gone."""
    name = path.name
    if path.is_symlink():
        return False
    if name.endswith(".claim") and path.is_file():
        record = _read_owner(path)
    elif (".partial-" in name or ".old-" in name) and path.is_dir():
        record = _read_owner(path / OWNER)
    elif ".checkpoint.pt.tmp-" in name and path.is_file():
        from mecsim.engine.checkpoint import MAGIC  # a checkpoint temporary starts with its header

        digits = name.rsplit(".checkpoint.pt.tmp-", 1)[1]
        try:
            with open(path, "rb") as f:
                ours = f.read(len(MAGIC)) == MAGIC
        except OSError:
            return False
        return ours and digits.isdigit() and not _alive(int(digits))
    else:
        return False
    return record is not None and not _running(record)


def _owned_temporary(run_dir: Path, kind: str) -> Path:
    """A new hidden directory beside ``run_dir`` (``.NAME.KIND-PID-*``) holding :data:`OWNER`."""
    with interrupts.deferred():  # never a temporary without the record that proves it ours
        tmp = Path(
            tempfile.mkdtemp(prefix=f".{run_dir.name}.{kind}-{os.getpid()}-", dir=run_dir.parent)
        )
        (tmp / OWNER).write_text(owner_record())
    return tmp


def claim_default_run_dir(base: str | Path, name: str) -> Path:
    """Claim ``base/<name>``, or ``-2``, ``-3``, ... appended if taken or claimed."""
    base = Path(base)
    check_parent(base / name)
    base.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(base)
    candidate, n = base / name, 2
    while candidate.exists() or not _try_claim(candidate):
        candidate = base / f"{name}-{n}"
        n += 1
    return candidate


def claim_run_dir(run_dir: Path, overwrite: bool) -> Path:
    """Claim an explicit ``run_dir`` before any work (see :func:`check_target`)."""
    check_target(run_dir, overwrite)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(run_dir.parent)
    if not _try_claim(run_dir):
        raise ConfigError(
            "output.dir",
            f"another running mecsim process is writing {run_dir}; choose another --out",
        )
    return run_dir


def check_parent(run_dir: Path) -> None:
    """Refuse a target under a file, inside ``/proc``, ``/sys`` or ``/dev``, or below a
    directory this process may not write."""
    for parent in run_dir.parents:
        if parent.exists() and not parent.is_dir():
            raise ConfigError("output.dir", f"{parent} is a file; choose a directory for --out")
    try:
        resolved = str(run_dir.resolve())
    except (RuntimeError, OSError) as error:  # a symlink loop, a name too long
        raise ConfigError(
            "output.dir", f"{run_dir} cannot be resolved ({error}); choose another --out"
        ) from None
    if resolved.startswith(("/proc/", "/sys/", "/dev/")):
        raise ConfigError("output.dir", f"{run_dir} is not a place for results; choose another")
    existing = next((p for p in run_dir.absolute().parents if p.exists()), None)
    longest = _name_max(existing) - TEMPORARY_AFFIX
    if len(os.fsencode(run_dir.name)) > longest:
        raise ConfigError(
            "output.dir",
            f"the name {run_dir.name[:40]}... is {len(os.fsencode(run_dir.name))} bytes; at most "
            f"{longest} leave room for mecsim's temporaries beside it: choose a shorter --out",
        )
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            "output.dir", f"{existing} is not writable by this user; choose another --out"
        )


TEMPORARY_AFFIX = 48
"""Bytes mecsim adds around a run directory's name in its temporaries' names
(``.NAME.checkpoint.pt.tmp-PID``, ``.NAME.partial-PID-XXXXXXXX``)."""


def _name_max(directory: Path | None) -> int:
    """Longest file name the file system of ``directory`` takes (255 where unknown)."""
    try:
        return os.pathconf(directory or ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def finished(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run mecsim finished (its marker, no checkpoint beside)."""
    from mecsim.engine.checkpoint import checkpoint_path

    return (run_dir / MARKER).is_file() and not checkpoint_path(run_dir).exists()


def check_target(run_dir: Path, overwrite: bool) -> None:
    """Fail early (before any work) if ``run_dir`` may not be written.

    It may be written if it does not exist, or, with ``overwrite``, if it is a
    directory mecsim wrote (it holds :data:`MARKER`) and is neither the
    working directory nor one of its parents.
    """
    run_dir = Path(run_dir)
    check_parent(run_dir)
    if not run_dir.exists() and not run_dir.is_symlink():
        return
    if not run_dir.is_dir() or run_dir.is_symlink():
        raise ConfigError("output.dir", f"{run_dir} exists and is not a directory; choose another")
    if not overwrite:
        raise ConfigError(
            "output.dir",
            f"{run_dir} already exists; choose another --out or set output.overwrite = true",
        )
    here = Path.cwd().resolve()
    target = run_dir.resolve()
    if target == here or target in here.parents:
        raise ConfigError(
            "output.dir", f"{run_dir} is the working directory or its parent; never overwritten"
        )
    if not (run_dir / MARKER).is_file():
        raise ConfigError(
            "output.dir",
            f"{run_dir} was not written by mecsim (no {MARKER}); overwrite replaces only "
            "mecsim's own directories: choose another --out",
        )


@contextmanager
def atomic_directory(run_dir: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``run_dir`` if the block succeeds.

    The directory gets :data:`MARKER` and the permissions the umask allows.
    An existing ``run_dir`` is replaced only under :func:`check_target`'s rules,
    checked again at the moment of the replacement.
    """
    run_dir = Path(run_dir)
    check_target(run_dir, overwrite)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = _owned_temporary(run_dir, "partial")
    try:
        yield tmp
        (tmp / MARKER).write_text(json.dumps({"pid": os.getpid()}) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)
        check_target(run_dir, overwrite)
        with interrupts.deferred():  # the old run swapped for the new one, never neither
            if run_dir.exists():
                trash = _owned_temporary(run_dir, "old")
                os.replace(run_dir, trash / "run")
                os.replace(tmp, run_dir)
            else:
                trash = None
                os.replace(tmp, run_dir)
            (run_dir / OWNER).unlink(missing_ok=True)  # a finished run holds only its MARKER
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
    except OSError as error:  # disk full, quota, a read-only or vanished folder
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(
            "output.dir",
            f"could not write {run_dir} ({error.strerror or error}); nothing was left "
            "half-written: free space or choose another --out",
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_file(path: Path, write: Callable[[Path], None]) -> None:
    """Write one file atomically: ``write`` fills a temp file that replaces ``path``."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def json_safe(value: object) -> object:
    """``value`` with every non-finite float replaced by None (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
