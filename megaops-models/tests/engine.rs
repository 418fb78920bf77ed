//! The engine on the CPU backend: whole generations of the `tiny` (Qwen3-like) and
//! `tiny-llama` (llama3 RoPE scaling, GQA group 3, untied head) presets against an f64
//! host reference, the decode (GEMV) and prefill (GEMM) paths, overlapped and serial,
//! graph and eager, and the requests that must fail before any device work.

mod common;

use common::reference::Reference;
use megaops::testing::{cpu_device, fresh_seed};
use megaops::{AsyncStream, Device};
use megaops_models::layers::{GemmBackend, Picked, PrefillGemm};
use megaops_models::presets::{self, RandomWeights};
use megaops_models::tune::{GemvPlacement, Release, Site, SiteChoice, StepPlan};
use megaops_models::{CausalLm, Config, GenerateOptions, ModelError, Session, generate};

fn load(dev: &Device, name: &str, seed: u64) -> (Config, RandomWeights, CausalLm) {
    let config = presets::preset(name).expect("preset");
    let weights = RandomWeights::new(config.clone(), seed);
    let lm = CausalLm::load(dev, &config, &weights, &mut |_, _| {}).expect("load");
    (config, weights, lm)
}

fn argmax(row: &[f64]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Generates `new` tokens greedily with the reference; returns the tokens and logits of
/// each step.
fn reference_generation(r: &mut Reference, prompts: &[Vec<u32>], new: usize) -> (Vec<Vec<u32>>, Vec<Vec<Vec<f64>>>) {
    let mut tokens = vec![Vec::new(); prompts.len()];
    let mut logits = Vec::new();
    let mut feed: Vec<Vec<u32>> = prompts.to_vec();
    for _ in 0..new {
        let step = r.step(&feed);
        for (b, row) in step.iter().enumerate() {
            tokens[b].push(argmax(row));
        }
        feed = tokens.iter().map(|t| vec![*t.last().expect("a token")]).collect();
        logits.push(step);
    }
    (tokens, logits)
}

/// Runs the engine teacher-forced on the reference's tokens and compares every step's
/// logits (max |Δ| relative to the row's spread) and the greedy tokens where the
/// reference's top-2 margin is clear.
fn check_against_reference(name: &str, prompts: Vec<Vec<u32>>, new: usize, on: impl Fn(&Device) -> AsyncStream) {
    check_plan_against_reference(name, prompts, new, on, StepPlan::default());
}

/// [`check_against_reference`] with the decode steps launched under `plan`.
fn check_plan_against_reference(
    name: &str,
    prompts: Vec<Vec<u32>>,
    new: usize,
    on: impl Fn(&Device) -> AsyncStream,
    plan: StepPlan,
) {
    check_plans_against_reference(name, prompts, new, on, StepPlan::default(), plan, GemmBackend::Rust);
}

/// [`check_against_reference`] with the prefill launched under `prefill_plan` and the
/// decode steps under `plan`.
fn check_plans_against_reference(
    name: &str,
    prompts: Vec<Vec<u32>>,
    new: usize,
    on: impl Fn(&Device) -> AsyncStream,
    prefill_plan: StepPlan,
    plan: StepPlan,
    prefill_gemm: GemmBackend,
) {
    let seed = fresh_seed(name);
    let dev = cpu_device(seed).expect("cpu device");
    let (config, weights, lm) = load(&dev, name, seed);
    let mut r = Reference::new(&config, &weights, prompts[0].len() + new);
    let (want_tokens, want_logits) = reference_generation(&mut r, &prompts, new);
    let opts = GenerateOptions {
        max_new_tokens: new,
        ignore_eos: true,
        graph: true,
        force_tokens: Some(want_tokens.iter().map(|t| t[..new - 1].to_vec()).collect()),
        keep_logits: true,
        trace: false,
        plan,
        prefill_plan,
        prefill_gemm,
    };
    let s = on(&dev);
    let out = generate(&lm, &s, &prompts, &opts, &mut |_, _| {}).expect("generate");
    assert_eq!(out.logits.len(), new, "{name}: logits of every step");
    let v = config.vocab_size;
    for (t, (got, want)) in out.logits.iter().zip(&want_logits).enumerate() {
        for (b, want) in want.iter().enumerate() {
            let got = &got[b * v..(b + 1) * v];
            let mean = want.iter().sum::<f64>() / v as f64;
            let std = (want.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v as f64).sqrt();
            let err = got
                .iter()
                .zip(want)
                .map(|(g, w)| (*g as f64 - w).abs())
                .fold(0.0, f64::max);
            // The reference rounds to bf16 where the kernels store bf16, but it accumulates
            // in f64 and the kernels in f32: single roundings land on the other side, one
            // bf16 ulp (2^-8 relative), and propagate through the layers; the prefill
            // attention kernel also rounds its softmax weights to bf16 for the P·V
            // tensor-core product (as flash attention does). Over 24 seeds the largest
            // error was 0.040 of the spread (medians 0.013–0.028 by preset and step). The
            // 140-row prefills go further: over 76 seeds the largest error of a generation
            // had a median of 0.031 and a maximum of 0.044, and one seed reached 0.054
            // (`MEGAOPS_SEED=1796600365009124289`, cuBLASLt projections; the cuBLASLt and
            // Rust GEMMs give the same spread of errors). A wrong tile, a stale input or
            // a missing term moves the logits by a large part of the spread.
            let tol = 0.08;
            assert!(
                err <= tol * std + 1e-3,
                "{name}: step {t} sequence {b}: max |Δlogit| {err:.4} against a spread of {std:.4}"
            );
            let mut sorted = want.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            if sorted[0] - sorted[1] > 0.1 * std {
                assert_eq!(
                    out.tokens[b][t],
                    want_tokens[b][t],
                    "{name}: step {t} sequence {b}: token (margin {:.3})",
                    sorted[0] - sorted[1]
                );
            }
        }
    }
}

#[test]
fn tiny_qwen3_decode_path_matches_the_reference() {
    check_against_reference("tiny", vec![vec![1, 2, 3], vec![500, 17, 42]], 5, |d| {
        AsyncStream::new(d, 2).expect("stream")
    });
}

/// A plan that moves every kind of knob away from the planners' choices: other GEMV
/// configs (one without prefetch), split-K, split-KV, occupancy limits, release points
/// and data tiles (narrower than a head, ragged, wider than a row). The decode steps still
/// match the reference.
#[test]
fn a_tuned_plan_changes_the_launches_not_the_results() {
    use megaops_kernels::gemv::{gate_up_silu, gemv, lm_head};
    let mut plan = StepPlan::default();
    let pf0 = gemv::CONSTS
        .iter()
        .position(|c| c.PF == 0)
        .expect("a config without prefetch");
    *plan.site_mut(Site::Qkv) = SiteChoice {
        config: Some(pf0),
        splits: Some(1),
        occupancy_limit: Some(1),
        release: Some(Release::LastCta),
        // Narrower than a head: RoPE waits for two tiles per head.
        data_tile: Some(32),
        chunks: None,
        placement: None,
    };
    *plan.site_mut(Site::Down) = SiteChoice {
        // One warp along k, so that k = 256 splits in two.
        config: Some(
            gemv::CONSTS
                .iter()
                .position(|c| c.BN == 64 && c.WK == 1 && c.MIN_CTAS == 0)
                .expect("a config with one warp along k"),
        ),
        splits: Some(2),
        ..SiteChoice::default()
    };
    *plan.site_mut(Site::GateUp) = SiteChoice {
        config: Some(
            gate_up_silu::CONSTS
                .iter()
                .position(|c| c.WK == 1)
                .expect("a gate/up config with one warp along k"),
        ),
        splits: Some(2),
        release: Some(Release::LastCta),
        data_tile: Some(64),
        ..SiteChoice::default()
    };
    *plan.site_mut(Site::Attention) = SiteChoice {
        splits: Some(3),
        occupancy_limit: Some(2),
        ..SiteChoice::default()
    };
    *plan.site_mut(Site::Norm) = SiteChoice {
        release: Some(Release::LastCta),
        ..SiteChoice::default()
    };
    *plan.site_mut(Site::LmHead) = SiteChoice {
        config: Some(lm_head::CONFIGS.len() - 1),
        // 517 logits: the last tile is ragged.
        data_tile: Some(256),
        ..SiteChoice::default()
    };
    // Wider than the whole row: one tile per row; planned as if alone (bounded configs).
    plan.site_mut(Site::OProj).data_tile = Some(512);
    plan.site_mut(Site::OProj).placement = Some(GemvPlacement::Alone);
    check_plan_against_reference(
        "tiny",
        vec![vec![1, 2, 3], vec![500, 17, 42]],
        5,
        |d| AsyncStream::new(d, 3).expect("stream"),
        plan,
    );
}

/// A plan naming a config or split a kernel does not have is an error before the step
/// runs, never a wrong result.
#[test]
fn a_plan_the_kernels_cannot_run_is_an_error() {
    let seed = fresh_seed("a_plan_the_kernels_cannot_run_is_an_error");
    let dev = cpu_device(seed).expect("cpu device");
    let (_, _, lm) = load(&dev, "tiny", seed);
    let prompts = vec![vec![1, 2, 3]];
    let run = |plan: StepPlan| {
        let opts = GenerateOptions {
            max_new_tokens: 3,
            ignore_eos: true,
            plan,
            ..GenerateOptions::default()
        };
        let s = AsyncStream::new(&dev, 2).expect("stream");
        generate(&lm, &s, &prompts, &opts, &mut |_, _| {})
    };
    for (site, choice, needle) in [
        (
            Site::Down,
            SiteChoice {
                config: Some(999),
                ..SiteChoice::default()
            },
            "config 999 does not exist",
        ),
        (
            Site::OProj,
            SiteChoice {
                splits: Some(1000),
                ..SiteChoice::default()
            },
            "GEMV split 1000",
        ),
        (
            Site::Attention,
            SiteChoice {
                splits: Some(0),
                ..SiteChoice::default()
            },
            "decode attention split 0",
        ),
        (
            Site::GateUp,
            SiteChoice {
                data_tile: Some(96),
                ..SiteChoice::default()
            },
            "decode data tile of the act tensor: 96 columns",
        ),
    ] {
        let mut plan = StepPlan::default();
        *plan.site_mut(site) = choice;
        let e = run(plan).expect_err("a bad plan");
        assert!(e.to_string().contains(needle), "`{e}` should mention `{needle}`");
    }
}

#[test]
fn tiny_llama_prefill_gemm_path_matches_the_reference() {
    // 2 × 12 prompt rows take the GEMM path of the prefill; llama3 RoPE, group 3, untied.
    let prompts = vec![
        (0..12).map(|i| (i * 37 + 5) % 331).collect(),
        (0..12).map(|i| (i * 11 + 300) % 331).collect(),
    ];
    check_against_reference("tiny-llama", prompts, 3, |d| AsyncStream::new(d, 3).expect("stream"));
}

/// A prefill plan with other `matmul` configs for every projection (the largest tile and
/// the smallest), occupancy limits and release points: the prefill's logits still match.
#[test]
fn a_tuned_prefill_plan_changes_the_launches_not_the_results() {
    use megaops_kernels::gemm::matmul;
    let config_of = |bm: u32, bn: u32| {
        matmul::CONSTS
            .iter()
            .position(|c| c.BM == bm && c.BN == bn)
            .unwrap_or_else(|| panic!("a {bm}×{bn} matmul config"))
    };
    let mut prefill = StepPlan::default();
    for (site, config) in [
        (Site::Qkv, config_of(64, 64)),
        (Site::OProj, config_of(128, 128)),
        (Site::GateUp, config_of(64, 128)),
        (Site::Down, config_of(64, 64)),
    ] {
        *prefill.site_mut(site) = SiteChoice {
            config: Some(config),
            occupancy_limit: Some(1),
            release: Some(Release::FirstCta),
            ..SiteChoice::default()
        };
    }
    for site in [Site::Norm, Site::Rope, Site::Attention] {
        *prefill.site_mut(site) = SiteChoice {
            occupancy_limit: Some(2),
            release: Some(Release::FirstCta),
            ..SiteChoice::default()
        };
    }
    let prompts = vec![
        (0..12).map(|i| (i * 37 + 5) % 331).collect(),
        (0..12).map(|i| (i * 11 + 300) % 331).collect(),
    ];
    check_plans_against_reference(
        "tiny-llama",
        prompts,
        3,
        |d| AsyncStream::new(d, 2).expect("stream"),
        prefill,
        StepPlan::default(),
        GemmBackend::Rust,
    );
}

/// Two 70-token prompts: a prefill of 140 rows, past the decode path's 16.
fn prefill_prompts() -> Vec<Vec<u32>> {
    vec![
        (0..70).map(|i| (i * 37 + 5) % 331).collect(),
        (0..70).map(|i| (i * 11 + 300) % 331).collect(),
    ]
}

/// Generates two tokens of tiny-llama after `prompts` with the prefill's projections on
/// `gemm`, on `streams` streams (1: serial), against the reference; with `on_lane`,
/// one-chunk subkernels run on their launch's own stream (`Device::set_one_chunk_on_lane`).
fn check_prefill_gemm_against_reference(prompts: &[Vec<u32>], streams: usize, gemm: GemmBackend, on_lane: bool) {
    check_plans_against_reference(
        "tiny-llama",
        prompts.to_vec(),
        2,
        |d| {
            d.set_one_chunk_on_lane(on_lane);
            if streams == 1 {
                AsyncStream::serial(d).expect("stream")
            } else {
                AsyncStream::new(d, streams).expect("stream")
            }
        },
        StepPlan::default(),
        StepPlan::default(),
        gemm,
    );
}

/// The prefill's projections as cuBLASLt subkernels (on the CPU backend: the proxy, the
/// side streams and the CPU implementation of the GEMM) generate what the reference does,
/// with chunk counts that do and do not divide the rows, overlapped and serial, and with
/// one chunk on the launch's own stream.
#[test]
fn a_cublaslt_prefill_generates_what_the_reference_does() {
    for (chunks, streams, on_lane) in [(1, 2, false), (3, 2, false), (2, 1, false), (1, 2, true), (1, 1, true)] {
        let gemm = GemmBackend::CublasLt { chunks };
        check_prefill_gemm_against_reference(&prefill_prompts(), streams, gemm, on_lane);
    }
}

/// `auto` prefill GEMMs pick a backend per projection by its size: at a threshold between
/// them, tiny-llama's QKV and gate/up GEMMs run as cuBLASLt subkernels and its O and down
/// GEMMs on `matmul` (two `matmul` launches a layer in the prefill's trace, against four
/// with the Rust GEMMs), and the generation matches the reference, overlapped and serial.
#[test]
fn an_auto_prefill_mixes_the_backends_and_generates_what_the_reference_does() {
    let config = presets::preset("tiny-llama").expect("preset");
    let prompts = prefill_prompts();
    let m = (prompts.len() * prompts[0].len()) as u32;
    let h = config.hidden_size as u32;
    let head_dim = config
        .head_dim
        .unwrap_or(config.hidden_size / config.num_attention_heads) as u32;
    let q = config.num_attention_heads as u32 * head_dim;
    let kv = config.num_key_value_heads.unwrap_or(config.num_attention_heads) as u32 * head_dim;
    let inter = config.intermediate_size as u32;
    let flops = |n: u32, k: u32| 2 * m as u64 * n as u64 * k as u64;
    let (qkv, o, gate_up, down) = (flops(q + 2 * kv, h), flops(h, q), flops(2 * inter, h), flops(h, inter));
    let min_flops = qkv.min(gate_up);
    assert!(o.max(down) < min_flops, "the threshold separates the projections");
    let auto = GemmBackend::Auto { min_flops };
    let picked = |n: u32, k: u32| auto.pick(m, n, k);
    assert_eq!(picked(q + 2 * kv, h), Picked::CublasLt { chunks: 1 });
    assert_eq!(picked(2 * inter, h), Picked::CublasLt { chunks: 1 });
    assert_eq!(picked(h, q), Picked::Rust);
    assert_eq!(picked(h, inter), Picked::Rust);
    for (streams, on_lane) in [(2, false), (1, false), (2, true)] {
        check_prefill_gemm_against_reference(&prompts, streams, auto, on_lane);
    }
    let seed = fresh_seed("an_auto_prefill_mixes_the_backends");
    let dev = cpu_device(seed).expect("cpu device");
    let (_, _, lm) = load(&dev, "tiny-llama", seed);
    let matmuls = |gemm: GemmBackend| {
        let opts = GenerateOptions {
            max_new_tokens: 1,
            ignore_eos: true,
            trace: true,
            prefill_gemm: gemm,
            ..GenerateOptions::default()
        };
        let s = AsyncStream::new(&dev, 2).expect("stream");
        let out = generate(&lm, &s, &prompts, &opts, &mut |_, _| {}).expect("generate");
        let prefill = out.traces.expect("traces").prefill;
        prefill.launches.iter().filter(|l| l.kernel == "matmul").count()
    };
    let layers = config.num_hidden_layers;
    assert_eq!(matmuls(GemmBackend::Rust), 4 * layers, "qkv, o, gate/up and down");
    assert_eq!(matmuls(auto), 2 * layers, "o and down");
}

/// A captured prefill replays what the eager one computes, bit for bit: the first tokens,
/// their logits and the keys and values the decode steps read next (generated tokens and
/// logits after the prefill), with the Rust GEMMs and with cuBLASLt subkernels.
#[test]
fn a_captured_prefill_replays_the_eager_one() {
    let seed = fresh_seed("a_captured_prefill_replays_the_eager_one");
    let dev = cpu_device(seed).expect("cpu device");
    let (_, _, lm) = load(&dev, "tiny-llama", seed);
    let prompts: Vec<Vec<u32>> = vec![
        (0..21).map(|i| (i * 37 + 5) % 331).collect(),
        (0..21).map(|i| (i * 11 + 300) % 331).collect(),
    ];
    for gemm in [GemmBackend::Rust, GemmBackend::CublasLt { chunks: 3 }] {
        let on = AsyncStream::new(&dev, 2).expect("stream");
        // (first ids, prefill logits, the next two steps' logits).
        let run = |graph: bool| {
            let mut session = Session::new(&lm, prompts.len(), 21, 3).expect("session");
            let mut prefill = session.prefill_inputs(&prompts).expect("prefill inputs");
            prefill.set_gemm(&PrefillGemm::new(&dev, gemm).expect("gemm"));
            if graph {
                let g = session.capture_prefill(&on, &mut prefill).expect("capture");
                // Two replays back to back, and the graph dropped while they are queued.
                g.launch(&on).expect("replay");
                g.launch(&on).expect("replay");
            } else {
                session.prefill(&on, &mut prefill).expect("prefill");
            }
            on.synchronize().expect("sync");
            let first = prefill.pass().next_ids().tensor().to_vec().expect("ids");
            let logits = prefill.pass().logits().tensor().to_vec().expect("logits");
            drop(prefill);
            let mut decoder = session.decoder(&first).expect("decoder");
            let mut steps = Vec::new();
            for _ in 0..decoder.max_steps() {
                decoder.step(&on).expect("step");
                on.synchronize().expect("sync");
                steps.push(decoder.pass().logits().tensor().to_vec().expect("logits"));
            }
            (first, logits, steps)
        };
        let eager = run(false);
        let replayed = run(true);
        assert_eq!(eager.0, replayed.0, "{gemm:?}: first tokens");
        assert_eq!(eager.1, replayed.1, "{gemm:?}: prefill logits");
        assert_eq!(eager.2.len(), 2);
        assert_eq!(eager.2, replayed.2, "{gemm:?}: decode steps after the prefill");
    }
}

#[test]
fn tiny_single_token_prompt_without_overlap() {
    check_against_reference("tiny", vec![vec![7]], 4, |d| AsyncStream::serial(d).expect("stream"));
}

#[test]
fn overlapped_serial_graph_and_eager_generations_agree() {
    let seed = fresh_seed("overlapped_serial_graph_and_eager_generations_agree");
    let dev = cpu_device(seed).expect("cpu device");
    let (_, _, lm) = load(&dev, "tiny", seed);
    let prompts = vec![vec![3, 1, 4, 1, 5], vec![9, 2, 6, 5, 3], vec![5, 8, 9, 7, 9]];
    let run = |s: AsyncStream, graph: bool| {
        let opts = GenerateOptions {
            max_new_tokens: 6,
            ignore_eos: true,
            graph,
            force_tokens: None,
            keep_logits: true,
            trace: false,
            plan: Default::default(),
            prefill_plan: Default::default(),
            prefill_gemm: GemmBackend::Rust,
        };
        generate(&lm, &s, &prompts, &opts, &mut |_, _| {}).expect("generate")
    };
    let a = run(AsyncStream::new(&dev, 2).expect("stream"), true);
    let b = run(AsyncStream::serial(&dev).expect("stream"), true);
    let c = run(AsyncStream::new(&dev, 3).expect("stream"), false);
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.tokens, c.tokens);
    assert_eq!(
        a.logits, b.logits,
        "the same kernels give the same bits with and without overlap"
    );
    assert_eq!(a.logits, c.logits, "graph replays give the eager step's bits");
    assert_eq!(a.decode_steps, 5);
}

