#!/usr/bin/env python3
"""Prints issue 14's full table from the rows of `megaops bench --json` and
`torch_baseline.py --json` (bench/e2e.jsonl) as Markdown, one table per GPU:

    python3 bench/table_e2e.py bench/e2e.jsonl [device ...]

    python3 bench/table_e2e.py --missing bench/e2e.jsonl [device ...]

With --missing it prints instead the E2E_ARGS and TORCH_ARGS of `gpu-run.sh e2e` that
measure the cells empty on every listed GPU (torch's compiling sets last; TORCH_ARGS
`none` when only MegaOps cells are empty), or says on stderr that none is.

Devices are parts of the rows' device names (default: H200 H100). One line per model,
workload and batch; one column per mode, each cell the newest row of that model,
workload, batch and mode on that GPU, tagged with its run: the decode step (ms) for the
decode workloads, the prefill (ms) for prefill. The baseline's columns are its step
compiled and captured, and captured without compile (its prefill: compiled, and eager);
its step without a graph (`--modes eager`) is left out. MegaOps rows count only at the library's
defaults (Rust prefill GEMMs, norm fusion off, RoPE fusion on, programmatic begin rule).
The speed column is torch compiled+graph over MegaOps overlapped: from one run where both
modes have a row of that run, else from the two newest rows (both runs are named, and
ratios across runs hold only as far as the machine state did). An empty cell is a row
not measured.
"""

import json
import sys

MODELS = ["qwen3-0.6b", "llama-3.2-1b", "qwen3-1.7b", "qwen3-8b"]
WORKLOADS = ["short-decode", "long-decode", "prefill"]
BATCHES = [1, 2, 4, 8, 16]
# (column, the mode of its decode rows, the mode of its prefill rows): the baseline
# captures its decode step with or without compile, and runs its prefill compiled or not.
MODES = [
    ("MegaOps overlapped", "overlapped", "overlapped"),
    ("MegaOps serial", "serial", "serial"),
    ("MegaOps eager", "eager", "eager"),
    ("torch compiled (+graph)", "torch-compiled-graph", "torch-compiled-graph"),
    ("torch not compiled (+graph)", "torch-eager-graph", "torch-eager"),
]


def at_defaults(r):
    """Whether a MegaOps row ran the library's defaults of its commit: the row's own
    `at_defaults` where it has one; older rows (defaults: Rust prefill GEMMs, one-chunk
    subkernels on side streams) by their knob fields, which they may lack."""
    if "at_defaults" in r:
        return r["at_defaults"]
    return (
        r.get("prefill_gemm", "rust") == "rust"
        and not r.get("norm_fusion", False)
        and r.get("rope_fusion", True)
        and r.get("begin_rule", "programmatic") == "programmatic"
        and not r.get("site_overrides")
        and not r.get("one_chunk_on_lane", False)
    )


def figure(r):
    return r["prefill_ms"] if r["workload"] == "prefill" else r["step_ms"]


def cells_of(rows, device):
    """(model, workload, batch, mode) -> the rows of that cell on `device`, newest last."""
    cells = {}
    for r in rows:
        if device not in r.get("device", "") or figure(r) is None:
            continue
        if not r["mode"].startswith("torch-") and not at_defaults(r):
            continue
        cells.setdefault((r["model"], r["workload"], r["batch"], r["mode"]), []).append(r)
    return cells


def tables(rows, device):
    cells = cells_of(rows, device)
    out = [
        "| model | workload | batch | " + " | ".join(label for label, _, _ in MODES) + " | speed |",
        "|---|---|---|" + "---|" * (len(MODES) + 1),
    ]
    filled = 0
    for model, workload, batch, modes in table_lines():
        line = [model, workload, str(batch)]
        for mode in modes:
            got = cells.get((model, workload, batch, mode))
            filled += bool(got)
            line.append(f"{figure(got[-1]):.4g} ({got[-1].get('run', '?')})" if got else "")
        line.append(speed(cells, model, workload, batch))
        out.append("| " + " | ".join(line) + " |")
    return out, filled


def speed(cells, model, workload, batch):
    ours = cells.get((model, workload, batch, "overlapped"), [])
    theirs = cells.get((model, workload, batch, "torch-compiled-graph"), [])
    if not ours or not theirs:
        return ""
    same = [(o, t) for t in reversed(theirs) for o in reversed(ours) if o.get("run") == t.get("run")]
    o, t = same[0] if same else (ours[-1], theirs[-1])
    runs = o.get("run", "?") if o.get("run") == t.get("run") else f"{o.get('run', '?')} / {t.get('run', '?')}"
    return f"{figure(t) / figure(o):.3f}× ({runs})"


def table_lines():
    """Every line of the table: (model, workload, batch, the mode of each column)."""
    for model in MODELS:
        for workload in WORKLOADS:
            for batch in BATCHES:
                modes = [p if workload == "prefill" else d for _, d, p in MODES]
                yield model, workload, batch, modes


def wanted():
    """Every cell of the table: (model, workload, batch, mode)."""
    for model, workload, batch, modes in table_lines():
        for mode in modes:
            yield model, workload, batch, mode


def missing_sets(empty):
    """`gpu-run.sh e2e`'s E2E_ARGS and TORCH_ARGS that measure the empty cells: one set per
    model, workload and mode; an empty torch cell also asks for MegaOps overlapped rows of
    the same run, so that its ratio is of one machine state."""
    ours, theirs = {}, {}
    for model, workload, batch, mode in empty:
        if mode.startswith("torch-"):
            theirs.setdefault((model, workload, mode[len("torch-"):]), set()).add(batch)
            ours.setdefault((model, workload, "overlapped"), set()).add(batch)
        else:
            ours.setdefault((model, workload, mode), set()).add(batch)

    def sets(groups):
        # Compiling sets last: they cost a minute or more of autotuning a row.
        order = sorted(groups.items(), key=lambda g: g[0][2] == "compiled-graph")
        return ";".join(
            f"--presets {m} --workloads {w} --batches {','.join(map(str, sorted(b)))} --modes {mode}"
            for (m, w, mode), b in order
        )

    return sets(ours), sets(theirs)


def main():
    args = sys.argv[1:]
    missing = "--missing" in args
    args = [a for a in args if a != "--missing"]
    src = args[0]
    devices = args[1:] or ["H200", "H100"]
    rows = [json.loads(line) for line in open(src) if line.strip()]
    measured = set().union(*(cells_of(rows, d).keys() for d in devices))
    if missing:
        e2e, torch = missing_sets([c for c in wanted() if c not in measured])
        if not e2e:
            # An empty E2E_ARGS would make `gpu-run.sh e2e` run the whole default bench.
            print(f"every cell has a row on {' or '.join(devices)}: nothing to measure", file=sys.stderr)
            return
        print(f'E2E_ARGS="{e2e}"')
        print(f'TORCH_ARGS="{torch or "none"}"')
        return
    total = len(list(wanted()))
    for device in devices:
        out, filled = tables(rows, device)
        print(f"#### {device}: {filled} of {total} cells measured\n")
        print("\n".join(out))
        print()
    if len(devices) > 1:
        anywhere = [c for c in wanted() if c in measured]
        print(f"On any of {', '.join(devices)}: {len(anywhere)} of {total} cells measured.")

if __name__ == "__main__":
    main()
