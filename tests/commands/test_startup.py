"""Start-up: a run that uses no torchvision model or dataset imports neither torchvision
nor scikit-learn (about 2 s together), and the digits data is scikit-learn's own; the
CLI starts a run without pandas, pyarrow, matplotlib or Triton (the tables' and writers'
imports run on a background thread while the run trains)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_the_bundled_digits_are_scikit_learns_arrays():
    import numpy as np
    from sklearn.datasets import load_digits

    from mecsim.learning.data.datasets import _bundled_digits

    x, y = load_digits(return_X_y=True)
    ours_x, ours_y = _bundled_digits()
    assert np.array_equal(x, ours_x) and np.array_equal(y, ours_y) and ours_y.dtype == y.dtype


def test_a_digits_run_imports_neither_torchvision_nor_scikit_learn_nor_numba():
    code = (
        "import sys, mecsim\n"
        "mecsim.run('scenarios/quickstart.toml', ['protocol.rounds=1'], write=False,"
        " progress=False)\n"
        "print(sorted(m for m in ('torchvision', 'sklearn', 'mlxtend', 'ray', 'triton', 'numba')"
        " if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def fresh_process(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_the_cli_starts_a_run_without_pandas_pyarrow_matplotlib_or_triton():
    code = (
        "import sys, mecsim.commands.cli\n"
        "mecsim.commands.cli._import_run_machinery()\n"
        "print(sorted(m for m in ('pandas', 'pyarrow', 'matplotlib', 'triton', 'torchvision')"
        " if m in sys.modules))"
    )
    assert fresh_process(code) == "[]"


def test_torch_still_recognizes_triton_kernels_after_mecsim_imported_its_flop_formulas(tmp_path):
    pytest.importorskip("triton")
    script = tmp_path / "kernel.py"  # Triton reads a kernel's source from its file
    script.write_text(
        "import sys\n"
        "import mecsim.learning.models.flops\n"
        "assert 'triton' not in sys.modules\n"
        "import triton\n"
        "from torch.utils.flop_counter import register_flop_formula\n"
        "@triton.jit\n"
        "def kernel(x):\n"
        "    pass\n"
        "register_flop_formula(kernel)(lambda *args, **kwargs: 0)\n"  # raises for a non-kernel
        "print('registered')\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "registered"


def test_a_cost_only_run_imports_neither_sympy_nor_dynamo():
    # meta-device empty_like/zeros_like are Python references importing SymPy (0.2 s, 27 MB);
    # algorithms doing arithmetic on meta tensors (SCAFFOLD, FedDyn) still import Dynamo once
    code = (
        "import sys, mecsim\n"
        "for algorithm in ('fedavg', 'ditto'):\n"
        "    mecsim.run('scenarios/quickstart.toml', {'execution.cost_only': True,"
        " 'protocol.rounds': 2, 'algorithm.name': algorithm}, write=False, progress=False)\n"
        "print(sorted(m for m in ('sympy', 'torch._dynamo') if m in sys.modules))"
    )
    assert fresh_process(code) == "[]"