/// Generates three tokens for two fixed prompts under `plan` (traced, on two streams) and
/// counts each of `kernels` among the decode step's launches: (tokens, logits, counts).
fn decode_launch_counts(
    dev: &Device,
    lm: &CausalLm,
    plan: StepPlan,
    kernels: &[&str],
) -> (Vec<Vec<u32>>, Vec<Vec<f32>>, Vec<usize>) {
    let prompts = vec![vec![3, 1, 4], vec![2, 7, 1]];
    let opts = GenerateOptions {
        max_new_tokens: 3,
        ignore_eos: true,
        trace: true,
        plan,
        ..GenerateOptions::default()
    };
    let s = AsyncStream::new(dev, 2).expect("stream");
    let out = generate(lm, &s, &prompts, &opts, &mut |_, _| {}).expect("generate");
    let decode = out.traces.and_then(|t| t.decode).expect("a decode trace");
    let counts = kernels
        .iter()
        .map(|k| decode.launches.iter().filter(|l| l.kernel == *k).count())
        .collect();
    (out.tokens, out.logits, counts)
}

/// With the norms behind the projections off (they take precedence) and norm fusion on
/// (`StepPlan::fuse_norms`) the decode step runs each layer's add + RMSNorms inside the
/// QKV and gate/up GEMVs (layer 0's attention norm, which adds no residual, and the final
/// norm stay kernels); without norm fusion it runs them as `add_rmsnorm`; both
/// generations match the reference.
#[test]
fn decode_fuses_the_add_norms_into_the_projections() {
    let seed = fresh_seed("decode_fuses_the_add_norms_into_the_projections");
    let dev = cpu_device(seed).expect("cpu device");
    let (config, _, lm) = load(&dev, "tiny", seed);
    let layers = config.num_hidden_layers;
    let kernels = ["rmsnorm", "add_rmsnorm", "add_rmsnorm_gemv", "add_rmsnorm_gate_up_silu"];
    let launches = |fuse: Option<bool>| {
        let plan = StepPlan {
            fuse_norms: fuse,
            norm_after: Some(false),
            ..StepPlan::default()
        };
        let (tokens, _, counts) = decode_launch_counts(&dev, &lm, plan, &kernels);
        (tokens, counts)
    };
    let (fused_tokens, fused) = launches(Some(true));
    assert_eq!(
        fused,
        [1, 1, layers - 1, layers],
        "rmsnorm, add_rmsnorm, fused QKV, fused gate/up"
    );
    let (plain_tokens, plain) = launches(None);
    assert_eq!(launches(Some(false)).1, plain);
    assert_eq!(plain, [1, 2 * layers, 0, 0], "the fusion off (its default)");
    assert_eq!(fused_tokens, plain_tokens);
    for fuse in [Some(true), None] {
        check_plan_against_reference(
            "tiny",
            vec![vec![5, 9, 2], vec![8, 8, 1]],
            4,
            |d| AsyncStream::new(d, 3).expect("stream"),
            StepPlan {
                fuse_norms: fuse,
                norm_after: Some(false),
                ..StepPlan::default()
            },
        );
    }
}

