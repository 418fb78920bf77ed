#!/usr/bin/env bash
# Builds the GPU test and benchmark executables (release, stripped) into a folder that can
# be copied to a GPU machine without a Rust toolchain, plus scripts/gpu-run.sh to run them.
# The folder is packed as DIR/bundle.tar.xz (each test binary embeds the kernels' PTX text,
# which compresses about tenfold); on the GPU machine:
#   cd DIR && tar xJf bundle.tar.xz && cd gpu && OUT=$OUT ./gpu-run.sh all
# Usage: [BUNDLE_SLIM=1] [BUNDLE_EXTRA="file ..."] scripts/gpu-bundle.sh [DIR]   (default .carry/gpu)
#   BUNDLE_EXTRA: more executables to ship beside the bundle's (e.g. a megaops-bench built
#   from an earlier commit, for `gpu-run.sh compare`), copied in and stripped.
#   BUNDLE_SLIM=1: only the `megaops` command, gpu-run.sh and the Python side, which is
#   what gpu-run.sh's engine, e2e, trace, sweep, tune and coldstart modes need with TESTS
#   empty; no test executables are built.
#   BUNDLE_TESTS="subkernel gemv": only these test executables (and the benchmarks), for
#   a bundle under the 64 MiB carry limit.
set -euo pipefail
cd "$(dirname "$0")/.."
pack=${1:-.carry/gpu}
dir=target/gpu-bundle/gpu
rm -rf "$dir" "$pack" && mkdir -p "$dir/tests" "$pack"
if [ "${BUNDLE_SLIM:-}" = 1 ]; then
  cargo build --release -p megaops-cli --bins
else
  packages=(-p megaops-device-kernels -p megaops-examples -p megaops-kernels -p megaops-models)
  cargo test --release --no-run "${packages[@]}" --message-format=json 2>/dev/null \
    | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    # Unit-test harnesses of binaries are skipped (no GPU tests there, and a bin named
    # like an integration test would overwrite it).
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test") \
            and m["target"]["kind"] != ["bin"]:
        print(m["target"]["name"] + "\t" + m["executable"])
' | while IFS=$'\t' read -r name exe; do
      cp "$exe" "$dir/tests/${name}"
    done
  if [ -n "${BUNDLE_TESTS:-}" ]; then
    for t in "$dir"/tests/*; do
      case " $BUNDLE_TESTS " in *" $(basename "$t") "*) ;; *) rm "$t" ;; esac
    done
  fi
  cargo build --release -p megaops-bench -p megaops-examples -p megaops-cli --bins
  cp target/release/megaops-bench "$dir/"
  for b in target/release/fig1 target/release/mlp; do [ -f "$b" ] && cp "$b" "$dir/"; done
fi
cp target/release/megaops scripts/gpu-run.sh "$dir/"
for b in ${BUNDLE_EXTRA:-}; do cp "$b" "$dir/" && strip "$dir/$(basename "$b")" 2>/dev/null || true; done
# The Python side: the SDPA baseline, the transformers comparison and the fixture maker.
for f in bench/*.py; do [ -f "$f" ] && cp "$f" "$dir/"; done
[ -d bench/py ] && cp -r bench/py "$dir/"
strip "$dir"/tests/* "$dir"/megaops-bench "$dir"/megaops "$dir"/fig1 "$dir"/mlp 2>/dev/null || true
ls -la "$dir" "$dir/tests"; du -sh "$dir"
tar -C "$(dirname "$dir")" -cf - gpu | xz -T2 -6 > "$pack/bundle.tar.xz"
du -sh "$pack/bundle.tar.xz"
