"""Safe run directories: claimed before work starts, written atomically, replaced only if ours.

* **Claim**: a run claims its target before any work with a reservation file
  beside it (``.NAME.claim``, created exclusively, holding the process id),
  so two runs never pick the same default name and a second run into an
  explicit ``--out`` that another live run is writing is refused at once. A
  claim whose process is gone is stale and taken over.
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
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mecsim.errors import ConfigError

log = logging.getLogger(__name__)

MARKER = ".mecsim-run"
"""File every directory mecsim writes contains; only such a directory may be overwritten."""


def _claim_path(run_dir: Path) -> Path:
    return run_dir.parent / f".{run_dir.name}.claim"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _try_claim(run_dir: Path) -> bool:
    """Create the claim file exclusively (taking over a dead process's); True if ours."""
    claim = _claim_path(run_dir)
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                pid = int(claim.read_text().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and _alive(pid) and pid != os.getpid():
                return False
            claim.unlink(missing_ok=True)  # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def release(run_dir: Path) -> None:
    """Drop this process's claim on ``run_dir`` (if it holds one)."""
    claim = _claim_path(Path(run_dir))
    try:
        if claim.read_text().strip() == str(os.getpid()):
            claim.unlink()
    except OSError:
        pass


def remove_stale_partials(parent: Path) -> list[Path]:
    """Remove half-written directories (``.NAME.partial-PID-*``, ``.NAME.old-PID-*``) and
    claims left in ``parent`` by processes that are gone (killed mid-write); return them."""
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for path in parent.glob(".*"):
        pid = _owner(path)
        if pid is None or _alive(pid):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    for path in removed:
        log.warning("removed %s, left by a mecsim run that was killed", path)
    return removed


def _owner(path: Path) -> int | None:
    """The pid of the mecsim process that made ``path``, if it is one of mecsim's leftovers."""
    name = path.name
    if name.endswith(".claim"):
        try:
            text = path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None
    for tag in (".partial-", ".old-", ".checkpoint.pt.tmp-"):
        if tag in name:
            digits = name.rsplit(tag, 1)[1].split("-", 1)[0]
            return int(digits) if digits.isdigit() else None
    return None


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
    if str(run_dir.resolve()).startswith(("/proc/", "/sys/", "/dev/")):
        raise ConfigError("output.dir", f"{run_dir} is not a place for results; choose another")
    existing = next((p for p in run_dir.absolute().parents if p.exists()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            "output.dir", f"{existing} is not writable by this user; choose another --out"
        )


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
    tmp = Path(
        tempfile.mkdtemp(prefix=f".{run_dir.name}.partial-{os.getpid()}-", dir=run_dir.parent)
    )
    try:
        yield tmp
        (tmp / MARKER).write_text(json.dumps({"pid": os.getpid()}) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)
        check_target(run_dir, overwrite)
        if run_dir.exists():
            trash = Path(
                tempfile.mkdtemp(prefix=f".{run_dir.name}.old-{os.getpid()}-", dir=run_dir.parent)
            )
            os.replace(run_dir, trash / "run")
            os.replace(tmp, run_dir)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, run_dir)
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
