#!/usr/bin/env python3
"""A stand-in for the `megaops` command, built on transformers, to test bench/hf_compare.py
before the Rust command exists (and to calibrate its tolerance): `export` writes a preset
(full widths, --layers layers, seeded random weights, bf16 safetensors) with transformers;
`generate` runs the model in bf16 (like an engine that stores bf16 activations) with the
contract's JSON / --force-tokens / --logits-out. FAKE_MEGAOPS_BUG=<control name of
hf_compare.py> (e.g. rope-interleaved, no-final-norm) injects that bug into generate.

    python3 bench/hf_compare.py --megaops "python3 bench/py/fake_megaops.py" --cases qwen3-0.6b
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

QWEN = dict(vocab_size=151936, rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=40960, head_dim=128)
L3 = dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
          original_max_position_embeddings=8192)
LLAMA = dict(vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=131072)
PRESETS = {
    "qwen3-0.6b": ("qwen3", dict(QWEN, hidden_size=1024, intermediate_size=3072, num_attention_heads=16,
                                 num_key_value_heads=8, tie_word_embeddings=True)),
    "qwen3-1.7b": ("qwen3", dict(QWEN, hidden_size=2048, intermediate_size=6144, num_attention_heads=16,
                                 num_key_value_heads=8, tie_word_embeddings=True)),
    "qwen3-4b": ("qwen3", dict(QWEN, hidden_size=2560, intermediate_size=9728, num_attention_heads=32,
                               num_key_value_heads=8, tie_word_embeddings=True)),
    "qwen3-8b": ("qwen3", dict(QWEN, hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                               num_key_value_heads=8, tie_word_embeddings=False)),
    "llama-3.2-1b": ("llama", dict(LLAMA, hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                                   num_key_value_heads=8, head_dim=64, tie_word_embeddings=True, rope=L3)),
    "llama-3.2-3b": ("llama", dict(LLAMA, hidden_size=3072, intermediate_size=8192, num_attention_heads=24,
                                   num_key_value_heads=8, head_dim=128, tie_word_embeddings=True, rope=L3)),
    "llama-3.1-8b": ("llama", dict(LLAMA, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                   num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                                   rope=dict(L3, factor=8.0))),
    "tiny": ("qwen3", dict(QWEN, vocab_size=300, hidden_size=64, intermediate_size=128, num_attention_heads=2,
                           num_key_value_heads=1, head_dim=64, tie_word_embeddings=True, max_position_embeddings=2048)),
    "tiny-llama": ("llama", dict(LLAMA, vocab_size=302, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=64, tie_word_embeddings=False,
                                 max_position_embeddings=2048, rope=dict(L3, factor=8.0,
                                                                         original_max_position_embeddings=64))),
}


def make_config(kind, d, layers):
    from transformers import LlamaConfig, Qwen3Config
    d = dict(d)
    rope = d.pop("rope", None)
    theta = d.pop("rope_theta")
    cls = Qwen3Config if kind == "qwen3" else LlamaConfig
    try:
        params = dict(rope or {"rope_type": "default"}, rope_theta=theta)
        cfg = cls(num_hidden_layers=layers, rope_parameters=params, **d)
        assert (getattr(cfg, "rope_parameters", None) or {}).get("rope_type") == params["rope_type"]
    except (TypeError, AssertionError):
        cfg = cls(num_hidden_layers=layers, rope_theta=theta, rope_scaling=rope, **d)
    return cfg


def export(a):
    from transformers import AutoModelForCausalLM
    kind, d = PRESETS[a.preset]
    cfg = make_config(kind, d, a.layers or 2)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(a.seed)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    g = torch.Generator(device=dev).manual_seed(a.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norms
                p.copy_(1 + 0.2 * (torch.rand(p.shape, generator=g, device=dev) - 0.5))
            elif "embed" in name or "lm_head" in name:
                p.normal_(0, 1.0, generator=g)
            else:
                p.normal_(0, 1.0 / p.shape[1] ** 0.5, generator=g)
    model.to(torch.bfloat16).save_pretrained(a.out, safe_serialization=True)


def generate(a):
    from hf_compare import Control, hf_run, load_hf
    prompts = json.load(open(a.prompt_file))
    force = json.load(open(a.force_tokens)) if a.force_tokens else None
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_hf(a.model, dev)
    Control("bf16", model, True).__enter__()  # bf16 weights and activations, fp32 RoPE tables
    bug = os.environ.get("FAKE_MEGAOPS_BUG")
    if bug:
        ctl = Control(bug, model, False)
        ctl.__enter__()
    toks, logits = hf_run(model, prompts, a.max_new_tokens, force=force)
    if a.logits_out:
        np.ascontiguousarray(logits, dtype="<f4").tofile(a.logits_out)
    print(json.dumps({"tokens": toks.tolist(), "backend": "fake-" + dev, "prompt_len": len(prompts[0]),
                      "batch": len(prompts)}))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--preset", required=True)
    e.add_argument("--layers", type=int)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--out", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--model", required=True)
    g.add_argument("--prompt-file", required=True)
    g.add_argument("--max-new-tokens", type=int, required=True)
    g.add_argument("--ignore-eos", action="store_true")
    g.add_argument("--json", action="store_true")
    g.add_argument("--force-tokens")
    g.add_argument("--logits-out")
    g.add_argument("--no-overlap", action="store_true")
    a = ap.parse_args()
    export(a) if a.cmd == "export" else generate(a)


if __name__ == "__main__":
    main()
