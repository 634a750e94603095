"""execution.threads reaches numba's parallel loops as well as torch's."""

from __future__ import annotations

import subprocess
import sys

import numba
import torch

from mecsim.common.threads import apply_threads


def test_an_imported_numba_takes_the_thread_count():
    before = numba.get_num_threads(), torch.get_num_threads()
    try:
        assert apply_threads(1) == 1
        assert numba.get_num_threads() == 1 and torch.get_num_threads() == 1
    finally:
        numba.set_num_threads(before[0])
        torch.set_num_threads(before[1])


def test_numba_not_yet_imported_reads_the_count_when_it_is():
    code = (
        "import sys\n"
        "from mecsim.common.threads import apply_threads\n"
        "apply_threads(1)\n"
        "assert 'numba' not in sys.modules  # a run without the event medium never imports it\n"
        "import numba\n"
        "print(numba.config.NUMBA_NUM_THREADS, numba.get_num_threads())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]
