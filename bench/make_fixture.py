#!/usr/bin/env python3
"""Builds two tiny Hugging Face checkpoints WITH transformers (random init), for the Rust
engine's end-to-end tests, each with a reference of transformers' greedy tokens:

  OUT/tiny-qwen3   Qwen3ForCausalLM: hidden 64, 2 layers, 2 query heads, 1 kv head,
                   head_dim 64 (q_dim 128 != hidden), intermediate 128, vocab 300, tied
                   embeddings, rope_theta 1e6, max_position_embeddings 256.
  OUT/tiny-llama   LlamaForCausalLM: hidden 64, 2 layers, 4 query heads, 2 kv heads
                   (group size 2), head_dim 64, intermediate 128, vocab 302, untied,
                   rope_theta 5e5 with llama3 rope scaling (factor 8, low 1, high 4,
                   original_max_position_embeddings 64), max_position_embeddings 256.

Each folder: config.json + model.safetensors (bf16, save_pretrained) + reference.json:
  {"prompts": [[1,2,3],[...]], "max_new_tokens": 8, "tokens": [[...],[...]],
   "logits_margin_min": m, ..., "single": {"prompts": [[1,2,3]], ...}}
tokens are transformers' greedy tokens with a KV cache, computed in float32 from the bf16
weights (the saved folder is reloaded in float32 to compute them). logits_margin_min is
the smallest top-1 minus top-2 logit over all steps and sequences (also relative to the
logits' std, logits_margin_min_rel): an engine whose logit error stays below about half of
it must reproduce the tokens exactly.

Weights: normal std 0.2 for embeddings and projections, norm weights 1 + U(-0.25, 0.25),
so greedy tokens vary. The seed (--seed, default 0) is advanced until every sequence has
at least 3 distinct tokens and logits_margin_min_rel >= --min-margin-rel (default 0.03),
so that a bf16 engine is not flipped by a near tie; the seed used is in reference.json.

Usage: python3 bench/make_fixture.py --out tests/fixtures   (CPU is fine; needs torch,
transformers, safetensors)
"""

import argparse
import json
import os
import shutil

import torch

PROMPTS = [[1, 2, 3], [42, 7, 250]]
MAX_NEW = 8

COMMON = dict(hidden_size=64, num_hidden_layers=2, head_dim=64, intermediate_size=128, max_position_embeddings=256,
              bos_token_id=1, eos_token_id=2)
MODELS = {
    "tiny-qwen3": ("qwen3", dict(COMMON, vocab_size=300, num_attention_heads=2, num_key_value_heads=1,
                                 rms_norm_eps=1e-6, tie_word_embeddings=True), 1000000.0, None),
    "tiny-llama": ("llama", dict(COMMON, vocab_size=302, num_attention_heads=4, num_key_value_heads=2,
                                 rms_norm_eps=1e-5, tie_word_embeddings=False), 500000.0,
                   dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                        original_max_position_embeddings=64)),
}


def make_config(kind, d, theta, rope):
    """transformers 5.x takes rope_parameters (with rope_theta inside); 4.x rope_theta + rope_scaling."""
    from transformers import LlamaConfig, Qwen3Config

    cls = Qwen3Config if kind == "qwen3" else LlamaConfig
    params = dict(rope or {"rope_type": "default"}, rope_theta=theta)
    try:
        cfg = cls(rope_parameters=params, **d)
        rp = getattr(cfg, "rope_parameters", None)
        if not isinstance(rp, dict) or rp.get("rope_type") != params["rope_type"]:
            raise TypeError("rope_parameters not taken")
    except TypeError:
        cfg = cls(rope_theta=theta, rope_scaling=rope, **d)
    if rope is not None:
        rs = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        assert rs.get("rope_type", rs.get("type")) == "llama3", rs
    assert cfg.head_dim == 64 and cfg.tie_word_embeddings == d["tie_word_embeddings"]
    return cfg


def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.5 * (torch.rand(p.shape, generator=g) - 0.5))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
            # Round to bf16 now, so the in-memory float32 model is exactly what is saved.
            p.copy_(p.to(torch.bfloat16).float())


