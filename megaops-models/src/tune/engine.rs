//! The tuner on a model: the knob [`Space`] of a decode step (every site's tile config,
//! prefetch depth, split, occupancy limit and release point, the column data tiles, and
//! the streams) or of a prefill (the GEMMs' tile configs, occupancy limits and release
//! points), a [`PlanTimer`] for each ([`StepTimer`] times CUDA-graph replays of a decode
//! step, [`PrefillTimer`] prefills), and [`tune`], which runs the search of
//! [`super::search`] from the planners' choices.

use super::knobs::{Family, Release, Site, SiteChoice, StepPlan};
use super::search::{self, Assignment, Event, Knob, Outcome, SearchOptions};
use crate::bench::{median, random_prompts, time_each};
use crate::error::{ModelError, Result};
use crate::generate::Session;
use crate::layers::mlp::{DECODE_COL_TILE, DECODE_MAX_M, mlp_gemm_configs, prefill_gemm_config};
use crate::layers::{DecodeTiles, GemmBackend, Picked, PrefillGemm, Projection, decode_placement};
use crate::model::CausalLm;
use megaops::AsyncStream;
use megaops::launch::ConfigInfo;
use megaops_kernels::attention::decode;
use megaops_kernels::gemm::matmul;
use megaops_kernels::gemv::lm_head;
use megaops_kernels::gemv::plan::{self, ConfigShape, Placement};
use std::collections::BTreeMap;

/// What a knob of the [`Space`] sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// The AsyncStream's streams (value: the count).
    Streams,
    /// A GEMV site's tile config shape (value: a config index; its `PF` is replaced by the
    /// site's prefetch knob when there is one).
    Config(Site),
    /// A GEMV site's prefetch depth (value: `PF`).
    Prefetch(Site),
    /// A site's split (value: the count).
    Splits(Site),
    /// A site's occupancy limit (value: `c`, 0 for none).
    Padding(Site),
    /// A site's release point (value: 0 first CTA, 1 last CTA).
    Release(Site),
    /// Columns per data tile of a site's output (value: the columns).
    DataTile(Site),
    /// Row chunks of a site's cuBLASLt subkernel (value: the most chunks).
    Chunks(Site),
    /// Norm fusion into the following projections (value: 0 off, 1 on).
    FuseNorms,
    /// QK-norm + RoPE fusion into decode attention (value: 0 off, 1 on).
    FuseRope,
    /// The add + RMSNorms behind the output and down projections (value: 0 off, 1 on).
    NormAfter,
}

/// The knobs of one decode step and what each sets.
#[derive(Clone, Debug)]
pub struct Space {
    /// The knobs, in search order; each `start` is the planners' choice.
    pub knobs: Vec<Knob>,
    /// What each knob sets (same order).
    pub bindings: Vec<Binding>,
    configs: BTreeMap<Site, &'static [ConfigInfo]>,
    /// The planner's config of each GEMV site.
    start_configs: BTreeMap<Site, usize>,
}

/// A GEMV site of the decode step: its kernel's configs and its shape.
struct GemvSite {
    site: Site,
    configs: &'static [ConfigInfo],
    rg: u32,
    n: u32,
    k: u32,
    split_k: bool,
    placement: Placement,
}

fn shape(info: &ConfigInfo) -> Result<ConfigShape> {
    ConfigShape::of(info)
        .ok_or_else(|| ModelError::Request(format!("cannot read the tiling constants of config `{}`", info.name)))
}