/// With the norms behind the projections (`StepPlan::norm_after`, on by default) the decode step runs
/// each layer's MLP norm inside its output projection and the next layer's (or the final)
/// norm inside its down projection (`gemv_add_rmsnorm`): only layer 0's attention norm
/// stays a kernel, `2·layers` kernels fewer a step. Tokens match the norms as kernels,
/// logits within the f32 sum-order difference, and both match the reference, for Qwen3
/// and Llama-3, with norm fusion on too (which the norms behind take precedence over).
#[test]
fn decode_runs_the_norms_behind_the_projections() {
    for name in ["tiny", "tiny-llama"] {
        let seed = fresh_seed("decode_runs_the_norms_behind_the_projections");
        let dev = cpu_device(seed).expect("cpu device");
        let (config, _, lm) = load(&dev, name, seed);
        let layers = config.num_hidden_layers;
        let kernels = ["rmsnorm", "add_rmsnorm", "gemv", "gemv_add_rmsnorm", "add_rmsnorm_gemv"];
        let launches = |after: Option<bool>, fuse_norms: Option<bool>| {
            let plan = StepPlan {
                norm_after: after,
                fuse_norms,
                ..StepPlan::default()
            };
            decode_launch_counts(&dev, &lm, plan, &kernels)
        };
        let (after_tokens, after_logits, after) = launches(Some(true), None);
        assert_eq!(
            after,
            [1, 0, layers, 2 * layers, 0],
            "{name}: QKV alone is a plain gemv"
        );
        assert_eq!(
            launches(Some(true), Some(true)).2,
            after,
            "{name}: with norm fusion asked for"
        );
        assert_eq!(launches(None, None).2, after, "{name}: by default");
        let (plain_tokens, plain_logits, plain) = launches(Some(false), None);
        assert_eq!(plain, [1, 2 * layers, 3 * layers, 0, 0], "{name}: the norms as kernels");
        assert_eq!(after_tokens, plain_tokens, "{name}");
        for (a, p) in after_logits.iter().flatten().zip(plain_logits.iter().flatten()) {
            assert!(
                (a - p).abs() <= 0.05 * (1.0 + p.abs()),
                "{name}: logits {a} against {p}"
            );
        }
        check_plan_against_reference(
            name,
            vec![vec![5, 9, 2], vec![8, 8, 1]],
            4,
            |d| AsyncStream::new(d, 3).expect("stream"),
            StepPlan {
                norm_after: Some(true),
                ..StepPlan::default()
            },
        );
    }
}

