"""Atomic run directories: everything is written to a hidden temporary
directory beside the target, which is renamed into place only when complete.
A crash or a bad input never leaves a half-written run directory."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mecsim.errors import ConfigError


def default_run_dir(base: str | Path, name: str, seed: int) -> Path:
    """``base/<name>-seed<seed>``, with ``-2``, ``-3``, ... appended if taken."""
    base = Path(base)
    candidate = base / f"{name}-seed{seed}"
    n = 2
    while candidate.exists():
        candidate = base / f"{name}-seed{seed}-{n}"
        n += 1
    return candidate


def check_target(run_dir: Path, overwrite: bool) -> None:
    """Fail early (before any work) if ``run_dir`` exists and may not be replaced."""
    if run_dir.exists() and not overwrite:
        raise ConfigError(
            "output.dir",
            f"{run_dir} already exists; choose another --out or set output.overwrite = true",
        )


@contextmanager
def atomic_directory(run_dir: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``run_dir`` if the block succeeds."""
    run_dir = Path(run_dir)
    check_target(run_dir, overwrite)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{run_dir.name}.partial-", dir=run_dir.parent))
    try:
        yield tmp
        if run_dir.exists():
            shutil.rmtree(run_dir)
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
