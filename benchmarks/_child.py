"""Measuring in a fresh Python process: what the benchmarks that need a whole process share."""

from __future__ import annotations

import json
import subprocess
import sys
import time


def run_child(script: str, *args: str) -> dict:
    """Run ``script`` (source for ``python -c``) with ``args``; return the JSON object its last
    line of output prints, with ``process_s``: the wall time of the whole process."""
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", script, *args], check=True, capture_output=True, text=True
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    figures["process_s"] = time.perf_counter() - started
    return figures