/// By default (`StepPlan::fuse_rope` unset) the decode step runs each layer's QK-norm,
/// RoPE and cache write inside decode attention (`decode_attention_rope`), with the
/// fusion off as `qk_norm_rope` then `decode_attention`: the same tokens and logits bit
/// for bit, for Qwen3 (QK-norm) and Llama-3, and both match the reference.
#[test]
fn decode_fuses_the_rope_into_attention() {
    for name in ["tiny", "tiny-llama"] {
        let seed = fresh_seed("decode_fuses_the_rope_into_attention");
        let dev = cpu_device(seed).expect("cpu device");
        let (config, _, lm) = load(&dev, name, seed);
        let layers = config.num_hidden_layers;
        let kernels = ["qk_norm_rope", "decode_attention", "decode_attention_rope"];
        let launches = |fuse: Option<bool>| {
            let plan = StepPlan {
                fuse_rope: fuse,
                ..StepPlan::default()
            };
            decode_launch_counts(&dev, &lm, plan, &kernels)
        };
        let (fused_tokens, fused_logits, fused) = launches(None);
        assert_eq!(fused, [0, 0, layers], "{name}: the fusion on (the default)");
        assert_eq!(launches(Some(true)).2, fused);
        let (plain_tokens, plain_logits, plain) = launches(Some(false));
        assert_eq!(plain, [layers, layers, 0], "{name}: the fusion off");
        assert_eq!(fused_tokens, plain_tokens, "{name}");
        assert_eq!(fused_logits, plain_logits, "{name}: the same bits either way");
        for fuse in [None, Some(false)] {
            check_plan_against_reference(
                name,
                vec![vec![5, 9, 2], vec![8, 8, 1]],
                4,
                |d| AsyncStream::new(d, 3).expect("stream"),
                StepPlan {
                    fuse_rope: fuse,
                    ..StepPlan::default()
                },
            );
        }
    }
}

