#!/usr/bin/env bash
# Stage 08 on a GPU: the same report `course profile` writes on the CPU, measured on CUDA.
# Run from the repository root on a machine with an NVIDIA GPU; everything lands in $OUT
# (default /tmp/gpu-report): profile.log and report/ (report.md, report.json, its plots and
# a Chrome trace). At most ~3.5 minutes. Then the quick stage tests run on that machine.
# DTYPE=bfloat16 (or float16) profiles the model in that dtype (default float32).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-report}
DTYPE=${DTYPE:-float32}
mkdir -p "$OUT"
LOG="$OUT/profile.log"
export PYTHONUNBUFFERED=1 COURSE_IMPL=solution
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
  python3 -m pip install -q --no-deps --no-build-isolation -e . || echo "pip install -e . failed"
} >"$LOG" 2>&1
timeout 150 python3 -m course profile --device cuda --dtype "$DTYPE" --threads 1 --out "$OUT/report" 2>&1 \
  | grep -v USDT >>"$LOG"
echo "course profile: exit ${PIPESTATUS[0]}" >>"$LOG"
timeout 45 python3 -m pytest -q -x --impl solution -p no:cacheprovider 08_profiling/tests -k "not report and not cli" 2>&1 | tail -8 >>"$LOG"
cat "$LOG"
