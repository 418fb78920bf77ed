#!/usr/bin/env bash
# The test command of README.md: formatting, lints, then every test of the workspace.
# Without a GPU, kernels run on the CPU backend and GPU-only tests say why they skip.
# The PTX validation (ptxas over every kernel entry, with registers and spills) prints
# its table.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
cargo test -p megaops --test ptxas -- --nocapture