#[test]
fn bad_requests_fail_before_any_device_work() {
    let config = presets::preset("tiny").expect("preset");
    let opts = GenerateOptions {
        max_new_tokens: 4,
        ..GenerateOptions::default()
    };
    let check =
        |prompts: Vec<Vec<u32>>, opts: &GenerateOptions, needle: &str| match megaops_models::generate::check_request(
            &config, &prompts, opts,
        ) {
            Err(ModelError::Request(m)) => assert!(m.contains(needle), "`{m}` should mention `{needle}`"),
            other => panic!("expected a request error mentioning `{needle}`, got {other:?}"),
        };
    check(vec![], &opts, "no prompt");
    check(vec![vec![1]; 17], &opts, "batch 17");
    check(vec![vec![1, 2], vec![1]], &opts, "equal lengths");
    check(vec![vec![]], &opts, "empty prompt");
    check(vec![vec![517]], &opts, "outside the vocabulary");
    check(vec![vec![1; 510]], &opts, "longer than the model's context");
    let zero = GenerateOptions {
        max_new_tokens: 0,
        ..GenerateOptions::default()
    };
    check(vec![vec![1]], &zero, "at least 1");
    let forced = GenerateOptions {
        force_tokens: Some(vec![vec![1, 2]]),
        ..opts.clone()
    };
    check(vec![vec![1]], &forced, "forced tokens");
}