impl Space {
    /// The knobs of `lm`'s decode step at `batch` sequences of up to `max_len` positions
    /// on `sms` SMs, starting from the planners' choices and `streams`, without the
    /// families in `held` (those stay at the planners' values).
    pub fn decode(
        lm: &CausalLm,
        batch: usize,
        max_len: usize,
        sms: u32,
        streams: usize,
        held: &[Family],
    ) -> Result<Space> {
        let c = lm.config();
        let dims = lm.model().dims();
        let m = batch as u32;
        let mut gemvs: Vec<GemvSite> = Projection::of_layer(&dims, c.intermediate_size)
            .into_iter()
            .map(|p| GemvSite {
                site: p.site,
                configs: p.gemv_configs(),
                rg: p.row_groups as u32,
                n: p.n as u32,
                k: p.k as u32,
                split_k: true,
                placement: p.decode_placement(),
            })
            .collect();
        gemvs.push(GemvSite {
            site: Site::LmHead,
            configs: lm_head::CONFIGS,
            rg: 1,
            n: c.vocab_size as u32,
            k: c.hidden_size as u32,
            split_k: false,
            placement: decode_placement(Site::LmHead),
        });
        let mut space = Space::empty();
        for g in &gemvs {
            space.configs.insert(g.site, g.configs);
            let max_splits = if g.split_k { plan::MAX_SPLITS } else { 1 };
            let start = plan::choose(g.configs, g.rg, m, g.n, g.k, sms, max_splits, g.placement)?;
            space.start_configs.insert(g.site, start.config);
            let shapes = g.configs.iter().map(shape).collect::<Result<Vec<_>>>()?;
            // Config candidates: every config with the start's prefetch depth (the
            // prefetch knob varies that depth).
            let configs: Vec<u32> = (0..g.configs.len() as u32)
                .filter(|&i| shapes[i as usize].pf == start.shape.pf)
                .collect();
            let name = g.site.name();
            space.add(
                held,
                Binding::Config(g.site),
                Family::TileConfig,
                format!("{name}.config"),
                configs,
                start.config as u32,
            );
            let depths: Vec<u32> = shapes.iter().map(|s| s.pf).collect();
            space.add(
                held,
                Binding::Prefetch(g.site),
                Family::Prefetch,
                format!("{name}.prefetch"),
                depths,
                start.shape.pf,
            );
            if g.split_k {
                space.add(
                    held,
                    Binding::Splits(g.site),
                    Family::Split,
                    format!("{name}.splits"),
                    vec![1, 2, 4, 8],
                    start.splits,
                );
            }
        }
        // Decode attention's split-KV count around the planner's.
        let s0 = decode::splits_for(m, dims.hkv as u32, max_len as u32, sms);
        let around: Vec<u32> = [s0 / 4, s0 / 2, s0, s0 * 2, s0 * 4]
            .into_iter()
            .map(|s| s.clamp(1, decode::MAX_SPLITS))
            .collect();
        space.add(
            held,
            Binding::Splits(Site::Attention),
            Family::Split,
            "attn.core.splits".into(),
            around,
            s0,
        );
        for site in Site::ALL {
            space.add(
                held,
                Binding::Padding(site),
                Family::Padding,
                format!("{}.occupancy", site.name()),
                vec![0, 1, 2, 4],
                0,
            );
        }
        for site in Site::ALL {
            if site != Site::LmHead {
                space.add(
                    held,
                    Binding::Release(site),
                    Family::Release,
                    format!("{}.release", site.name()),
                    vec![0, 1],
                    0,
                );
            }
        }
        // The column data tiles of the tensors the decode path tiles by columns, by the
        // site that produces each.
        for site in [Site::Qkv, Site::OProj, Site::GateUp, Site::LmHead] {
            space.add(
                held,
                Binding::DataTile(site),
                Family::DataTile,
                format!("{}.data_tile", site.name()),
                DecodeTiles::CANDIDATES.to_vec(),
                DECODE_COL_TILE,
            );
        }
        space.add(
            held,
            Binding::Streams,
            Family::Streams,
            "streams".into(),
            vec![2, 3, 4],
            streams as u32,
        );
        space.add(
            held,
            Binding::FuseNorms,
            Family::Fusion,
            "norm_fusion".into(),
            vec![0, 1],
            0,
        );
        space.add(
            held,
            Binding::FuseRope,
            Family::Fusion,
            "rope_fusion".into(),
            vec![0, 1],
            1,
        );
        space.add(
            held,
            Binding::NormAfter,
            Family::Fusion,
            "norm_after".into(),
            vec![0, 1],
            crate::model::DEFAULT_NORM_AFTER as u32,
        );
        Ok(space)
    }

    /// The knobs of `lm`'s prefill of `batch` sequences of `seq` tokens on `sms` SMs,
    /// starting from the planners' choices, without the families in `held`: the `matmul`
    /// config of each projection, and the occupancy limit and release point of every
    /// kernel. The streams are the caller's (a prefill shares them with the decode steps
    /// that follow it).
    pub fn prefill(lm: &CausalLm, batch: usize, seq: usize, sms: u32, held: &[Family]) -> Result<Space> {
        Space::prefill_with(lm, batch, seq, sms, held, GemmBackend::Rust)
    }

