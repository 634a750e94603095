#!/usr/bin/env bash
# Issue 50's GPU checks in one call of a lent GPU machine, from the repository root:
# mecsim's pure-Python needs as wheels in .whl/ (see benchmarks/README.md), the CUDA
# tests, the batched trainer against the bound, and the quickstart scaled up, CPU vs GPU.
# Logs go to $OUT (the device tool brings them back); the summary is printed last.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
# mecsim without installing it (no build tools needed): the subpackages that live beside
# mecsim/ in the repository (pyproject's package-dir) linked into it on this copy
for d in channels algorithms analysis; do ln -sfn "$PWD/$d" "mecsim/$d"; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, mecsim; print('torch', torch.__version__, torch.cuda.get_device_name())"
date -u
timeout "${TESTS_S:-120}" python3 -m pytest -q -p no:cacheprovider tests/executors/test_cuda.py \
    tests/algorithms/test_spectral.py tests/learning/models/test_stacked_conv.py \
    tests/learning/test_all_finite.py tests/learning/test_precision.py \
    >"$OUT/tests.log" 2>&1
tail -15 "$OUT/tests.log"
timeout "${CNN_S:-160}" python3 benchmarks/bench_local_training.py --device cuda \
    --models cnn-small --clients 50 200 1000 --steps 20 --batch 16 --repeat 2 \
    --serial-max-clients 50 --profile "${PROFILE_ROWS:-0}" >"$OUT/bench_cnn.log" 2>&1
timeout "${RESNET_S:-100}" python3 benchmarks/bench_local_training.py --device cuda \
    --models resnet18 --clients 10 100 --resnet-steps 5 --resnet-max-clients 100 --batch 10 \
    --serial-max-clients 10 --repeat 1 --profile "${PROFILE_ROWS:-0}" >"$OUT/bench_resnet.log" 2>&1
timeout "${PHASES_S:-40}" python3 benchmarks/bench_batched_phases.py --device cuda \
    --clients 1000 >"$OUT/phases.log" 2>&1
# the quickstart as it is (30 rounds), its clients scaled; mnist-5k has data for 1,000
timeout "${QUICK_S:-240}" python3 benchmarks/bench_device_quickstart.py --clients 200 1000 \
    --set data.dataset=mnist-5k --set data.partition=iid >"$OUT/quickstart.log" 2>&1
if [ -x .whl/py-spy ]; then  # where the GPU run's time goes (py-spy carried beside the wheels)
    timeout "${SPY_S:-60}" .whl/py-spy record -r 100 -f raw -o "$OUT/quickstart_cuda.raw" -- \
        python3 -m mecsim run scenarios/quickstart.toml --set clients.count=1000 \
        --set data.dataset=mnist-5k --set data.partition=iid --device cuda --out /tmp/spy \
        >"$OUT/spy.log" 2>&1
fi
echo "=== summary"
grep -E "passed|failed|error" "$OUT/tests.log" | tail -3
grep -vE "^chosen|^ *$" "$OUT/bench_cnn.log" | tail -6
grep -vE "^chosen|^ *$" "$OUT/bench_resnet.log" | tail -4
cat "$OUT/phases.log"
tail -5 "$OUT/quickstart.log"
