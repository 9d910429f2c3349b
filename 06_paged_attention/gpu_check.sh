#!/usr/bin/env bash
# Stage 06 on a CUDA machine, from the repository root (what the course's CI cannot do):
# install the course without its dependencies (the machine has torch, triton, pytest,
# hypothesis, numpy), run the `gpu`-marked stage-06 tests, then the GPU part of the bench
# (6.5's textbook kernel and 6.9's split-K kernel against paged_attention and against SDPA
# on contiguous K/V). Results go to $OUT (default /tmp/stage06_gpu).
#
#     bash 06_paged_attention/gpu_check.sh
#
# The root gpu_check.sh calls this one with GPU_TEST_PATHS (default: this stage's tests; the
# root script passes every test file with a `gpu` test) and the time limits TESTS_TIMEOUT /
# BENCH_TIMEOUT (seconds; defaults 100 / 75).
set -u
OUT=${OUT:-/tmp/stage06_gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COURSE_IMPL=solution
PLUGIN=()
if ! python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1; then
  echo "pip install -e . failed (see pip.log); using the source tree on PYTHONPATH"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  PLUGIN=(-p course.pytest_plugin)
fi
python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO CUDA')" 2>&1 | tee "$OUT/versions.txt"
set -o pipefail
# shellcheck disable=SC2086  # GPU_TEST_PATHS is a list of paths
timeout "${TESTS_TIMEOUT:-100}" python3 -m pytest "${PLUGIN[@]}" --impl solution -q -p no:cacheprovider -m gpu -rs \
  ${GPU_TEST_PATHS:-06_paged_attention/tests} 2>&1 | tee "$OUT/gpu_tests.txt"
echo "gpu tests exit: $?"
timeout "${BENCH_TIMEOUT:-75}" python3 06_paged_attention/bench.py --parts gpu --repeat 3 --json "$OUT/bench_gpu.json" 2>&1 \
  | tee "$OUT/bench_gpu.txt"
echo "bench exit: $?"