    /// [`Space::prefill`] for a prefill whose projections run on `gemm`: for a projection on
    /// cuBLASLt subkernels ([`GemmBackend::pick`]) its chunk count (1 to 8, from `gemm`'s)
    /// is a knob instead of its `matmul` config.
    pub fn prefill_with(
        lm: &CausalLm,
        batch: usize,
        seq: usize,
        sms: u32,
        held: &[Family],
        gemm: GemmBackend,
    ) -> Result<Space> {
        let c = lm.config();
        let dims = lm.model().dims();
        let m = batch * seq;
        if m <= DECODE_MAX_M {
            return Err(ModelError::Request(format!(
                "a prefill of {m} rows takes the decode path; tune it as a decode step"
            )));
        }
        let (h, inter) = (c.hidden_size, c.intermediate_size);
        let [gate_up, down] = mlp_gemm_configs(m, h, inter, sms);
        let mut space = Space::empty();
        let all_configs: Vec<u32> = (0..matmul::CONFIGS.len() as u32).collect();
        for p in Projection::of_layer(&dims, inter) {
            let (site, n, k) = (p.site, p.weight_rows(), p.k);
            let start = match site {
                Site::GateUp => gate_up,
                Site::Down => down,
                _ => prefill_gemm_config(m, n, sms),
            };
            match gemm.pick(m as u32, n as u32, k as u32) {
                Picked::Rust => space.add(
                    held,
                    Binding::Config(site),
                    Family::TileConfig,
                    format!("{}.config", site.name()),
                    all_configs.clone(),
                    start as u32,
                ),
                Picked::CublasLt { chunks } => space.add(
                    held,
                    Binding::Chunks(site),
                    Family::Chunks,
                    format!("{}.chunks", site.name()),
                    vec![1, 2, 4, 8],
                    chunks as u32,
                ),
            }
        }
        let layer_sites: Vec<Site> = Site::ALL.into_iter().filter(|&s| s != Site::LmHead).collect();
        for &site in &layer_sites {
            space.add(
                held,
                Binding::Padding(site),
                Family::Padding,
                format!("{}.occupancy", site.name()),
                vec![0, 1, 2],
                0,
            );
        }
        // The prefill's launches release their successor at their last CTA.
        for site in layer_sites {
            space.add(
                held,
                Binding::Release(site),
                Family::Release,
                format!("{}.release", site.name()),
                vec![0, 1],
                1,
            );
        }
        Ok(space)
    }

    fn empty() -> Space {
        Space {
            knobs: Vec::new(),
            bindings: Vec::new(),
            configs: BTreeMap::new(),
            start_configs: BTreeMap::new(),
        }
    }

    /// Adds a knob of `binding` (`start` joins its candidates, sorted) unless it has a
    /// single candidate or `held` holds its family. A GEMV site's config, prefetch depth
    /// and split form a group: they size the same kernel's tile and grid together.
    fn add(
        &mut self,
        held: &[Family],
        binding: Binding,
        family: Family,
        name: String,
        mut candidates: Vec<u32>,
        start: u32,
    ) {
        if !candidates.contains(&start) {
            candidates.push(start);
        }
        candidates.sort_unstable();
        candidates.dedup();
        if candidates.len() < 2 || held.contains(&family) {
            return;
        }
        let group = match binding {
            Binding::Config(site) | Binding::Prefetch(site) | Binding::Splits(site) => Some(site.name().to_string()),
            _ => None,
        };
        self.knobs.push(Knob {
            name,
            family,
            candidates,
            start,
            group,
        });
        self.bindings.push(binding);
    }

    /// The start assignment (the planners' choices).
    pub fn start(&self) -> Assignment {
        self.knobs.iter().map(|k| k.start).collect()
    }

    /// The plan of an assignment; `None` when it names no existing config (a prefetch
    /// depth that the config's tile has no variant for). Knobs at their start values are
    /// written too, so the plan is explicit.
    pub fn plan(&self, a: &Assignment) -> Option<StepPlan> {
        let mut plan = StepPlan::default();
        let mut prefetch: BTreeMap<Site, u32> = BTreeMap::new();
        for (binding, &value) in self.bindings.iter().zip(a) {
            match *binding {
                Binding::Streams => plan.streams = Some(value as usize),
                Binding::FuseNorms => plan.fuse_norms = Some(value == 1),
                Binding::FuseRope => plan.fuse_rope = Some(value == 1),
                Binding::NormAfter => plan.norm_after = Some(value == 1),
                Binding::Config(site) => plan.site_mut(site).config = Some(value as usize),
                Binding::Prefetch(site) => {
                    prefetch.insert(site, value);
                }
                Binding::Splits(site) => plan.site_mut(site).splits = Some(value),
                Binding::Padding(site) => plan.site_mut(site).occupancy_limit = Some(value),
                Binding::DataTile(site) => plan.site_mut(site).data_tile = Some(value),
                Binding::Chunks(site) => plan.site_mut(site).chunks = Some(value),
                Binding::Release(site) => {
                    plan.site_mut(site).release = Some(if value == 0 {
                        Release::FirstCta
                    } else {
                        Release::LastCta
                    })
                }
            }
        }
        for (site, pf) in prefetch {
            let configs = self.configs.get(&site)?;
            let choice: &mut SiteChoice = plan.site_mut(site);
            let base = match choice.config {
                Some(c) => c,
                // No config knob (held, or a single candidate): the planner's config.
                None => self.start_config(site)?,
            };
            let b = ConfigShape::of(configs.get(base)?)?;
            if b.pf == pf {
                choice.config = Some(base);
                continue;
            }
            let twin = configs
                .iter()
                .position(|i| ConfigShape::of(i).is_some_and(|s| ConfigShape { pf, ..b } == s))?;
            choice.config = Some(twin);
        }
        Some(plan)
    }

