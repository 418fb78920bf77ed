//! An f64 host reference of the whole model (Qwen3 / Llama-3), read from the same
//! [`WeightSource`], rounding to bf16 where the kernels store bf16 tensors, so the engine's
//! logits can be compared tightly on the CPU backend.

use half::bf16;
use megaops_kernels::rope::RopeTable;
use megaops_models::checkpoint::WeightSource;
use megaops_models::{Architecture, Config};

fn round(v: f64) -> f64 {
    bf16::from_f64(v).to_f64()
}

struct Linear {
    rows: usize,
    cols: usize,
    w: Vec<f64>,
}

impl Linear {
    fn get(src: &dyn WeightSource, name: &str, rows: usize, cols: usize) -> Linear {
        let w = src
            .get(name, &[rows, cols])
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .iter()
            .map(|v| v.to_f64())
            .collect();
        Linear { rows, cols, w }
    }

    fn apply(&self, x: &[f64]) -> Vec<f64> {
        (0..self.rows)
            .map(|r| {
                self.w[r * self.cols..(r + 1) * self.cols]
                    .iter()
                    .zip(x)
                    .map(|(w, x)| w * x)
                    .sum()
            })
            .collect()
    }
}

fn vector(src: &dyn WeightSource, name: &str, n: usize) -> Vec<f64> {
    src.get(name, &[n])
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .iter()
        .map(|v| v.to_f64())
        .collect()
}

/// `bf16(x · rstd(x) · w)`.
fn rmsnorm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let rstd = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| round(v * rstd * w)).collect()
}

struct Layer {
    input_norm: Vec<f64>,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<Vec<f64>>,
    k_norm: Option<Vec<f64>>,
    post_norm: Vec<f64>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// One layer's cached keys and values of one sequence, a row of `hkv · D` per position.
type LayerCache = (Vec<Vec<f64>>, Vec<Vec<f64>>);

/// The reference model and, per sequence, its KV cache.
pub struct Reference {
    c: Config,
    embed: Vec<f64>,
    layers: Vec<Layer>,
    norm: Vec<f64>,
    head: Linear,
    rope: RopeTable,
    /// `[seq][layer]`: the keys and values of every cached position.
    caches: Vec<Vec<LayerCache>>,
}

impl Reference {
    /// Reads every weight of `c` from `src`; `max_pos` positions of RoPE.
    pub fn new(c: &Config, src: &dyn WeightSource, max_pos: usize) -> Reference {
        let (h, i, d) = (c.hidden_size, c.intermediate_size, c.head_dim());
        let qwen3 = c.architecture().expect("arch") == Architecture::Qwen3;
        let layers = (0..c.num_hidden_layers)
            .map(|l| {
                let p = |n: &str| format!("model.layers.{l}.{n}");
                Layer {
                    input_norm: vector(src, &p("input_layernorm.weight"), h),
                    q: Linear::get(src, &p("self_attn.q_proj.weight"), c.q_dim(), h),
                    k: Linear::get(src, &p("self_attn.k_proj.weight"), c.kv_dim(), h),
                    v: Linear::get(src, &p("self_attn.v_proj.weight"), c.kv_dim(), h),
                    o: Linear::get(src, &p("self_attn.o_proj.weight"), h, c.q_dim()),
                    q_norm: qwen3.then(|| vector(src, &p("self_attn.q_norm.weight"), d)),
                    k_norm: qwen3.then(|| vector(src, &p("self_attn.k_norm.weight"), d)),
                    post_norm: vector(src, &p("post_attention_layernorm.weight"), h),
                    gate: Linear::get(src, &p("mlp.gate_proj.weight"), i, h),
                    up: Linear::get(src, &p("mlp.up_proj.weight"), i, h),
                    down: Linear::get(src, &p("mlp.down_proj.weight"), h, i),
                }
            })
            .collect();
        let embed_name = "model.embed_tokens.weight";
        let head_name = if c.tie_word_embeddings {
            embed_name
        } else {
            "lm_head.weight"
        };
        Reference {
            c: c.clone(),
            embed: Linear::get(src, embed_name, c.vocab_size, h).w,
            layers,
            norm: vector(src, "model.norm.weight", h),
            head: Linear::get(src, head_name, c.vocab_size, h),
            rope: RopeTable::new(d, max_pos, c.rope_base(), c.rope_scaling_kind().expect("rope")),
            caches: Vec::new(),
        }
    }

    /// `rotate_half` RoPE of one head at `pos`.
    fn rotate(&self, x: &[f64], pos: usize) -> Vec<f64> {
        let d = x.len();
        let half = d / 2;
        let row = &self.rope.values[pos * d..(pos + 1) * d];
        (0..d)
            .map(|j| {
                let (c, s) = (row[j % half] as f64, row[half + j % half] as f64);
                if j < half {
                    x[j] * c - x[j + half] * s
                } else {
                    x[j] * c + x[j - half] * s
                }
            })
            .collect()
    }

