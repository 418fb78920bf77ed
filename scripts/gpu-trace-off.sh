#!/usr/bin/env bash
# Tracing compiled in (and off) against compiled out: the same bench, alternating binaries.
# Run from a folder holding bundle.tar.xz (scripts/gpu-bundle.sh) and megaops-notrace.xz
# (megaops-cli built with MEGAOPS_TRACE_OFF=1 in its own target dir, stripped, xz).
set -u
cd "$(dirname "$0")"
tar xJf bundle.tar.xz && xz -dc megaops-notrace.xz > gpu/megaops-notrace && chmod +x gpu/megaops-notrace
cd gpu
args="--presets qwen3-0.6b,llama-3.2-1b --workloads short-decode --batches 1 --modes overlapped --prefill-reps 1"
for round in 1 2 3; do
  for b in megaops megaops-notrace; do
    timeout -k 5 120 ./$b bench $args --json "$OUT/$b-$round.jsonl" > "$OUT/$b-$round.md" 2> "$OUT/$b-$round.err"
    echo "$b round $round: rc=$?"
  done
done
cd "$OUT" && for f in megaops*.jsonl; do sed "s/^{/{\"bin\":\"${f%.jsonl}\",/" "$f"; done > all.jsonl
tail -n 3 megaops*.err > errs.txt; rm -f megaops*.jsonl megaops*.err megaops*.md
python3 - <<'PY'
import json
for l in open("all.jsonl"):
    r = json.loads(l)
    print(r["bin"], r["model"], "%.4f %.4f %.4f" % (r["step_ms"], r["step_p10_ms"], r["step_p90_ms"]))
PY
