#!/usr/bin/env python3
"""Plots the speedup of overlapped execution over no-overlap per shape, from the
`results.jsonl` that `megaops-bench overlap mlp --out DIR` writes.

    python3 bench/plot_overlap.py DIR/results.jsonl bench/overlap.png

Every table whose columns include "speedup" becomes one panel: one bar per row, labelled
by the row's first two cells, with the 1.15× goal and the 0.98× floor of the issue drawn.
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def speedup(cell):
    return float(cell.rstrip("×x").strip())


def main(src, dst):
    tables = []
    with open(src) as f:
        for line in f:
            t = json.loads(line)
            if "speedup" in t["columns"]:
                tables.append(t)
    if not tables:
        sys.exit(f"no table with a speedup column in {src}")
    fig, axes = plt.subplots(len(tables), 1, figsize=(11, 4.6 * len(tables)), squeeze=False)
    for ax, t in zip(axes[:, 0], tables):
        col = t["columns"].index("speedup")
        rows = [r for r in t["rows"] if r[col] not in ("", "-")]
        labels = [f"{r[0]}\n{r[1]}" for r in rows]
        values = [speedup(r[col]) for r in rows]
        colors = ["tab:green" if v >= 1.15 else "tab:blue" if v >= 0.98 else "tab:red" for v in values]
        ax.bar(range(len(values)), values, color=colors)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(1.15, color="tab:green", linestyle="--", linewidth=0.8, label="goal 1.15×")
        ax.axhline(0.98, color="tab:red", linestyle=":", linewidth=0.8, label="floor 0.98×")
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels(labels, fontsize=6, rotation=30, ha="right")
        ax.set_ylabel("no-overlap / overlap")
        ax.set_ylim(min(0.9, min(values) - 0.05), max(1.3, max(values) + 0.1))
        ax.set_title(t["title"], fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(dst, dpi=130)
    print(f"wrote {dst}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
