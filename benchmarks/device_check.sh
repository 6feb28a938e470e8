#!/usr/bin/env bash
# The GPU check, one command: on a machine with CUDA, run the CUDA tests and the Torch
# benchmarks on the GPU (dense and sparse mixing; FedAvg and FOCUS at N = 10^4 to 10^6;
# DGD and gradient tracking at n = 100 to 10^4) and write the figures as JSON. Under about
# five minutes on an H100. Without CUDA it says so and exits 0 having run nothing.
#
#   benchmarks/device_check.sh [OUTDIR]      (default: $OUT, else ./device-check)
#
# Writes OUTDIR/device-check.json (the card, the versions, the tests' outcome and each
# section's figures), OUTDIR/tests.log, OUTDIR/results-torch-cuda.json and
# OUTDIR/bench.log. Run from the repository root; stochmix is imported from the checkout.
# The tests need the test extra's pure-Python parts (beartype, array-api-compat, jaxtyping):
# on a machine without a package index, carry their wheels and install them first
# (pip download --no-deps -d WHEELS beartype array-api-compat jaxtyping wadler-lindig).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-device-check}}
mkdir -p "$out"
python=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "device_check: no CUDA device (or no torch) here: nothing run"
    exit 0
fi
"$python" -c 'import torch; print("device_check:", torch.cuda.get_device_name(0), "torch", torch.__version__)'

start=$(date +%s)
# the tests that run on CUDA when it is there (every device-parametrized test of the two
# Torch files, the TorchModel on CUDA), one process: the GPU is one
timeout 150 "$python" -m pytest -p no:cacheprovider -o addopts= -n 0 -q -rs \
    tests/test_torch_backend.py tests/test_torch_fused.py \
    "tests/test_learning_problems.py::test_torch_model_on_cuda_matches_cpu" \
    "tests/test_composite.py::test_backends_give_the_numpy_numbers" \
    -k "cuda or Cuda or CUDA" 2>&1 | tee "$out/tests.log"
tests_status=${PIPESTATUS[0]}

timeout 240 "$python" benchmarks/bench_torch.py --device cuda --reps 2 \
    --json "$out/results-torch-cuda.json" 2>&1 | tee "$out/bench.log"
bench_status=${PIPESTATUS[0]}

"$python" - "$out" "$tests_status" "$bench_status" "$start" <<'PY'
import json, pathlib, re, sys, time
import torch
out, tests_status, bench_status, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
folder = pathlib.Path(out)
log = (folder / "tests.log").read_text()
summary = [line for line in log.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
bench = folder / "results-torch-cuda.json"
record = {
    "device": torch.cuda.get_device_name(0),
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "tests_exit_status": tests_status,
    "tests_summary": summary[-1] if summary else None,
    "bench_exit_status": bench_status,
    "bench": json.loads(bench.read_text()) if bench.exists() else None,
    "seconds": time.time() - start,
}
(folder / "device-check.json").write_text(json.dumps(record, indent=1) + "\n")
print("device_check:", record["tests_summary"], "| bench status", bench_status,
      f"| {record['seconds']:.0f} s | wrote {folder / 'device-check.json'}")
PY
[[ $tests_status -eq 0 && $bench_status -eq 0 ]]
