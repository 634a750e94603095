"""Start-up: a run that uses no torchvision model or dataset imports neither torchvision
nor scikit-learn (about 2 s together), and the digits data is scikit-learn's own."""

from __future__ import annotations

import subprocess
import sys


def test_the_bundled_digits_are_scikit_learns_arrays():
    import numpy as np
    from sklearn.datasets import load_digits

    from mecsim.data.datasets import _bundled_digits

    x, y = load_digits(return_X_y=True)
    ours_x, ours_y = _bundled_digits()
    assert np.array_equal(x, ours_x) and np.array_equal(y, ours_y) and ours_y.dtype == y.dtype


def test_a_digits_run_imports_neither_torchvision_nor_scikit_learn():
    code = (
        "import sys, mecsim\n"
        "mecsim.run('scenarios/quickstart.toml', ['protocol.rounds=1'], write=False,"
        " progress=False)\n"
        "print(sorted(m for m in ('torchvision', 'sklearn', 'mlxtend', 'ray') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