/// The first layer of a two-layer model, cut from it, generates what a one-layer model
/// loaded from the same weights does, bit for bit.
#[test]
fn the_first_layers_of_a_model_are_a_model() {
    let seed = fresh_seed("the_first_layers_of_a_model_are_a_model");
    let dev = cpu_device(seed).expect("cpu device");
    let (config, weights, lm) = load(&dev, "tiny", seed);
    assert!(lm.first_layers(0).is_err() && lm.first_layers(3).is_err());
    let cut = lm.first_layers(1).expect("first layer");
    assert_eq!(cut.config().num_hidden_layers, 1);
    assert_eq!(lm.config().num_hidden_layers, 2, "the model itself keeps its layers");
    let one = presets::with_layers(config, 1).expect("config");
    let loaded = CausalLm::load(&dev, &one, &weights, &mut |_, _| {}).expect("load");
    let prompts = vec![vec![3, 1, 4, 1, 5]];
    let opts = GenerateOptions {
        max_new_tokens: 4,
        ignore_eos: true,
        keep_logits: true,
        ..GenerateOptions::default()
    };
    let run = |m: &CausalLm| {
        let s = AsyncStream::new(&dev, 2).expect("stream");
        generate(m, &s, &prompts, &opts, &mut |_, _| {}).expect("generate")
    };
    let (a, b) = (run(&cut), run(&loaded));
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.logits, b.logits);
}
