//! The tuner on a model, on the CPU backend: the knob space of a decode step starts from
//! the planners' choices, every plan it can name runs, a short tuning returns a plan no
//! slower than its start, and a held family stays out of the search; the same for the
//! prefill's space.

use megaops::testing::{cpu_device, fresh_seed};
use megaops_models::CausalLm;
use megaops_models::layers::{GemmBackend, PrefillGemm};
use megaops_models::presets::{self, RandomWeights};
use megaops_models::tune::{Family, PlanTimer as _, PrefillTimer, SearchOptions, Space, StepPlan, StepTimer, tune};
use std::time::Duration;

fn tiny(seed: u64) -> CausalLm {
    let dev = cpu_device(seed).expect("cpu device");
    let config = presets::preset("tiny").expect("preset");
    let weights = RandomWeights::new(config.clone(), seed);
    CausalLm::load(&dev, &config, &weights, &mut |_, _| {}).expect("load")
}

#[test]
fn the_space_starts_at_the_planners_choices_and_every_family_is_there() {
    let lm = tiny(fresh_seed("the_space_starts_at_the_planners_choices"));
    let sms = lm.lm_head().device().sm_count();
    let space = Space::decode(&lm, 2, 64, sms, 2, &[]).expect("space");
    for f in Family::ALL {
        // Chunk counts belong to the prefill's cuBLASLt subkernels; norm fusion is a knob
        // of the decode step.
        let here = space.knobs.iter().any(|k| k.family == f);
        assert_eq!(here, f != Family::Chunks, "{f:?} knob");
    }
    // The start plan is explicit, and it is what the planners pick: it launches the same
    // configs as the default plan (checked by running both below).
    let start = space.plan(&space.start()).expect("start plan");
    assert!(!start.is_default());
    assert_eq!(start.streams, Some(2));
    let held = Space::decode(&lm, 2, 64, sms, 2, &[Family::TileConfig, Family::Streams]).expect("space");
    assert!(
        held.knobs
            .iter()
            .all(|k| k.family != Family::TileConfig && k.family != Family::Streams)
    );
    assert!(held.knobs.len() < space.knobs.len());
}

#[test]
fn every_candidate_plan_runs_or_is_refused_and_the_start_runs() {
    let lm = tiny(fresh_seed("every_candidate_plan_runs_or_is_refused"));
    let sms = lm.lm_head().device().sm_count();
    let space = Space::decode(&lm, 1, 64, sms, 2, &[]).expect("space");
    let mut timer = StepTimer::new(&lm, 1, 16, 2, 1, 2).expect("timer");
    assert!(timer.time(&StepPlan::default()).expect("default plan") > 0.0);
    assert!(
        timer
            .time(&space.plan(&space.start()).expect("start"))
            .expect("start plan")
            > 0.0
    );
    // One knob at a time away from the start: each plan either runs or is refused with an
    // error (a split the shape does not take), never a hang or a panic.
    let mut ran = 0;
    for (i, k) in space.knobs.iter().enumerate() {
        for &v in &k.candidates {
            let mut a = space.start();
            a[i] = v;
            if let Some(plan) = space.plan(&a)
                && timer.time(&plan).is_ok()
            {
                ran += 1;
            }
        }
    }
    assert!(ran > space.knobs.len(), "{ran} plans ran");
}

#[test]
fn a_short_tuning_is_never_slower_than_its_start_and_respects_its_budget() {
    let lm = tiny(fresh_seed("a_short_tuning_is_never_slower"));
    let sms = lm.lm_head().device().sm_count();
    let space = Space::decode(&lm, 2, 64, sms, 2, &[Family::Streams]).expect("space");
    let mut timer = StepTimer::new(&lm, 2, 16, 2, 1, 3).expect("timer");
    let opts = SearchOptions {
        budget: Duration::from_secs(3),
        noise: 0.05,
        max_rounds: 2,
        confirm: 2,
        joint: true,
    };
    let t0 = std::time::Instant::now();
    let mut events = 0;
    let tuned = tune(&mut timer, &space, &opts, &mut |_| events += 1).expect("tune");
    // The budget stops new evaluations; one evaluation and the confirmation may follow.
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    assert!(events > 0);
    assert!(tuned.outcome.best_cost <= tuned.outcome.start_cost);
    assert!(tuned.plan.streams.is_none(), "streams were held");
    // The tuned plan generates.
    assert!(timer.time(&tuned.plan).expect("tuned plan runs") > 0.0);
}

