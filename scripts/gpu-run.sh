#!/usr/bin/env bash
# Runs, on a GPU machine, every GPU test (tests whose name contains "gpu") of the bundle
# made by scripts/gpu-bundle.sh, the Figure 1 example and the benchmarks. Full logs go to
# $OUT (default ./gpu-out); a short summary is printed last.
# Usage: gpu-run.sh [tests|bench|all] [bench suites...]
set -u
cd "$(dirname "$0")"
what=${1:-all}; shift || true
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export MEGAOPS_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
summary="$OUT/summary.txt"; : > "$summary"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a "$summary"
if [ "$what" = tests ] || [ "$what" = all ]; then
  for t in tests/*; do
    name=$(basename "$t")
    start=$(date +%s)
    timeout -k 5 240 "$t" gpu --test-threads=1 >> "$OUT/tests.log" 2>&1
    rc=$?
    result=$(grep -a "test result" "$OUT/tests.log" | tail -1)
    echo "test $name: rc=$rc $(( $(date +%s) - start ))s ${result}" | tee -a "$summary"
  done
  if [ -x ./fig1 ]; then
    timeout -k 5 120 ./fig1 >> "$OUT/tests.log" 2>&1; echo "fig1: rc=$?" | tee -a "$summary"
  fi
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  timeout -k 5 400 ./megaops-bench --out "$OUT" "$@" > "$OUT/bench.log" 2>&1
  echo "megaops-bench: rc=$?" | tee -a "$summary"
  if [ -f sdpa_baseline.py ]; then
    timeout -k 5 120 python3 sdpa_baseline.py >> "$OUT/bench.log" 2>&1; echo "sdpa baseline: rc=$?" | tee -a "$summary"
  fi
fi
grep -a -E "^(test .* FAILED|failures:|---- )" "$OUT/tests.log" 2>/dev/null | head -40 >> "$summary"
echo "== summary"; cat "$summary"
