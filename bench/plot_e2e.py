#!/usr/bin/env python3
"""Plots tokens/s per batch size of one workload, MegaOps against PyTorch, from the rows
that `megaops bench --json` and `torch_baseline.py --json` write (bench/e2e.jsonl):

    python3 bench/plot_e2e.py bench/e2e.jsonl bench/e2e.png [workload] [device]

Only the rows of one GPU (device: a part of the rows' device name, default "H200") are
drawn, since ratios hold only within one machine, and only MegaOps rows at the library's
defaults of their commit (`table_e2e.at_defaults`). One panel per
model, one line per mode (the last row of each model, workload, batch and mode wins);
modes without rows for a model are left out. PyTorch without compile is its captured step
for the decode workloads and its eager prefill for `prefill`.
"""

import json
import sys

import matplotlib
from table_e2e import at_defaults

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODES = {
    "overlapped": ("MegaOps overlapped", "-", "o", "tab:blue"),
    "serial": ("MegaOps serial", "--", "o", "tab:cyan"),
    "torch-compiled-graph": ("PyTorch compiled + graph", "-", "s", "tab:red"),
    "torch-eager-graph": ("PyTorch eager + graph", "--", "s", "tab:orange"),
    "torch-eager": ("PyTorch eager", "--", "s", "tab:orange"),
}


def main():
    src, dst = sys.argv[1], sys.argv[2]
    workload = sys.argv[3] if len(sys.argv) > 3 else "short-decode"
    device = sys.argv[4] if len(sys.argv) > 4 else "H200"
    best = {}
    for line in open(src):
        r = json.loads(line)
        if device not in r.get("device", "") or r["workload"] != workload:
            continue
        if not r["mode"].startswith("torch-") and not at_defaults(r):
            continue
        # PyTorch without compile: the captured step in decode, the eager prefill.
        if r["mode"] == ("torch-eager-graph" if workload == "prefill" else "torch-eager"):
            continue
        if r["mode"] in MODES and r.get("tokens_per_s"):
            best[(r["model"], r["mode"], r["batch"])] = r["tokens_per_s"]
    models = sorted({m for m, _, _ in best})
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False)
    for ax, model in zip(axes[0], models):
        for mode, (label, style, marker, color) in MODES.items():
            pts = sorted((b, t) for (m, md, b), t in best.items() if m == model and md == mode)
            if workload == "prefill":
                label = label.replace(" + graph", "")  # the baseline's prefill is not captured
            if pts:
                ax.plot([b for b, _ in pts], [t for _, t in pts], style, marker=marker, color=color, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(model)
        ax.set_xlabel("batch")
        ax.set_ylabel("tokens/s")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{workload}: tokens/s on one {device}")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main()
