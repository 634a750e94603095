"""Registries: a name is imported when first looked up, so a run imports the algorithm it
uses; asking for every name imports every module."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from mecsim.algorithms import ALGORITHMS
algorithms = lambda: sorted(m for m in sys.modules if m.startswith("mecsim.algorithms."))
before = algorithms()
ALGORITHMS.get("fedavg")
after_one = algorithms()
assert "kapc_bls" in ALGORITHMS and "perfedavg_hf" in ALGORITHMS
names = ALGORITHMS.names()
print(before, after_one, len(names), "mecsim.algorithms.scd" in sys.modules, sep="|")
"""


def test_a_lookup_imports_the_named_algorithm_and_listing_imports_all():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    before, after_one, count, all_loaded = out.stdout.strip().split("|")
    assert "mecsim.algorithms.fedavg" not in before and "mecsim.algorithms.kapc" not in before
    assert "mecsim.algorithms.fedavg" in after_one and "mecsim.algorithms.kapc" not in after_one
    assert int(count) >= 32 and all_loaded == "True"


def test_an_unknown_name_is_refused_with_every_known_name():
    import pytest

    from mecsim.algorithms import ALGORITHMS
    from mecsim.common.errors import UnknownNameError

    with pytest.raises(UnknownNameError) as error:
        ALGORITHMS.get("fedavgg")
    assert "fedavg" in str(error.value) and "kapc_bls" in str(error.value)


RUN = """
import sys, mecsim
mecsim.run("scenarios/quickstart.toml", ["protocol.rounds=1", "execution.cost_only=true"],
           write=False)
print(sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("mecsim.algorithms.")))
"""


def test_a_run_imports_only_the_algorithms_it_uses():
    out = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, check=True)
    loaded = out.stdout.strip().splitlines()[-1]
    assert "'fedavg'" in loaded and "'kapc'" not in loaded and "'scd'" not in loaded, loaded