#[test]
fn the_prefill_space_tunes_the_gemm_configs_and_its_plans_run() {
    let lm = tiny(fresh_seed("the_prefill_space_tunes_the_gemm_configs"));
    let sms = lm.lm_head().device().sm_count();
    let (batch, seq) = (2, 12);
    assert!(
        Space::prefill(&lm, 1, 8, sms, &[]).is_err(),
        "8 rows take the decode path"
    );
    let space = Space::prefill(&lm, batch, seq, sms, &[]).expect("space");
    for f in [Family::TileConfig, Family::Padding, Family::Release] {
        assert!(space.knobs.iter().any(|k| k.family == f), "no {f:?} knob");
    }
    assert!(
        space.knobs.iter().all(|k| !matches!(
            k.family,
            Family::Streams | Family::Prefetch | Family::Split | Family::DataTile
        )),
        "a prefill has no stream, prefetch, split or data-tile knob"
    );
    let start = space.plan(&space.start()).expect("start plan");
    assert!(start.streams.is_none());
    let mut timer = PrefillTimer::new(&lm, batch, seq, 2, 1, 2).expect("timer");
    assert!(timer.time(&StepPlan::default()).expect("default plan") > 0.0);
    assert!(timer.time(&start).expect("start plan") > 0.0);
    // Every config of one projection, and one value away from the start of the first
    // knob of each other family (a CPU prefill is slow in a debug build; the search
    // itself is the decode step's, tested above): each runs or is refused, and the
    // padding and release plans run.
    let mut tried = Vec::new();
    let mut ran = 0;
    for (i, k) in space.knobs.iter().enumerate() {
        let values: Vec<u32> = if k.name == "mlp.down.config" {
            k.candidates.clone()
        } else if k.family != Family::TileConfig && !tried.contains(&k.family) {
            tried.push(k.family);
            k.candidates.iter().copied().filter(|&v| v != k.start).take(1).collect()
        } else {
            Vec::new()
        };
        for v in values {
            let mut a = space.start();
            a[i] = v;
            let plan = space.plan(&a).expect("a prefill plan");
            match timer.time(&plan) {
                Ok(ms) => {
                    assert!(ms > 0.0);
                    ran += 1;
                }
                Err(e) => assert!(k.family == Family::TileConfig, "{} = {v}: {e}", k.name),
            }
        }
    }
    assert!(ran >= 4, "{ran} plans ran");
}

/// On cuBLASLt subkernels the prefill's space tunes each projection's chunk count instead
/// of its `matmul` config, and plans with other counts run (the CPU implementation of the
/// GEMM behind the same proxy and flags).
#[test]
fn the_cublaslt_prefill_space_tunes_chunk_counts_and_its_plans_run() {
    let lm = tiny(fresh_seed("the_cublaslt_prefill_space_tunes_chunk_counts"));
    let dev = lm.lm_head().device().clone();
    let sms = dev.sm_count();
    let (batch, seq) = (2, 70);
    let gemm = GemmBackend::CublasLt { chunks: 4 };
    let space = Space::prefill_with(&lm, batch, seq, sms, &[], gemm).expect("space");
    let chunk_knobs: Vec<_> = space.knobs.iter().filter(|k| k.family == Family::Chunks).collect();
    assert_eq!(chunk_knobs.len(), 4, "one per projection");
    assert!(chunk_knobs.iter().all(|k| k.start == 4 && k.candidates == [1, 2, 4, 8]));
    assert!(
        space.knobs.iter().all(|k| k.family != Family::TileConfig),
        "matmul configs do not apply to cuBLASLt"
    );
    let held = Space::prefill_with(&lm, batch, seq, sms, &[Family::Chunks], gemm).expect("space");
    assert!(held.knobs.iter().all(|k| k.family != Family::Chunks));
    let mut timer = PrefillTimer::new(&lm, batch, seq, 2, 0, 1)
        .expect("timer")
        .with_gemm(PrefillGemm::new(&dev, gemm).expect("cuBLASLt on the CPU backend"));
    for v in [1, 8] {
        let mut a = space.start();
        for (i, k) in space.knobs.iter().enumerate() {
            if k.family == Family::Chunks {
                a[i] = v;
            }
        }
        let plan = space.plan(&a).expect("plan");
        assert!(
            plan.describe()
                .iter()
                .any(|l| l.contains(&format!("{v} cuBLASLt chunks")))
        );
        assert!(timer.time(&plan).expect("a plan of chunk counts runs") > 0.0);
    }
}

/// With `auto` prefill GEMMs the space tunes the chunk count of each projection that the
/// threshold puts on cuBLASLt and the `matmul` config of each other one, and a plan that
/// sets both kinds runs.
#[test]
fn the_auto_prefill_space_tunes_each_projection_on_its_backend() {
    let lm = tiny(fresh_seed("the_auto_prefill_space_tunes_each_projection"));
    let dev = lm.lm_head().device().clone();
    let sms = dev.sm_count();
    let (batch, seq) = (2, 70);
    // tiny's prefill of 140 rows: QKV and gate/up 18.4 MFLOP each, O and down 9.2.
    let gemm = GemmBackend::Auto { min_flops: 10_000_000 };
    let space = Space::prefill_with(&lm, batch, seq, sms, &[], gemm).expect("space");
    let names = |family: Family| -> Vec<&str> {
        let mut n: Vec<&str> = space
            .knobs
            .iter()
            .filter(|k| k.family == family)
            .map(|k| k.name.as_str())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(Family::Chunks), ["attn.qkv.chunks", "mlp.gate_up.chunks"]);
    assert_eq!(names(Family::TileConfig), ["attn.o.config", "mlp.down.config"]);
    assert!(
        space
            .knobs
            .iter()
            .filter(|k| k.family == Family::Chunks)
            .all(|k| k.start == 1),
        "auto starts from one chunk"
    );
    let mut timer = PrefillTimer::new(&lm, batch, seq, 2, 0, 1)
        .expect("timer")
        .with_gemm(PrefillGemm::new(&dev, gemm).expect("auto on the CPU backend"));
    let mut a = space.start();
    for (i, k) in space.knobs.iter().enumerate() {
        if k.family == Family::Chunks {
            a[i] = 2;
        }
    }
    let plan = space.plan(&a).expect("plan");
    assert!(timer.time(&plan).expect("a mixed plan runs") > 0.0);
}