    fn start_config(&self, site: Site) -> Option<usize> {
        self.start_configs.get(&site).copied()
    }
}

/// A timer's random prompts (`batch` of `len` tokens), after checking its counts and that
/// they and `new_tokens` make a request the model serves (a timer's session is a
/// generation too).
fn timer_prompts(
    lm: &CausalLm,
    batch: usize,
    len: usize,
    new_tokens: usize,
    streams: usize,
    reps: usize,
) -> Result<Vec<Vec<u32>>> {
    if reps == 0 || streams == 0 {
        return Err(ModelError::Request(
            "a timer needs at least one timed run and one stream".into(),
        ));
    }
    let prompts = random_prompts(batch, len, lm.config().vocab_size, 7);
    let opts = crate::GenerateOptions {
        max_new_tokens: new_tokens,
        ..crate::GenerateOptions::default()
    };
    crate::generate::check_request(lm.config(), &prompts, &opts)?;
    Ok(prompts)
}

/// What [`tune`] measures: the median time of a model's step under a plan, ms.
pub trait PlanTimer {
    /// Median time under `plan`, ms.
    fn time(&mut self, plan: &StepPlan) -> Result<f64>;
}

/// Times decode steps of one model at one batch size: a session prefilled once, then per
/// plan a fresh decoder captured as a graph and replayed (median of the replays, CUDA
/// events; the wall clock on the CPU backend).
pub struct StepTimer<'m> {
    lm: &'m CausalLm,
    session: Session<'m>,
    first: Vec<u32>,
    streams: BTreeMap<usize, AsyncStream>,
    default_streams: usize,
    warmup: usize,
    replays: usize,
}

impl<'m> StepTimer<'m> {
    /// A timer for `batch` sequences after a prompt of `context` random tokens, with
    /// `replays` timed replays (after `warmup`) per plan; plans without streams run on
    /// `streams`.
    pub fn new(
        lm: &'m CausalLm,
        batch: usize,
        context: usize,
        streams: usize,
        warmup: usize,
        replays: usize,
    ) -> Result<StepTimer<'m>> {
        let steps = warmup + replays + 2;
        let prompts = timer_prompts(lm, batch, context, steps, streams, replays)?;
        let device = lm.lm_head().device().clone();
        let mut session = Session::new(lm, batch, context, steps)?;
        let on = AsyncStream::new(&device, streams)?;
        let mut prefill = session.prefill_inputs(&prompts)?;
        session.prefill(&on, &mut prefill)?;
        on.synchronize()?;
        let first = prefill.pass().next_ids().tensor().to_vec()?;
        drop(prefill);
        let mut map = BTreeMap::new();
        map.insert(streams, on);
        Ok(StepTimer {
            lm,
            session,
            first,
            streams: map,
            default_streams: streams,
            warmup,
            replays,
        })
    }

    /// The model.
    pub fn model(&self) -> &'m CausalLm {
        self.lm
    }

    /// Positions per sequence of the session's caches (what sizes decode attention's
    /// split-KV planner: pass it to [`Space::decode`]).
    pub fn max_len(&self) -> usize {
        self.session.max_seq()
    }

    /// Median step time under `plan`, ms.
    pub fn time(&mut self, plan: &StepPlan) -> Result<f64> {
        PlanTimer::time(self, plan)
    }
}

impl PlanTimer for StepTimer<'_> {
    fn time(&mut self, plan: &StepPlan) -> Result<f64> {
        let n = plan.streams.unwrap_or(self.default_streams);
        if !self.streams.contains_key(&n) {
            let device = self.lm.lm_head().device().clone();
            self.streams.insert(n, AsyncStream::new(&device, n)?);
        }
        let on = &self.streams[&n];
        let mut decoder = self.session.decoder_with(&self.first, plan)?;
        let graph = decoder.capture(on)?;
        for _ in 0..self.warmup {
            graph.launch(on)?;
        }
        let times = time_each(on, self.replays, || Ok(graph.launch(on)?))?;
        Ok(median(times))
    }
}

