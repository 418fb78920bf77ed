#!/usr/bin/env bash
# Runs, on a GPU machine, every GPU test (tests whose name contains "gpu") of the bundle
# made by scripts/gpu-bundle.sh, the Figure 1 example and the benchmark suites, each under
# its own timeout. Full logs go to $OUT (default ./gpu-out); a short summary is printed
# last. Usage: [TESTS="bin ..."] gpu-run.sh [tests|bench|all|engine|e2e|trace|sweep|nvtx|tune|compare|coldstart] [suite:seconds ...]
#   engine: TESTS' GPU tests beside bench/hf_compare.py (HF_ARGS, HF_TIMEOUT), then
#   end-to-end generations of E2E_PRESETS overlapped and with --no-overlap.
#   e2e: `megaops bench` once per ';'-separated argument set of E2E_ARGS (E2E_TIMEOUT
#   each) into $OUT/e2e.jsonl, then
#   torch_baseline.py once per ';'-separated set of TORCH_ARGS (TORCH_TIMEOUT each;
#   skipped when TORCH_ARGS=none) with the
#   read bandwidth megaops measured, into $OUT/torch.jsonl (with TORCH_DEADLINE_S, no
#   torch row starts later than that many seconds after this script did); TESTS' GPU tests first;
#   with BREAKDOWN_ARGS, `megaops bench --breakdown $BREAKDOWN_ARGS` after the bench;
#   with HF_ARGS, hf_compare.py $HF_ARGS (HF_TIMEOUT) before the torch runs.
#   trace: TESTS' GPU tests, then `megaops generate --trace` for each of TRACE_PRESETS
#   (128-token prompt, 8 new tokens) and `megaops bench $TRACE_BENCH_ARGS --trace`
#   (TRACE_TIMEOUT) into $OUT/trace.jsonl; the trace folders packed as $OUT/traces.tgz.
#   sweep: TESTS' GPU tests, then `megaops bench $SWEEP_ARGS` per binary (SWEEP_BINS),
#   stream count (SWEEP_STREAMS) and variant (SWEEP_VARIANTS: extra arguments, sets
#   separated by ';', e.g. " ;--norm-fusion"), SWEEP_ROUNDS rounds, into $OUT/sweep.jsonl; with
#   NVTX_CHECK=1 first the NVTX check (nvtx_check below) into $OUT/nvtx.log.
#   nvtx: only the NVTX check.
#   tune: TESTS' GPU tests, then `megaops tune` for each of TUNE_PRESETS (unset: the
#   default qwen3-0.6b; empty: none) at TUNE_BATCHES (default 1) with TUNE_ARGS (timed: the goal is under two
#   minutes), and, when ABLATION_PRESETS is set, `megaops tune --ablation` for each at
#   ABLATION_BATCHES (default 1,2,4,8,16) with ABLATION_ARGS into $OUT/ablation-<preset>.jsonl
#   and .png; the cache is $OUT/tune.json (MEGAOPS_TUNE_CACHE), then `megaops bench`
#   overlapped with and without it (BENCH_WORKLOADS, default short-decode; BENCH_BATCHES,
#   default 1); with TUNED_HF_ARGS, hf_compare.py $TUNED_HF_ARGS --tune-budget-s
#   ${TUNED_HF_BUDGET_S:-10} (transformers against tuned plans; TUNED_HF_TIMEOUT).
#   subkernel: TESTS' GPU tests (default subkernel), the `subkernel` suite
#   (SUBKERNEL_TIMEOUT), `megaops bench --workloads prefill` of SUBKERNEL_PRESETS (default
#   qwen3-0.6b llama-3.2-1b) at SUBKERNEL_BATCHES (default 1) overlapped and serial for
#   each of PREFILL_GEMMS (default "rust cublaslt:4") into $OUT/prefill-<gemm>.jsonl, and
#   with SUBKERNEL_HF_ARGS, hf_compare.py $SUBKERNEL_HF_ARGS with every generate on
#   --prefill-gemm=$SUBKERNEL_HF_GEMM (default cublaslt:4).
#   compare: TESTS' GPU tests, then the benchmark suites (arguments, default overlap:50
#   mlp:25 gemv:40 gemm:40) for each binary of COMPARE_BINS (default "megaops-bench-before
#   megaops-bench"), binaries interleaved per suite, COMPARE_ROUNDS rounds (default 2),
#   each into $OUT/compare/<binary>-r<round>/ (results.md, results.jsonl).
#   coldstart: the first run's module load, `megaops generate --preset tiny` with the
#   driver's JIT cache off (CUDA_CACHE_DISABLE=1), loading the embedded cubins and then
#   the PTX (MEGAOPS_JIT=1), COLDSTART_ROUNDS rounds (default 1), wall seconds each.
#   default suites: overlap:50 boundary:30 mlp:25 bandwidth:15 gemv:40 gemm:40 attention:40 sdpa:30
#   MEGAOPS_BENCH_BUDGET_S (default 25 here) caps the suites that stop adding shapes.
#   Past KEEP_FILES files (default 6) under $OUT, all but summary.txt and the *.jsonl
#   rows are packed into $OUT/rest.tgz at the end (the device returns eight files a call).
set -u
cd "$(dirname "$0")"
what=${1:-all}; shift || true
suites=("$@")
if [ ${#suites[@]} -eq 0 ]; then
  if [ "$what" = compare ]; then suites=(overlap:50 mlp:25 gemv:40 gemm:40)
  else suites=(overlap:50 boundary:30 mlp:25 bandwidth:15 gemv:40 gemm:40 attention:40 sdpa:30); fi
fi
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export MEGAOPS_BENCH_BUDGET_S=${MEGAOPS_BENCH_BUDGET_S:-25} MEGAOPS_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
summary="$OUT/summary.txt"; : > "$summary"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader | tee -a "$summary"
t0=$(date +%s)
# TESTS' GPU tests (filter "gpu", extra harness arguments TEST_ARGS, e.g. --nocapture), one
# binary after another, logs into $1.
named_gpu_tests() {
  local dir=$1 t; mkdir -p "$dir"
  for t in ${TESTS:-}; do
    timeout -k 5 "${TEST_TIMEOUT:-150}" "tests/$t" gpu --test-threads=1 ${TEST_ARGS:-} > "$dir/test-$t.log" 2>&1
    echo "test $t: rc=$? $(grep -a "test result" "$dir/test-$t.log" | tail -1)" >> "$summary"
  done
}
# NVTX through a real profiler: Nsight Compute profiles only the kernels launched inside
# the NVTX range "layer 1" of a `megaops generate` prefill (MEGAOPS_NVTX=1); with a range
# name nobody opens, or without MEGAOPS_NVTX, it must profile none.
nvtx_check() {
  local ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)} case range env rc part
  : > "$OUT/nvtx.log"; part="$OUT/nvtx.part"
  for case in "layer 1/:MEGAOPS_NVTX=1" "no such range/:MEGAOPS_NVTX=1" "layer 1/:MEGAOPS_NVTX=0"; do
    range=${case%%:*}; env=${case##*:}
    env "$env" timeout -k 5 "${NVTX_TIMEOUT:-150}" "$ncu" --nvtx --nvtx-include "$range" --launch-count 8 \
      --section LaunchStats ./megaops generate --preset "${NVTX_PRESET:-tiny}" --prompt-ids 1,2,3 \
      --max-new-tokens 2 > "$part" 2>&1
    rc=$?
    echo "nvtx: '$range' $env: rc=$rc, $(grep -a -c '==PROF== Profiling' "$part") kernels profiled;" \
      "first: $(grep -a -m1 '==PROF== Profiling' "$part" | cut -c1-100)" >> "$summary"
    { echo "== ncu --nvtx-include '$range' with $env (rc=$rc)"; cat "$part"; } >> "$OUT/nvtx.log"
  done
  rm -f "$part"
}
# The transformers comparison, bench/hf_compare.py $HF_ARGS (HF_TIMEOUT), into $OUT/hf.log.
hf_run() {
  PYTHONUNBUFFERED=1 timeout -k 5 "${HF_TIMEOUT:-300}" python3 hf_compare.py --megaops ./megaops \
    --out "$OUT/hf" --controls none ${HF_ARGS:-} > "$OUT/hf.log" 2>&1
  echo "hf_compare: rc=$? at +$(( $(date +%s) - t0 ))s" >> "$summary"
}
[ "$what" = nvtx ] && nvtx_check
if [ "$what" = tests ] || [ "$what" = all ]; then
  # Test binaries run two at a time (correctness only; each has its own log).
  mkdir -p "$OUT/tests"
  run_test() {
    local t=$1 name; name=$(basename "$t"); local start; start=$(date +%s)
    # tests/device-kernels' `gpu` binary is all GPU tests; elsewhere their names say "gpu".
    local filter=gpu; [ "$name" = gpu ] && filter=
    timeout -k 5 "${TEST_TIMEOUT:-150}" "$t" $filter --test-threads=1 > "$OUT/tests/$name.log" 2>&1
    local rc=$?
    echo "test $name: rc=$rc $(( $(date +%s) - start ))s $(grep -a "test result" "$OUT/tests/$name.log" | tail -1)" >> "$summary"
  }
  export -f run_test; export OUT summary
  # TESTS="gemv mlp" runs only those binaries.
  if [ -n "${TESTS:-}" ]; then list=$(for n in $TESTS; do echo "tests/$n"; done); else list=$(ls tests/*); fi
  echo "$list" | xargs -P 2 -I{} bash -c 'run_test {}'
  if [ -x ./fig1 ] && [ -z "${TESTS:-}" ]; then
    timeout -k 5 90 ./fig1 --seed 20261130 > "$OUT/tests/fig1.log" 2>&1; echo "fig1: rc=$? $(tail -1 "$OUT/tests/fig1.log")" >> "$summary"
  fi
  echo "tests done at +$(( $(date +%s) - t0 ))s" >> "$summary"
  cat "$OUT"/tests/*.log > "$OUT/tests.log"; rm -rf "$OUT/tests"
fi
if [ "$what" = engine ]; then
  # The model engine: GPU tests named in $TESTS (test binaries, filter "gpu") beside the
  # transformers comparison, then end-to-end generations of presets, overlapped and not.
  mkdir -p "$OUT/engine"
  for t in ${TESTS:-}; do
    timeout -k 5 "${TEST_TIMEOUT:-150}" "tests/$t" gpu --test-threads=1 > "$OUT/engine/test-$t.log" 2>&1 &
  done
  hf_run
  wait
  for t in ${TESTS:-}; do echo "test $t: $(grep -a "test result" "$OUT/engine/test-$t.log" | tail -1)" >> "$summary"; done
  prompt=$(seq -s, 1 128)
  for p in ${E2E_PRESETS:-qwen3-0.6b llama-3.2-1b}; do
    for mode in overlap serial; do
      flag=; [ "$mode" = serial ] && flag=--no-overlap
      timeout -k 5 90 ./megaops generate --preset "$p" --prompt-ids "$prompt" --max-new-tokens 64 --ignore-eos --json $flag \
        > "$OUT/engine/$p-$mode.json" 2> "$OUT/engine/$p-$mode.err"
      echo "e2e $p $mode: rc=$? $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("prefill_ms=%.2f decode_ms_per_step=%.4f tokens=%s" % (d["prefill_ms"], d["decode_ms_per_step"], d["tokens"][0][:8]))' "$OUT/engine/$p-$mode.json" 2>&1 | tail -1)" >> "$summary"
    done
  done
  grep -a -E "B=[0-9]+ P=|OVERALL|!!|\[time\]" "$OUT/hf.log" | tail -n 60 >> "$summary"
fi
if [ "$what" = e2e ]; then
  mkdir -p "$OUT/e2e"
  named_gpu_tests "$OUT/e2e"
  # Each ';'-separated argument set of E2E_ARGS is one `megaops bench` run (E2E_TIMEOUT
  # each); their rows are concatenated into $OUT/e2e.jsonl.
  IFS=';' read -r -a e2e_sets <<< "${E2E_ARGS:-}"
  [ ${#e2e_sets[@]} -eq 0 ] && e2e_sets=("")
  : > "$OUT/e2e.jsonl"; : > "$OUT/e2e/bench.md"; : > "$OUT/e2e/bench.err"
  i=0
  for set in "${e2e_sets[@]}"; do
    timeout -k 5 "${E2E_TIMEOUT:-300}" ./megaops bench $set --json "$OUT/e2e/bench-$i.jsonl" >> "$OUT/e2e/bench.md" 2>> "$OUT/e2e/bench.err"
    echo "megaops bench $set: rc=$? at +$(( $(date +%s) - t0 ))s $(tail -1 "$OUT/e2e/bench.err")" >> "$summary"
    cat "$OUT/e2e/bench-$i.jsonl" >> "$OUT/e2e.jsonl" 2>/dev/null
    i=$((i + 1))
  done
  if [ -n "${BREAKDOWN_ARGS:-}" ]; then
    timeout -k 5 "${BREAKDOWN_TIMEOUT:-120}" ./megaops bench --breakdown $BREAKDOWN_ARGS --json "$OUT/breakdown.jsonl" > "$OUT/e2e/breakdown.md" 2> "$OUT/e2e/breakdown.err"
    echo "megaops bench --breakdown: rc=$? at +$(( $(date +%s) - t0 ))s $(tail -1 "$OUT/e2e/breakdown.err")" >> "$summary"
  fi
  if [ -n "${HF_ARGS:-}" ]; then
    hf_run
    grep -a -E "PASS|FAIL|OVERALL" "$OUT/hf.log" | tail -30 >> "$summary"
  fi
  if [ "${TORCH_ARGS:-}" != none ]; then
    read_gbps=$(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(next((x["read_gbps"] for x in r if x.get("read_gbps")), ""))' "$OUT/e2e.jsonl" 2>/dev/null)
    # As E2E_ARGS: one torch_baseline.py run per ';'-separated set (TORCH_TIMEOUT each).
    IFS=';' read -r -a torch_sets <<< "${TORCH_ARGS:-}"
    [ ${#torch_sets[@]} -eq 0 ] && torch_sets=("")
    : > "$OUT/e2e/torch.log"
    for set in "${torch_sets[@]}"; do
      budget=
      if [ -n "${TORCH_DEADLINE_S:-}" ]; then
        budget=$(( TORCH_DEADLINE_S - ($(date +%s) - t0) ))
        if [ "$budget" -le 0 ]; then echo "torch_baseline $set: skipped, TORCH_DEADLINE_S passed" >> "$summary"; continue; fi
      fi
      PYTHONUNBUFFERED=1 timeout -k 5 "${TORCH_TIMEOUT:-300}" python3 torch_baseline.py --megaops ./megaops \
        ${read_gbps:+--read-gbps $read_gbps} $set ${budget:+--budget-s $budget} --json "$OUT/torch.jsonl" >> "$OUT/e2e/torch.log" 2>&1
      echo "torch_baseline $set: rc=$? at +$(( $(date +%s) - t0 ))s $(grep -a -v '^{' "$OUT/e2e/torch.log" | tail -2 | tr '\n' ' ')" >> "$summary"
    done
  fi
  cat "$OUT/e2e/bench.md" >> "$summary"
  python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    step = "-" if r["step_ms"] is None else "%.3f" % r["step_ms"]
    print("%-12s %-12s b=%-2d %-20s step=%s tok/s=%.0f prefill=%.2f" % (r["model"], r["workload"], r["batch"], r["mode"], step, r["tokens_per_s"], r["prefill_ms"]))
' "$OUT/torch.jsonl" >> "$summary" 2>/dev/null
fi
if [ "$what" = trace ]; then
  mkdir -p "$OUT/trace"
  named_gpu_tests "$OUT/trace"
  prompt=$(seq -s, 1 128)
  for p in ${TRACE_PRESETS:-qwen3-0.6b}; do
    timeout -k 5 120 ./megaops generate --preset "$p" --prompt-ids "$prompt" --max-new-tokens 8 --ignore-eos \
      --trace "$OUT/trace/$p" > "$OUT/trace/generate-$p.log" 2>&1
    echo "generate --trace $p: rc=$? $(grep -a -E '^(checked|CHECK)' "$OUT/trace/generate-$p.log" | sort | uniq -c | tr '\n' ' ')" >> "$summary"
  done
  timeout -k 5 "${TRACE_TIMEOUT:-300}" ./megaops bench ${TRACE_BENCH_ARGS:-} --trace "$OUT/trace/bench" --json "$OUT/trace.jsonl" \
    > "$OUT/trace/bench.md" 2> "$OUT/trace/bench.err"
  echo "megaops bench --trace: rc=$? at +$(( $(date +%s) - t0 ))s $(tail -1 "$OUT/trace/bench.err")" >> "$summary"
  grep -a -E "^(tracing overhead|checked|CHECK|== )" "$OUT/trace/bench.md" >> "$summary"
  grep -a -A14 "decode step: " "$OUT"/trace/generate-*.log | head -n 120 >> "$summary"
  # (A 1024-token prefill's Perfetto JSON runs to tens of MB: only its PNGs travel back.)
  tar czf "$OUT/traces.tgz" -C "$OUT" --exclude='bench/*prefill.json' trace && rm -rf "$OUT/trace"
fi
if [ "$what" = sweep ]; then
  # TESTS' GPU tests, then `megaops bench $SWEEP_ARGS --streams S $V` for every binary of
  # SWEEP_BINS (default ./megaops), S of SWEEP_STREAMS (default 2) and V of SWEEP_VARIANTS
  # (default: none), SWEEP_ROUNDS rounds (default 2) alternating binaries; rows tagged with
  # bin, streams, variant and round in
  # $OUT/sweep.jsonl; with SWEEP_TRACE_STREAMS, the first binary re-runs traced at that
  # stream count into $OUT/sweep-trace.tgz (JSON only).
  named_gpu_tests "$OUT/sweep"
  [ "${NVTX_CHECK:-}" = 1 ] && nvtx_check
  for round in $(seq 1 "${SWEEP_ROUNDS:-2}"); do
    for b in ${SWEEP_BINS:-./megaops}; do
      for st in ${SWEEP_STREAMS:-2}; do
        IFS=';' read -r -a variants <<< "${SWEEP_VARIANTS:- }"
        for vi in "${!variants[@]}"; do
          v=${variants[$vi]}
          tag="$(basename "$b")-s$st-v$vi-r$round"
          timeout -k 5 "${SWEEP_TIMEOUT:-100}" "$b" bench ${SWEEP_ARGS:-} --streams "$st" $v --json "$OUT/sweep/$tag.jsonl" \
            > "$OUT/sweep/$tag.md" 2> "$OUT/sweep/$tag.err"
          echo "sweep $tag ($v): rc=$? at +$(( $(date +%s) - t0 ))s" >> "$summary"
          sed "s/^{/{\"bin\":\"$(basename "$b")\",\"streams\":$st,\"variant\":\"$(echo $v)\",\"round\":$round,/" \
            "$OUT/sweep/$tag.jsonl" >> "$OUT/sweep.jsonl"
        done
      done
    done
  done
  if [ -n "${SWEEP_TRACE_STREAMS:-}" ]; then
    first=$(echo ${SWEEP_BINS:-./megaops} | cut -d' ' -f1)
    timeout -k 5 "${SWEEP_TIMEOUT:-100}" "$first" bench ${SWEEP_ARGS:-} --streams "$SWEEP_TRACE_STREAMS" \
      --trace "$OUT/sweep/trace" > "$OUT/sweep/trace.md" 2> "$OUT/sweep/trace.err"
    echo "sweep trace: rc=$? at +$(( $(date +%s) - t0 ))s" >> "$summary"
    grep -a -E "^(tracing overhead|checked|CHECK)" "$OUT/sweep/trace.md" >> "$summary"
    find "$OUT/sweep/trace" -name '*.png' -delete
    tar czf "$OUT/sweep-trace.tgz" -C "$OUT/sweep" --exclude='*prefill.json' trace
  fi
  tail -q -n 2 "$OUT"/sweep/*.err > "$OUT/sweep-errs.txt" 2>/dev/null
  cat "$OUT"/sweep/test-*.log > "$OUT/tests.log" 2>/dev/null; rm -rf "$OUT/sweep"
  python3 -c '
import json, sys, collections
rows = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l)
    # Prefill rows have no step time: their time is the prefill time.
    ms = r["step_ms"] if r.get("step_ms") is not None else r.get("prefill_ms")
    rows[(r["model"], r["workload"], r["batch"], r["mode"], r["bin"], r["streams"], r.get("variant", ""))].append(ms)
for k, v in sorted(rows.items()):
    print("%-12s %-12s b=%-2d %-10s %-18s s=%d %-22s ms %s" % (k + (" ".join("%.4f" % x for x in v if x is not None),)))
' "$OUT/sweep.jsonl" >> "$summary"
fi
if [ "$what" = coldstart ]; then
  for round in $(seq 1 "${COLDSTART_ROUNDS:-1}"); do
    for jit in 0 1; do
      s=$(date +%s.%N)
      CUDA_CACHE_DISABLE=1 MEGAOPS_JIT=$jit timeout -k 5 "${COLDSTART_TIMEOUT:-150}" ./megaops generate --preset tiny \
        --prompt-ids 1,2,3 --max-new-tokens 4 > "$OUT/coldstart-jit$jit-r$round.log" 2>&1
      rc=$?
      echo "coldstart MEGAOPS_JIT=$jit round $round: rc=$rc $(python3 -c "import sys; print('%.1f s' % (float(sys.argv[2]) - float(sys.argv[1])))" "$s" "$(date +%s.%N)")" >> "$summary"
    done
  done
fi
if [ "$what" = tune ]; then
  named_gpu_tests "$OUT/tune-tests"
  export MEGAOPS_TUNE_CACHE="$OUT/tune.json"
  for p in ${TUNE_PRESETS-qwen3-0.6b}; do
    s=$(date +%s)
    timeout -k 5 "${TUNE_TIMEOUT:-300}" ./megaops tune --preset "$p" --batch "${TUNE_BATCHES:-1}" ${TUNE_ARGS:-} \
      > "$OUT/tune-$p.txt" 2> "$OUT/tune-$p.err"
    echo "tune $p: rc=$? $(($(date +%s) - s)) s; $(grep -a ' ms (planners)' "$OUT/tune-$p.txt" | tr '\n' ';')" >> "$summary"
  done
  for p in ${ABLATION_PRESETS:-}; do
    s=$(date +%s)
    timeout -k 5 "${ABLATION_TIMEOUT:-500}" ./megaops tune --preset "$p" --ablation --batch "${ABLATION_BATCHES:-1,2,4,8,16}" \
      ${ABLATION_ARGS:-} --json "$OUT/ablation-$p.jsonl" --plot "$OUT/ablation-$p.png" \
      > "$OUT/ablation-$p.md" 2> "$OUT/ablation-$p.err"
    echo "ablation $p: rc=$? $(($(date +%s) - s)) s" >> "$summary"
  done
  for p in ${BENCH_PRESETS:-}; do
    for c in cache no-cache; do
      flag=; [ "$c" = no-cache ] && flag=--no-tune-cache
      timeout -k 5 "${BENCH_TIMEOUT:-120}" ./megaops bench --presets "$p" --workloads "${BENCH_WORKLOADS:-short-decode}" --modes overlapped \
        --batches "${BENCH_BATCHES:-1}" $flag --json "$OUT/bench-$p-$c.jsonl" > "$OUT/bench-$p-$c.md" 2> "$OUT/bench-$p-$c.err"
      echo "bench $p $c: rc=$? $(python3 -c 'import json,sys; print(" ".join("%s:b%d=%s" % (r["workload"], r["batch"], "step %.4fms" % r["step_ms"] if r["step_ms"] is not None else "prefill %.3fms" % r["prefill_ms"]) for r in map(json.loads, open(sys.argv[1]))))' "$OUT/bench-$p-$c.jsonl" 2>&1 | tail -1)" >> "$summary"
    done
  done
  if [ -n "${TUNED_HF_ARGS:-}" ]; then
    PYTHONUNBUFFERED=1 timeout -k 5 "${TUNED_HF_TIMEOUT:-300}" python3 hf_compare.py --megaops ./megaops \
      --out "$OUT/hf-tuned" --controls none --tune-budget-s "${TUNED_HF_BUDGET_S:-10}" $TUNED_HF_ARGS > "$OUT/hf-tuned.log" 2>&1
    echo "hf_compare (tuned plans): rc=$? at +$(( $(date +%s) - t0 ))s" >> "$summary"
    grep -a -E "PASS|FAIL|OVERALL|tuned plan" "$OUT/hf-tuned.log" | tail -30 >> "$summary"
  fi
fi
if [ "$what" = subkernel ]; then
  TESTS=${TESTS-subkernel} named_gpu_tests "$OUT/subkernel-tests"
  timeout -k 5 "${SUBKERNEL_TIMEOUT:-200}" ./megaops-bench --out "$OUT/bench" subkernel > "$OUT/subkernel-bench.log" 2>&1
  echo "subkernel suite: rc=$? at +$(( $(date +%s) - t0 ))s" >> "$summary"
  for g in ${PREFILL_GEMMS:-rust cublaslt:4}; do
    f="$OUT/prefill-${g/:/-}"
    timeout -k 5 "${PREFILL_TIMEOUT:-150}" ./megaops bench --presets "$(echo ${SUBKERNEL_PRESETS:-qwen3-0.6b llama-3.2-1b} | tr ' ' ,)" \
      --workloads prefill --modes overlapped,serial --batches "${SUBKERNEL_BATCHES:-1}" --prefill-gemm "$g" --no-tune-cache \
      --json "$f.jsonl" > "$f.md" 2> "$f.err"
    echo "prefill bench $g: rc=$? $(python3 -c 'import json,sys; print(" ".join("%s:b%d:%s=%.3fms" % (r["model"], r["batch"], r["mode"], r["prefill_ms"]) for r in map(json.loads, open(sys.argv[1]))))' "$f.jsonl" 2>&1 | tail -1)" >> "$summary"
  done
  if [ -n "${SUBKERNEL_HF_ARGS:-}" ]; then
    PYTHONUNBUFFERED=1 timeout -k 5 "${SUBKERNEL_HF_TIMEOUT:-240}" python3 hf_compare.py --megaops ./megaops \
      --out "$OUT/hf-subkernel" --controls none --generate-arg="--prefill-gemm=${SUBKERNEL_HF_GEMM:-cublaslt:4}" \
      $SUBKERNEL_HF_ARGS > "$OUT/hf-subkernel.log" 2>&1
    echo "hf_compare (prefill GEMMs ${SUBKERNEL_HF_GEMM:-cublaslt:4}): rc=$? at +$(( $(date +%s) - t0 ))s" >> "$summary"
    grep -a -E "PASS|FAIL|OVERALL" "$OUT/hf-subkernel.log" | tail -30 >> "$summary"
  fi
  cat "$OUT/bench/results.md" >> "$summary" 2>/dev/null
fi
if [ "$what" = compare ]; then
  named_gpu_tests "$OUT/tests"
  for r in $(seq 1 "${COMPARE_ROUNDS:-2}"); do
    for st in "${suites[@]}"; do
      s=${st%%:*}; sec=${st##*:}
      for b in ${COMPARE_BINS:-megaops-bench-before megaops-bench}; do
        d="$OUT/compare/$b-r$r"; mkdir -p "$d"
        timeout -k 5 "$sec" "./$b" --out "$d" "$s" >> "$d/bench.log" 2>&1
        echo "compare $b $s round $r: rc=$? at +$(( $(date +%s) - t0 ))s" >> "$summary"
      done
    done
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  for st in "${suites[@]}"; do
    s=${st%%:*}; sec=${st##*:}
    if [ "$s" = sdpa ]; then
      PYTHONUNBUFFERED=1 timeout -k 5 "$sec" python3 sdpa_baseline.py --out "$OUT" >> "$OUT/bench.log" 2>&1
    else
      timeout -k 5 "$sec" ./megaops-bench --out "$OUT" "$s" >> "$OUT/bench.log" 2>&1
    fi
    echo "bench $s: rc=$? at +$(( $(date +%s) - t0 ))s" >> "$summary"
  done
fi
grep -a -E "^(test .* FAILED|failures:|---- |thread .* panicked)" "$OUT/tests.log" 2>/dev/null | head -40 >> "$summary"
echo "== summary"; cat "$summary"
[ -f "$OUT/results.md" ] && { echo "== results"; cat "$OUT/results.md"; }
# The device returns at most eight files a call: past KEEP_FILES (default 6) files under
# $OUT, everything but the summary and the JSON rows at its top goes into $OUT/rest.tgz.
if [ "$(find "$OUT" -type f | wc -l)" -gt "${KEEP_FILES:-6}" ]; then
  ( cd "$OUT" && find . -type f \( -path './*/*' -o \( ! -name summary.txt ! -name '*.jsonl' \) \) ! -path ./rest.tgz -print0 \
      | tar czf rest.tgz --null -T - --remove-files && find . -type d -empty -delete )
fi
exit 0
