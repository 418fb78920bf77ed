#!/usr/bin/env bash
# The test command of README.md: formatting, lints, the API docs, then every test of the
# workspace.
# Without a GPU, kernels run on the CPU backend and GPU-only tests say why they skip.
# The PTX validation (ptxas over every kernel entry, with registers and spills) prints
# its table.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The API docs build without broken or private intra-doc links.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
# The PTX validation runs once, last, with its table printed; built with the workspace's
# features (`-p megaops` alone would resolve other features and rebuild much of the tree).
ptxas_tests=(every_kernel_entry_assembles_without_spills no_function_keeps_much_state_in_local_memory)
cargo test --workspace -- "${ptxas_tests[@]/#/--skip=}"
out=$(cargo test --workspace --test ptxas -- --nocapture "${ptxas_tests[@]}" 2>&1) || { echo "$out"; exit 1; }
echo "$out"
grep -q "ok. ${#ptxas_tests[@]} passed" <<< "$out" || { echo "the PTX validation did not run ${ptxas_tests[*]}" >&2; exit 1; }
