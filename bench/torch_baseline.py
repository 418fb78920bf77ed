#!/usr/bin/env python3
"""The PyTorch baseline of `megaops bench`: the same models, weights, workloads and batches,
written the way gpt-fast writes a fast PyTorch decoder, timed the same way, rows in the
same JSON shape.

The model (Qwen3 / Llama-3, from the Hugging Face folder `megaops export` writes, bf16):
fused QKV and gate/up projections, RMSNorm in float32 as transformers computes it, q/k
RMSNorm per head (Qwen3), RoPE on halves with llama3 frequency scaling where the config
has it, a static KV cache [batch, kv_heads, max_seq, head_dim] written with index_copy_,
scaled_dot_product_attention with enable_gqa (decode: the whole static cache under a
position mask, as gpt-fast does; prefill: causal over the prompt), greedy argmax on the
device.

Modes:
  compiled-graph  the decode step under torch.compile(mode="max-autotune-no-cudagraphs",
                  fullgraph=True), captured with the token feedback and the position
                  increment into one CUDA graph (torch.cuda.CUDAGraph) and replayed: the
                  strongest PyTorch setup for a static-shape decoder. The prefill workload
                  compiles the prefill the same way (one call, no graph); the decode
                  workloads' prefill_ms is then of the eager prefill.
  eager-graph     the same step without compile, captured into one CUDA graph.
  eager           without compile and without a graph.
Timing: CUDA events around every replay (or step), no host synchronisation between steps,
median with p10/p90 over the run's steps; prefill: one untimed call, then the median of
--prefill-reps. MBU: weight bytes + KV bytes at the run's mean context, over the step time,
against --read-gbps (pass the figure `megaops bench` measured in the same run; its JSON
rows carry it as read_gbps).

--check compares the baseline's prefill logits with transformers' (float32) on the same
folder before timing, so the figures are of the same model.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

WORKLOADS = {"short-decode": (128, 64), "long-decode": (1024, 1024), "prefill": (1024, 1)}


def rope_params(cfg):
    """(theta, scaling dict or None) from a transformers 4.x or 5.x config."""
    params = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling") or params or None
    theta = cfg.get("rope_theta", params.get("rope_theta", 10000.0))
    if scaling and scaling.get("rope_type", scaling.get("type")) in (None, "default"):
        scaling = None
    return theta, scaling


def inv_freq(cfg, head_dim):
    theta, scaling = rope_params(cfg)
    f = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if scaling is None:
        return f
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "llama3":
        raise SystemExit(f"rope scaling {kind} is not supported by the baseline")
    factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / f
    lo_wl, hi_wl = old / lo, old / hi
    scaled = torch.where(wavelen > lo_wl, f / factor, f)
    smooth = (old / wavelen - lo) / (hi - lo)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    is_mid = (wavelen >= hi_wl) & (wavelen <= lo_wl)
    return torch.where(is_mid, mid, scaled)


def rms_norm(x, w, eps):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def rotate(x, cos, sin):
    """RoPE on halves (transformers' rotate_half); x [b, heads, t, d], cos/sin [t, d]."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    rot = torch.cat((-x2, x1), dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


class Decoder(torch.nn.Module):
    def __init__(self, cfg, tensors, batch, max_seq, device):
        super().__init__()
        self.cfg = cfg
        self.qwen3 = cfg["architectures"][0].startswith("Qwen3")
        self.h = cfg["hidden_size"]
        self.nq = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads", self.nq)
        self.d = cfg.get("head_dim") or self.h // self.nq
        self.eps = cfg["rms_norm_eps"]
        self.layers = cfg["num_hidden_layers"]
        dev = dict(device=device, dtype=torch.bfloat16)
        t = lambda name: tensors[name].to(**dev)
        self.embed = t("model.embed_tokens.weight")
        self.head = self.embed if cfg.get("tie_word_embeddings") else t("lm_head.weight")
        self.norm = t("model.norm.weight")
        self.w = []
        for layer in range(self.layers):
            p = f"model.layers.{layer}."
            a = p + "self_attn."
            w = {
                "in_norm": t(p + "input_layernorm.weight"),
                "qkv": torch.cat([t(a + "q_proj.weight"), t(a + "k_proj.weight"), t(a + "v_proj.weight")]),
                "o": t(a + "o_proj.weight"),
                "post_norm": t(p + "post_attention_layernorm.weight"),
                "gate_up": torch.cat([t(p + "mlp.gate_proj.weight"), t(p + "mlp.up_proj.weight")]),
                "down": t(p + "mlp.down_proj.weight"),
            }
            if self.qwen3:
                w["q_norm"] = t(a + "q_norm.weight")
                w["k_norm"] = t(a + "k_norm.weight")
            self.w.append(w)
        shape = (batch, self.nkv, max_seq, self.d)
        self.k_cache = [torch.zeros(shape, **dev) for _ in range(self.layers)]
        self.v_cache = [torch.zeros(shape, **dev) for _ in range(self.layers)]
        pos = torch.arange(max_seq, dtype=torch.float64)
        ang = torch.outer(pos, inv_freq(cfg, self.d))
        ang = torch.cat([ang, ang], dim=-1)
        self.cos = ang.cos().float().to(device)
        self.sin = ang.sin().float().to(device)
        self.mask = torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool, device=device))

    def forward(self, ids, pos, prefill):
        """ids [b, t] int64, pos [t] int64 positions (equal for every sequence): the last
        position's next-token ids [b] and its float32 logits [b, vocab]."""
        b, t = ids.shape
        x = F.embedding(ids, self.embed)
        cos, sin = self.cos[pos], self.sin[pos]
        qd, kvd = self.nq * self.d, self.nkv * self.d
        residual = None
        for layer in range(self.layers):
            w = self.w[layer]
            residual = x if residual is None else residual + x
            hn = rms_norm(residual, w["in_norm"], self.eps)
            q, k, v = (hn @ w["qkv"].T).split([qd, kvd, kvd], dim=-1)
            q = q.view(b, t, self.nq, self.d)
            k = k.view(b, t, self.nkv, self.d)
            v = v.view(b, t, self.nkv, self.d)
            if self.qwen3:
                q = rms_norm(q, w["q_norm"], self.eps)
                k = rms_norm(k, w["k_norm"], self.eps)
            q, k, v = (y.transpose(1, 2) for y in (q, k, v))
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            self.k_cache[layer].index_copy_(2, pos, k)
            self.v_cache[layer].index_copy_(2, pos, v)
            if prefill:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                mask = self.mask[pos][None, None]
                o = F.scaled_dot_product_attention(
                    q, self.k_cache[layer], self.v_cache[layer], attn_mask=mask, enable_gqa=True
                )
            x = o.transpose(1, 2).reshape(b, t, qd) @ w["o"].T
            residual = residual + x
            hn = rms_norm(residual, w["post_norm"], self.eps)
            gate, up = (hn @ w["gate_up"].T).chunk(2, dim=-1)
            x = (F.silu(gate) * up) @ w["down"].T
        last = rms_norm(residual[:, -1] + x[:, -1], self.norm, self.eps)
        logits = (last @ self.head.T).float()
        return logits.argmax(-1), logits


