#!/usr/bin/env bash
# Builds the GPU test and benchmark executables (release, stripped) into a folder that can
# be copied to a GPU machine without a Rust toolchain, plus scripts/gpu-run.sh to run them.
# Usage: scripts/gpu-bundle.sh [DIR]   (default .carry/gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.carry/gpu}
rm -rf "$dir" && mkdir -p "$dir/tests"
packages=(-p megaops-device-kernels -p megaops-examples -p megaops-kernels)
cargo test --release --no-run "${packages[@]}" --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["target"]["name"] + "\t" + m["executable"])
' | while IFS=$'\t' read -r name exe; do
    cp "$exe" "$dir/tests/${name}"
  done
cargo build --release -p megaops-bench -p megaops-examples --bins
cp target/release/megaops-bench "$dir/"
for b in target/release/fig1 target/release/mlp; do [ -f "$b" ] && cp "$b" "$dir/"; done
cp scripts/gpu-run.sh "$dir/"
[ -f bench/sdpa_baseline.py ] && cp bench/sdpa_baseline.py "$dir/"
strip "$dir"/tests/* "$dir"/megaops-bench "$dir"/fig1 "$dir"/mlp 2>/dev/null || true
du -sh "$dir"; ls -la "$dir" "$dir/tests"