/// Times prefills of one model: `batch` random prompts of `seq` tokens, per plan a fresh
/// prefill pass run `warmup` times and then `reps` timed times (median; CUDA events on the
/// GPU, the wall clock on the CPU backend), on the timer's AsyncStream.
pub struct PrefillTimer<'m> {
    session: Session<'m>,
    prompts: Vec<Vec<u32>>,
    on: AsyncStream,
    warmup: usize,
    reps: usize,
    gemm: PrefillGemm,
}

impl<'m> PrefillTimer<'m> {
    /// A timer for prefills of `batch` × `seq` tokens on `streams` streams.
    pub fn new(
        lm: &'m CausalLm,
        batch: usize,
        seq: usize,
        streams: usize,
        warmup: usize,
        reps: usize,
    ) -> Result<PrefillTimer<'m>> {
        let prompts = timer_prompts(lm, batch, seq, 1, streams, reps)?;
        let device = lm.lm_head().device().clone();
        Ok(PrefillTimer {
            session: Session::new(lm, batch, seq, 1)?,
            prompts,
            on: AsyncStream::new(&device, streams)?,
            warmup,
            reps,
            gemm: PrefillGemm::Rust,
        })
    }

    /// The timer with the prefill's projections on `gemm` (the default is `matmul`).
    pub fn with_gemm(self, gemm: PrefillGemm) -> PrefillTimer<'m> {
        PrefillTimer { gemm, ..self }
    }
}

impl PlanTimer for PrefillTimer<'_> {
    fn time(&mut self, plan: &StepPlan) -> Result<f64> {
        let mut p = self.session.prefill_inputs_with(&self.prompts, plan)?;
        p.set_gemm(&self.gemm);
        for _ in 0..self.warmup {
            self.session.prefill(&self.on, &mut p)?;
        }
        let (session, on) = (&mut self.session, &self.on);
        let times = time_each(on, self.reps, || session.prefill(on, &mut p))?;
        Ok(median(times))
    }
}

/// What [`tune`] found.
#[derive(Clone, Debug)]
pub struct Tuned {
    /// The tuned plan (explicit values for every knob of the space).
    pub plan: StepPlan,
    /// The plan of the start (the planners' choices, written out).
    pub start_plan: StepPlan,
    /// The search's outcome (costs in ms).
    pub outcome: Outcome,
    /// The knobs searched.
    pub knobs: Vec<Knob>,
    /// Candidates that could not run, with why (`knob = value: error`).
    pub failures: Vec<String>,
}

/// Tunes the step that `timer` times over `space`: coordinate descent from the planners'
/// choices within `opts`, calling `on_event` as it goes. A candidate that fails (a config
/// that does not fit, a split the shape does not take) is skipped and recorded.
pub fn tune(
    timer: &mut dyn PlanTimer,
    space: &Space,
    opts: &SearchOptions,
    on_event: &mut dyn FnMut(&Event),
) -> Result<Tuned> {
    let mut failures = Vec::new();
    let mut cost = |a: &Assignment| -> Result<Option<f64>> {
        let Some(plan) = space.plan(a) else {
            return Ok(None);
        };
        match timer.time(&plan) {
            Ok(ms) => Ok(Some(ms)),
            Err(e) => {
                failures.push(format!("{}: {e}", describe(space, a)));
                Ok(None)
            }
        }
    };
    let outcome = search::coordinate_descent(&space.knobs, opts, &mut cost, on_event).map_err(|e| match e {
        search::SearchError::Cost(e) => e,
        other => ModelError::Request(format!("tuner: {other}")),
    })?;
    let plan = space
        .plan(&outcome.best)
        .ok_or_else(|| ModelError::Request("tuner: the best assignment has no plan".into()))?;
    let start_plan = space
        .plan(&space.start())
        .ok_or_else(|| ModelError::Request("tuner: the start assignment has no plan".into()))?;
    Ok(Tuned {
        plan,
        start_plan,
        outcome,
        knobs: space.knobs.clone(),
        failures,
    })
}

/// The knobs that differ from their start in `a`, as `name = value`.
pub fn describe(space: &Space, a: &Assignment) -> String {
    let moved: Vec<String> = space
        .knobs
        .iter()
        .zip(a)
        .filter(|(k, v)| k.start != **v)
        .map(|(k, v)| format!("{} = {v}", k.name))
        .collect();
    if moved.is_empty() {
        "the planners' choices".into()
    } else {
        moved.join(", ")
    }
}