def weight_bytes(cfg):
    h, i, v, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    nq = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nq)
    d = cfg.get("head_dim") or h // nq
    norms = 2 * d if cfg["architectures"][0].startswith("Qwen3") else 0
    layer = h * (nq + 2 * nkv) * d + nq * d * h + 3 * h * i + 2 * h + norms
    return 2 * (v * h + h + L * layer), 2 * 2 * nkv * d * L


def percentiles(v):
    v = sorted(v)
    at = lambda q: v[round((len(v) - 1) * q)]
    return at(0.5), at(0.1), at(0.9)


class Mark:
    """A CUDA event on the GPU; the wall clock after a synchronise on the CPU (smoke tests)."""

    def __init__(self, dev):
        self.dev = dev
        self.event = torch.cuda.Event(enable_timing=True) if dev == "cuda" else None
        self.t = None

    def record(self):
        if self.event is not None:
            self.event.record()
        else:
            self.t = time.perf_counter()


def elapsed_ms(pairs):
    if pairs and pairs[0][0].event is not None:
        torch.cuda.synchronize()
        return [a.event.elapsed_time(b.event) for a, b in pairs]
    return [(b.t - a.t) * 1e3 for a, b in pairs]


def run_row(model, name, cfg, workload, batch, mode, prompt_len, new_tokens, reps, read_gbps, seed, fns, dev):
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, cfg["vocab_size"], (batch, prompt_len), generator=gen).to(dev)
    prefill_pos = torch.arange(prompt_len, device=dev)
    prefill_fn, step_fn = fns[mode]

    with torch.no_grad():
        first, _ = prefill_fn(prompts, prefill_pos)
        sync(dev)
        times = []
        for _ in range(max(reps, 1)):
            a, b = Mark(dev), Mark(dev)
            a.record()
            first, _ = prefill_fn(prompts, prefill_pos)
            b.record()
            times.append((a, b))
        prefill_ms = percentiles(elapsed_ms(times))[0]

        steps = new_tokens - 1
        step = None
        if steps > 0:
            cur = first.view(batch, 1).clone()
            pos = torch.tensor([prompt_len], device=dev)
            start_cur, start_pos = cur.clone(), pos.clone()

            def one():
                nxt, _ = step_fn(cur, pos)
                cur.copy_(nxt.view(batch, 1))
                pos.add_(1)

            graph = None
            if mode != "eager" and dev == "cuda":
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        one()
                torch.cuda.current_stream().wait_stream(s)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    one()
            cur.copy_(start_cur)
            pos.copy_(start_pos)
            sync(dev)
            marks = [Mark(dev) for _ in range(steps + 1)]
            marks[0].record()
            tokens = []
            for i in range(steps):
                if graph is not None:
                    graph.replay()
                else:
                    one()
                if dev != "cuda":
                    tokens.append(cur.view(-1).tolist())
                marks[i + 1].record()
            step = percentiles(elapsed_ms(list(zip(marks, marks[1:]))))
    wb, kv = weight_bytes(cfg)
    mean_context = prompt_len + new_tokens / 2
    step_ms = step[0] if step else None
    gbps = (wb + kv * mean_context * batch) / (step_ms * 1e-3) / 1e9 if step_ms else None
    return {
        "model": name,
        "workload": workload,
        "batch": batch,
        "mode": "torch-" + mode,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "step_ms": step_ms,
        "step_p10_ms": step[1] if step else None,
        "step_p90_ms": step[2] if step else None,
        "tokens_per_s": batch / (step_ms * 1e-3) if step_ms else batch * prompt_len / (prefill_ms * 1e-3),
        "step_gbps": gbps,
        "mbu": gbps / read_gbps if gbps and read_gbps else None,
        "prefill_ms": prefill_ms,
        "read_gbps": read_gbps,
        "timing": "cuda-events" if dev == "cuda" else "wall",
        "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
        **({"tokens": [first.view(-1).tolist()] + tokens} if dev != "cuda" and steps > 0 else {}),
    }


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def check_against_transformers(folder, model, cfg, dev):
    """The baseline's prefill logits against transformers' float32 ones (17 tokens)."""
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(dev).eval()
    ids = torch.randint(0, cfg["vocab_size"], (1, 17), generator=torch.Generator().manual_seed(1)).to(dev)
    with torch.no_grad():
        want = ref(ids).logits[:, -1].float()
        _, got = model(ids, torch.arange(17, device=dev), True)
    del ref
    rms = ((got - want).pow(2).mean().sqrt() / want.std()).item()
    same = bool((got.argmax(-1) == want.argmax(-1)).all())
    return rms, same


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--megaops", default="./megaops", help="the megaops binary (exports the presets)")
    ap.add_argument("--presets", default="qwen3-0.6b,qwen3-1.7b,qwen3-8b,llama-3.2-1b")
    ap.add_argument("--folder", help="a Hugging Face folder instead of presets")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workloads", default="short-decode,long-decode,prefill")
    ap.add_argument("--batches", default="1,2,4,8,16")
    ap.add_argument("--modes", default="compiled-graph,eager-graph,eager")
    ap.add_argument("--prompt-len", type=int)
    ap.add_argument("--new-tokens", type=int)
    ap.add_argument("--prefill-reps", type=int, default=3)
    ap.add_argument("--read-gbps", type=float, help="the roofline, from megaops bench's rows")
    ap.add_argument("--work", default="/tmp/megaops-presets", help="where presets are exported")
    ap.add_argument("--json", help="append one JSON row per run to this file")
    ap.add_argument("--budget-s", type=float, default=1e9, help="skip the rest after this long")
    ap.add_argument("--check", action="store_true", help="compare with transformers first")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test (eager only)")
    args = ap.parse_args()
    t_start = time.time()
    dev = args.device
    models = [(args.folder, args.folder)] if args.folder else [(p, None) for p in args.presets.split(",")]
    workloads = args.workloads.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    modes = args.modes.split(",")
    out = open(args.json, "a") if args.json else None
    for name, folder in models:
        if folder is None:
            folder = os.path.join(args.work, name + (f"-{args.layers}l" if args.layers else ""))
            if not os.path.exists(os.path.join(folder, "config.json")):
                cmd = [args.megaops, "export", "--preset", name, "--seed", str(args.seed), "--out", folder]
                if args.layers:
                    cmd += ["--layers", str(args.layers)]
                subprocess.run(cmd, check=True)
        cfg = json.load(open(os.path.join(folder, "config.json")))
        tensors = {}
        for f in sorted(Path(folder).glob("*.safetensors")):
            tensors.update(load_file(str(f)))
        for workload in workloads:
            plen, new = WORKLOADS[workload]
            plen = args.prompt_len or plen
            new = 1 if workload == "prefill" else (args.new_tokens or new)
            for batch in batches:
                if time.time() - t_start > args.budget_s:
                    print(f"budget spent: skipping {name} {workload} batch {batch}", file=sys.stderr)
                    continue
                torch.compiler.reset()
                model = Decoder(cfg, tensors, batch, plen + new, dev)
                if args.check and workload == workloads[0] and batch == batches[0]:
                    # hf_compare.py's bound for bf16 against float32 at L layers.
                    tol = 0.005 + 0.015 * math.sqrt(cfg["num_hidden_layers"])
                    rms, same = check_against_transformers(folder, model, cfg, dev)
                    print(f"{name}: baseline vs transformers rms/std {rms:.4f} (bound {tol:.3f}), "
                          f"same argmax {same}", file=sys.stderr)
                    if rms > tol:
                        raise SystemExit(f"{name}: the baseline does not compute the model (rms/std {rms:.4f})")
                eager_prefill = lambda ids, pos: model(ids, pos, True)
                eager_step = lambda ids, pos: model(ids, pos, False)
                fns = {"eager": (eager_prefill, eager_step), "eager-graph": (eager_prefill, eager_step)}
                if "compiled-graph" in modes:
                    # Each compile autotunes its matrix shapes (about a second per candidate
                    # kernel), so a decode workload keeps its prefill eager and a prefill
                    # workload compiles only the prefill.
                    opts = dict(mode="max-autotune-no-cudagraphs", fullgraph=True, dynamic=False)
                    if workload == "prefill":
                        fns["compiled-graph"] = (torch.compile(eager_prefill, **opts), eager_step)
                    else:
                        fns["compiled-graph"] = (eager_prefill, torch.compile(eager_step, **opts))
                for mode in modes:
                    if workload == "prefill" and mode == "eager-graph":
                        continue
                    t0 = time.time()
                    row = run_row(model, name, cfg, workload, batch, mode, plen, new, args.prefill_reps,
                                  args.read_gbps, args.seed, fns, dev)
                    row["wall_s"] = round(time.time() - t0, 1)
                    print(json.dumps(row), flush=True)
                    if out:
                        out.write(json.dumps(row) + "\n")
                        out.flush()
                del model, fns
                if dev == "cuda":
                    torch.cuda.empty_cache()
        del tensors


if __name__ == "__main__":
    main()