def greedy(model, prompts, n):
    """transformers greedy with a KV cache; returns tokens [B][n], margins [B][n], stds [B][n]."""
    ids = torch.tensor(prompts, dtype=torch.long)
    toks, margins, stds = [], [], []
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past = out.past_key_values
        for t in range(n):
            logits = out.logits[:, -1, :].float()
            top = logits.topk(2, -1).values
            margins.append((top[:, 0] - top[:, 1]).tolist())
            stds.append(logits.std(-1).tolist())
            nxt = logits.argmax(-1)
            toks.append(nxt.tolist())
            if t + 1 == n:
                break
            out = model(input_ids=nxt[:, None], past_key_values=past, use_cache=True)
            past = out.past_key_values
    tr = lambda m: [list(r) for r in zip(*m)]  # noqa: E731
    return tr(toks), tr(margins), tr(stds)


def reference(model, prompts):
    toks, margins, stds = greedy(model, prompts, MAX_NEW)
    mins = min(min(m) for m in margins)
    rel = min(m / s for mr, sr in zip(margins, stds) for m, s in zip(mr, sr))
    return {"prompts": prompts, "max_new_tokens": MAX_NEW, "tokens": toks, "logits_margin_min": mins,
            "logits_margin_min_rel": rel, "logits_std_mean": sum(map(sum, stds)) / (len(stds) * MAX_NEW),
            "margins": margins}


def quality(ref, single):
    distinct = min(len(set(t)) for t in ref["tokens"] + single["tokens"])
    return distinct, min(ref["logits_margin_min_rel"], single["logits_margin_min_rel"])


def folder_size(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tries", type=int, default=64)
    ap.add_argument("--min-margin-rel", type=float, default=0.03)
    ap.add_argument("--only", default=None, help="build only this model (tiny-qwen3 or tiny-llama)")
    args = ap.parse_args()

    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    for name, (kind, d, theta, rope) in MODELS.items():
        if args.only and name != args.only:
            continue
        cfg = make_config(kind, d, theta, rope)
        best = None
        for seed in range(args.seed, args.seed + args.tries):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(cfg).float().eval()
            init_weights(model, seed)
            if cfg.tie_word_embeddings:
                assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
            ref, single = reference(model, PROMPTS), reference(model, PROMPTS[:1])
            distinct, margin = quality(ref, single)
            score = (distinct >= 3, margin)
            if best is None or score > best[0]:
                best = (score, seed, model)
            if distinct >= 3 and margin >= args.min_margin_rel:
                break
        (ok_distinct, margin), seed, model = best
        if not ok_distinct or margin < args.min_margin_rel:
            print(f"warning: {name}: no seed in {args.tries} tries met the bar; using seed {seed} "
                  f"(margin_rel {margin:.4f})")
        path = os.path.join(args.out, name)
        shutil.rmtree(path, ignore_errors=True)
        model.to(torch.bfloat16).save_pretrained(path, safe_serialization=True)
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(path, extra)):
                os.remove(os.path.join(path, extra))
        # The reference from the saved folder itself: bf16 weights, loaded in float32.
        try:
            re = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        except TypeError:
            re = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
        ref, single = reference(re, PROMPTS), reference(re, PROMPTS[:1])
        ref["single"] = single
        ref.update(seed=seed, model=name, weights_dtype="bfloat16", compute_dtype="float32",
                   transformers_version=__import__("transformers").__version__,
                   torch_version=torch.__version__,
                   batch_row0_equals_single=ref["tokens"][0] == single["tokens"][0])
        with open(os.path.join(path, "reference.json"), "w") as f:
            json.dump(ref, f, indent=1)
        files = sorted(os.listdir(path))
        print(f"{name}: seed {seed}, {folder_size(path) / 1024:.1f} KiB ({', '.join(files)})")
        print(f"  tokens {ref['tokens']}  single {single['tokens']}")
        print(f"  logits_margin_min {ref['logits_margin_min']:.4f} (rel {ref['logits_margin_min_rel']:.4f}), "
              f"single {single['logits_margin_min']:.4f}; batch row 0 == single: {ref['batch_row0_equals_single']}")
    if os.path.isdir(args.out):
        for name in sorted(os.listdir(args.out)):
            p = os.path.join(args.out, name)
            if os.path.isdir(p):
                print(f"size {name}: {folder_size(p)} bytes")


if __name__ == "__main__":
    main()
