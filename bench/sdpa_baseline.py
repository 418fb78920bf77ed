#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the shapes of megaops-bench's `attention`
suite, printed in the same Markdown table format, for a side-by-side comparison.

Run it in the same GPU call as the Rust suite (the GPU machine has torch, no network):

    megaops-bench attention --out $OUT && python3 bench/sdpa_baseline.py --out $OUT

- Decode: q [batch, hq, 1, D] against K/V [batch, hkv, ctx, D] (bf16, contiguous, every
  sequence at the full context), enable_gqa=True; bandwidth over the K and V bytes.
- Prefill: one causal sequence, q [1, hq, seq, D], K/V [1, hkv, seq, D]; TFLOP/s of the
  causal work 2·hq·D·seq·(seq+1), as the Rust suite counts it.

Timing as in the Rust harness: several calls captured in a CUDA graph, replays timed
with CUDA events, median per call; inputs rotate over disjoint sets when one call's K/V
would fit in L2, and are random (never zeros). Errors are printed and the script goes
on; it stops adding shapes past its time budget.
"""

import argparse
import json
import math
import os
import time

import torch
import torch.nn.functional as F

MODELS = [("Qwen3-8B", 32, 8, 128), ("Qwen3-1.7B", 16, 8, 128), ("Llama-3.2-1B", 32, 8, 64)]
ROTATE_BYTES = 160 << 20
READ_GBPS_H200 = 4280.0  # DESIGN.md, measured pure-read bandwidth of the H200
BUDGET_S = float(os.environ.get("MEGAOPS_BENCH_BUDGET_S", "60"))


def f3(x):
    """The Rust harness's number format."""
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3f}"


class Table:
    def __init__(self, title, columns):
        self.title, self.columns, self.rows = title, columns, []

    def row(self, cells):
        self.rows.append([str(c) for c in cells])

    def markdown(self):
        s = f"### {self.title}\n\n| " + " | ".join(self.columns) + " |\n|" + "|".join(["---"] * len(self.columns)) + "|\n"
        for r in self.rows:
            s += "| " + " | ".join(r) + " |\n"
        return s

    def emit(self, out):
        print(self.markdown(), flush=True)
        if out:
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "results.md"), "a") as f:
                f.write(self.markdown() + "\n")
            with open(os.path.join(out, "results.jsonl"), "a") as f:
                f.write(json.dumps({"title": self.title, "columns": self.columns, "rows": self.rows}) + "\n")


def graph_time_us(call, reps, replays):
    """Median µs per call of `call(i)` over graph replays of `reps` calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):  # warm-up outside the capture (kernel selection, workspaces)
            call(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(reps):
            call(i)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    times.sort()
    return times[len(times) // 2]


def rand(shape, gen):
    return (torch.rand(shape, device="cuda", dtype=torch.float32, generator=gen) * 2 - 1).to(torch.bfloat16)


def decode_table(start, replays):
    t = Table(
        "Decode attention (PyTorch SDPA, bf16, enable_gqa)",
        ["model", "batch", "context", "µs", "KV GB/s", "% of 4.28 TB/s"],
    )
    gen = torch.Generator(device="cuda").manual_seed(1)
    for model, hq, hkv, d in MODELS:
        for batch in (1, 4, 16):
            for ctx in (1024, 4096, 16384):
                if time.time() - start > BUDGET_S:
                    print(f"decode {model} b={batch} ctx={ctx}: skipped (time budget)", flush=True)
                    continue
                try:
                    kv_bytes = 2 * batch * hkv * ctx * d * 2
                    sets = max(1, min(16, ROTATE_BYTES // kv_bytes))
                    q = rand((batch, hq, 1, d), gen)
                    kvs = [(rand((batch, hkv, ctx, d), gen), rand((batch, hkv, ctx, d), gen)) for _ in range(sets)]
                    def call(i, q=q, kvs=kvs, sets=sets):
                        k, v = kvs[i % sets]
                        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

                    us = graph_time_us(call, 8, replays)
                    gbps = kv_bytes / us * 1e-3
                    t.row([model, batch, ctx, f3(us), f3(gbps), f3(100 * gbps / READ_GBPS_H200)])
                    del kvs
                except Exception as e:  # noqa: BLE001 - print and continue
                    print(f"decode {model} b={batch} ctx={ctx}: {e}", flush=True)
                torch.cuda.empty_cache()
    return t


def prefill_table(start, replays):
    t = Table("Prefill attention (PyTorch SDPA, causal, bf16, enable_gqa)", ["model", "seq", "backend", "µs", "TFLOP/s"])
    gen = torch.Generator(device="cuda").manual_seed(2)
    for model, hq, hkv, d in MODELS:
        for seq in (1024, 4096):
            if time.time() - start > BUDGET_S:
                print(f"prefill {model} seq={seq}: skipped (time budget)", flush=True)
                continue
            try:
                q = rand((1, hq, seq, d), gen)
                k, v = rand((1, hkv, seq, d), gen), rand((1, hkv, seq, d), gen)
                def call(i, q=q, k=k, v=v):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

                us = graph_time_us(call, 2, replays)
                flops = 2.0 * hq * d * seq * (seq + 1)
                t.row([model, seq, "default", f3(us), f3(flops / us * 1e-6)])
            except Exception as e:  # noqa: BLE001
                print(f"prefill {model} seq={seq}: {e}", flush=True)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory for results.md / results.jsonl")
    ap.add_argument("--quick", action="store_true", help="fewer replays")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("sdpa_baseline: skipped, no GPU")
        return
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    start = time.time()
    replays = 3 if args.quick else 10
    for make in (decode_table, prefill_table):
        try:
            make(start, replays).emit(args.out)
        except Exception as e:  # noqa: BLE001
            print(f"{make.__name__}: {e}", flush=True)


if __name__ == "__main__":
    main()