    /// Runs `ids` of every sequence (rows `[seq][token]`, appended after what each
    /// sequence's cache holds) and returns the f32 logits of each sequence's last token.
    /// `prefill` picks the MLP rounding of the GEMM path (gate and up stored as bf16)
    /// when the pass has more than 16 rows, as the engine does.
    pub fn step(&mut self, ids: &[Vec<u32>]) -> Vec<Vec<f64>> {
        let c = self.c.clone();
        let (h, d, hq, hkv) = (c.hidden_size, c.head_dim(), c.num_attention_heads, c.num_kv_heads());
        let eps = c.rms_norm_eps;
        let rows: usize = ids.iter().map(Vec::len).sum();
        let gemm = rows > 16;
        while self.caches.len() < ids.len() {
            self.caches.push(vec![(Vec::new(), Vec::new()); c.num_hidden_layers]);
        }
        let mut out = Vec::new();
        for (b, seq) in ids.iter().enumerate() {
            let mut last = Vec::new();
            for &id in seq {
                let mut x: Vec<f64> = self.embed[id as usize * h..(id as usize + 1) * h].to_vec();
                let mut res: Option<Vec<f64>> = None;
                for (l, layer) in self.layers.iter().enumerate() {
                    let sum: Vec<f64> = match &res {
                        None => x.clone(),
                        Some(r) => x.iter().zip(r).map(|(a, b)| round(a + b)).collect(),
                    };
                    let xn = rmsnorm(&sum, &layer.input_norm, eps);
                    let q: Vec<f64> = layer.q.apply(&xn).into_iter().map(round).collect();
                    let k: Vec<f64> = layer.k.apply(&xn).into_iter().map(round).collect();
                    let v: Vec<f64> = layer.v.apply(&xn).into_iter().map(round).collect();
                    let head = |t: &[f64], j: usize, norm: &Option<Vec<f64>>| -> Vec<f64> {
                        let x = &t[j * d..(j + 1) * d];
                        match norm {
                            Some(w) => {
                                let ms = x.iter().map(|v| v * v).sum::<f64>() / d as f64;
                                let r = 1.0 / (ms + eps).sqrt();
                                x.iter().zip(w).map(|(v, w)| v * r * w).collect()
                            }
                            None => x.to_vec(),
                        }
                    };
                    let pos = self.caches[b][l].0.len();
                    let mut krow = Vec::with_capacity(hkv * d);
                    for j in 0..hkv {
                        krow.extend(self.rotate(&head(&k, j, &layer.k_norm), pos));
                    }
                    let (ks, vs) = &mut self.caches[b][l];
                    ks.push(krow.into_iter().map(round).collect());
                    vs.push(v.clone());
                    let (ks, vs) = &self.caches[b][l];
                    let mut attn = Vec::with_capacity(hq * d);
                    for j in 0..hq {
                        let qj: Vec<f64> = self
                            .rotate(&head(&q, j, &layer.q_norm), pos)
                            .into_iter()
                            .map(round)
                            .collect();
                        let g = j / (hq / hkv);
                        let scores: Vec<f64> = ks
                            .iter()
                            .map(|kr| {
                                qj.iter().zip(&kr[g * d..(g + 1) * d]).map(|(a, b)| a * b).sum::<f64>()
                                    / (d as f64).sqrt()
                            })
                            .collect();
                        let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let e: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
                        let z: f64 = e.iter().sum();
                        for i in 0..d {
                            attn.push(round(
                                e.iter().zip(vs).map(|(p, vr)| p * vr[g * d + i]).sum::<f64>() / z,
                            ));
                        }
                    }
                    let o: Vec<f64> = layer.o.apply(&attn).into_iter().map(round).collect();
                    let res2: Vec<f64> = o.iter().zip(&sum).map(|(a, b)| round(a + b)).collect();
                    let xn2 = rmsnorm(&res2, &layer.post_norm, eps);
                    let gt = layer.gate.apply(&xn2);
                    let ut = layer.up.apply(&xn2);
                    let act: Vec<f64> = gt
                        .iter()
                        .zip(&ut)
                        .map(|(&g, &u)| {
                            let (g, u) = if gemm { (round(g), round(u)) } else { (g, u) };
                            round(g / (1.0 + (-g).exp()) * u)
                        })
                        .collect();
                    x = layer.down.apply(&act).into_iter().map(round).collect();
                    res = Some(res2);
                }
                let r = res.expect("at least one layer");
                let sum: Vec<f64> = x.iter().zip(&r).map(|(a, b)| round(a + b)).collect();
                last = rmsnorm(&sum, &self.norm, eps);
            }
            out.push(self.head.apply(&last));
        }
        out
    }
}
