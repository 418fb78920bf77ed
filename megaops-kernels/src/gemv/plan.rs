//! Host side of the GEMV kernels: which config and split to use for a shape
//! ([`choose`]), the split-K scratch ([`SplitWorkspace`]), and checked launches that pick
//! both ([`linear`], [`gate_up`]) — the generated launchers cannot check the sizes of
//! plain tensors (`w`, the workspace), these do.
//!
//! The rules (the `megaops-bench gemv` measurements behind them, every config and split
//! on the decode shapes of Qwen3-0.6B/1.7B/8B and Llama-3.2-1B, m = 1…16, are in
//! bench/RESULTS.md, "Decode GEMV"):
//! - **No split-K** unless the output is so narrow that even the narrowest tile leaves
//!   most SMs idle: the split kernels' partial-sum round trip and ticket cost more than
//!   the extra CTAs bring.
//! - **Bounded configs for a GEMV alone, unbounded beside a producer** ([`Placement`]):
//!   configs with launch bounds (`MIN_CTAS`, two 256-thread CTAs per SM) keep twice the
//!   weight loads in flight per SM, but a consumer GEMV overlapping its producer (the
//!   MLP's down projection beside the fused gate/up) would park twice the waiting CTAs on
//!   the producer's SMs.
//! - **Enough CTAs, as wide as possible**: the widest tile (`BN`) that still gives about
//!   one CTA per SM (`rg · ⌈n / BN⌉ ≥ 0.9 · SMs`, `rg` = 2 for gate+up, whose CTAs read
//!   twice the rows), or 1.4 per SM for bounded configs (seven tenths of the two that fit),
//!   ties broken by more warps along k (`WK`), then by longer batches (`U`); when no tile
//!   gives that many CTAs, the narrowest.
//! - **Short batches for m > 8**: with more than 8 tokens each warp multiplies two n-tiles
//!   of x, which doubles the live x fragments; the widest tile with the shortest batch
//!   (`U = 2`) that reaches enough CTAs is then taken first, else the rule above among
//!   the longer batches.

use super::{
    add_rmsnorm_gate_up_silu, add_rmsnorm_gemv, gate_up_silu, gate_up_silu_splitk, gemv, gemv_add_rmsnorm, gemv_splitk,
};
use megaops::launch::{AsInput, AsOutput, ConfigInfo};
use megaops::{Device, Error, LaunchOptions, LaunchTarget, R2, Result, Tensor, bf16};

/// Largest split the planner uses (the last CTA of a tile reads `splits` partials).
pub const MAX_SPLITS: u32 = 8;

/// The constants of a tile config that shape its tiling, read from the config's typed
/// constants (the single source of truth is the kernel's `#[config]` list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigShape {
    /// Output columns per CTA.
    pub bn: u32,
    /// Warps that split k inside a CTA.
    pub wk: u32,
    /// Chunks of 32 k per batch.
    pub u: u32,
    /// Batches loaded before the input wait.
    pub pf: u32,
    /// CTAs per SM that the config's launch bounds guarantee (0: no bounds).
    pub min_ctas: u32,
}

impl ConfigShape {
    /// Reads `BN`, `WK`, `U`, `PF` and `MIN_CTAS` from the config's constants (integers of
    /// any type that fit a `u32`; a missing `MIN_CTAS` means no launch bounds), `None` when
    /// one of the others is missing.
    pub fn of(info: &ConfigInfo) -> Option<ConfigShape> {
        let get = |name: &str| info.int(name).and_then(|v| u32::try_from(v).ok());
        Some(ConfigShape {
            bn: get("BN")?,
            wk: get("WK")?,
            u: get("U")?,
            pf: get("PF")?,
            min_ctas: get("MIN_CTAS").unwrap_or(0),
        })
    }

    /// Threads per CTA.
    pub fn threads(&self) -> u32 {
        2 * self.bn * self.wk
    }

    /// k elements per batch.
    pub fn batch_k(&self) -> u32 {
        32 * self.u
    }

    /// Whether the config carries launch bounds.
    pub fn bounded(&self) -> bool {
        self.min_ctas > 0
    }
}

/// Whether a GEMV shares the GPU with a kernel that is still running, which decides
/// between the bounded and the unbounded configs (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Nothing else runs beside it (a standalone projection, a chain's first kernel):
    /// bounded configs, two CTAs per SM, when the kernel has them.
    Alone,
    /// It overlaps a producer that is still running (a consumer launched on an
    /// `AsyncStream` right after the kernel that writes its input): unbounded configs,
    /// whose one CTA per SM leaves the producer room.
    BesideProducer,
}

/// A config and a split for one shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// Index into the kernel's `CONFIGS`.
    pub config: usize,
    /// CTAs per column tile (1: the plain kernel; more: the `_splitk` kernel).
    pub splits: u32,
    /// The config's shape.
    pub shape: ConfigShape,
}

/// Picks the config (among `configs` with weight prefetch on, bounded or not as
/// `placement` asks when the kernel has both) and split (≤ `max_splits`; 1 means the
/// kernel without split-K) for an `m × n` output over `k` with `rg` row groups (1; 2 for
/// gate+up) on `sms` SMs, by the measured rules of the [module docs](self).
#[allow(clippy::too_many_arguments)]
pub fn choose(
    configs: &[ConfigInfo],
    rg: u32,
    m: u32,
    n: u32,
    k: u32,
    sms: u32,
    max_splits: u32,
    placement: Placement,
) -> Result<Choice> {
    let mut candidates = Vec::new();
    for (config, info) in configs.iter().enumerate() {
        let Some(shape) = ConfigShape::of(info) else {
            return Err(Error::Invalid(format!(
                "cannot read the tiling constants of config `{}`",
                info.name
            )));
        };
        if shape.pf > 0 {
            candidates.push(Choice {
                config,
                splits: 1,
                shape,
            });
        }
    }
    let bounded = placement == Placement::Alone && candidates.iter().any(|c| c.shape.bounded());
    candidates.retain(|c| c.shape.bounded() == bounded);
    let ctas = |c: &Choice| rg.max(1) * n.div_ceil(c.shape.bn);
    // Wider first, then more warps along k, then longer batches.
    candidates.sort_by_key(|c| {
        (
            std::cmp::Reverse(c.shape.bn),
            std::cmp::Reverse(c.shape.wk),
            std::cmp::Reverse(c.shape.u),
        )
    });
    let enough = if bounded { 14 * sms } else { 9 * sms }.div_ceil(10);
    if m > 8
        && let Some(shortest) = candidates.iter().map(|c| c.shape.u).min()
    {
        if let Some(c) = candidates.iter().find(|c| c.shape.u == shortest && ctas(c) >= enough) {
            candidates = vec![*c];
        } else if candidates.iter().any(|c| c.shape.u != shortest) {
            candidates.retain(|c| c.shape.u != shortest);
        }
    }
    let mut choice = match candidates.iter().find(|c| ctas(c) >= enough) {
        Some(c) => *c,
        // None fills the GPU: the narrowest tile (the last of each width group is the one
        // with the most warps along k after the sort, so pick by CTAs, then by order).
        None => *candidates
            .iter()
            .max_by_key(|c| (ctas(c), c.shape.wk, c.shape.u))
            .ok_or_else(|| Error::Invalid("no GEMV config with weight prefetch".into()))?,
    };
    // Split only when even that leaves three quarters of the SMs idle.
    let tiles = ctas(&choice);
    if tiles * 4 < sms {
        let batches = k.div_ceil(choice.shape.batch_k());
        let most = (batches / choice.shape.wk).clamp(1, max_splits.max(1));
        choice.splits = sms.div_ceil(tiles).clamp(1, most);
    }
    Ok(choice)
}

/// Scratch for the split-K kernels: f32 partial sums and zeroed ticket counters. One per
/// launch that may overlap another split-K launch (sequential launches can share one).
pub struct SplitWorkspace {
    /// Partial sums, `[splits, row groups, m, n]` f32.
    pub ws: Tensor<f32>,
    /// One ticket counter per column tile; zero between launches.
    pub counters: Tensor<u32>,
}

impl SplitWorkspace {
    /// Scratch for up to `max_splits` splits of `max_rg` row groups (2 for gate+up) of an
    /// `max_m × max_n` output, with column tiles as small as 16.
    pub fn new(
        device: &Device,
        max_m: usize,
        max_n: usize,
        max_splits: usize,
        max_rg: usize,
    ) -> Result<SplitWorkspace> {
        let ws = max_splits.max(1) * max_rg.max(1) * max_m.max(1) * max_n.max(1);
        let counters = Tensor::zeros(device, &[max_n.div_ceil(16).max(1)])?;
        // Re-zeroed by the device after a failed launch (see `Device::register_tickets`).
        device.register_tickets(&counters);
        Ok(SplitWorkspace {
            ws: Tensor::zeros(device, &[ws])?,
            counters,
        })
    }

    /// Checks that it holds a launch with `splits` splits, `rg` row groups, an `m × n`
    /// output and column tiles of `bn`.
    pub fn check(&self, splits: u32, rg: u32, m: u32, n: u32, bn: u32) -> Result<()> {
        let need = splits as usize * rg as usize * m as usize * n as usize;
        let tiles = n.div_ceil(bn) as usize;
        if self.ws.numel() < need || self.counters.numel() < tiles {
            return Err(Error::shape(format!(
                "split-K workspace too small: {splits} splits × {rg} × {m} × {n} needs {need} f32 and {tiles} counters, \
                 it has {} and {}",
                self.ws.numel(),
                self.counters.numel()
            )));
        }
        Ok(())
    }
}

fn check_weight(what: &str, w: &Tensor<bf16>, rows: u32, k: u32) -> Result<()> {
    if w.shape() != [rows as usize, k as usize] {
        return Err(Error::shape(format!(
            "{what}: the weight must be [{rows}, {k}], got {:?}",
            w.shape()
        )));
    }
    Ok(())
}

/// A config, split and placement that replace the planner's (a tuner's or a user's
/// choice); an unset field keeps what [`choose`] picks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pick {
    /// Index into the kernel's `CONFIGS` (the plain and split-K kernels share one list).
    pub config: Option<usize>,
    /// CTAs per column tile (1: the kernel without split-K).
    pub splits: Option<u32>,
    /// The placement [`choose`] plans for, instead of the caller's.
    pub placement: Option<Placement>,
}

/// [`choose`]'s choice with `pick` applied, checked: the config must exist, a split above 1
/// needs `max_splits` above 1 (a workspace), and every split must get at least one batch
/// of k per warp along k. `pick.placement`, when set, replaces `placement`.
#[allow(clippy::too_many_arguments)]
pub fn choose_with(
    configs: &[ConfigInfo],
    pick: Pick,
    rg: u32,
    m: u32,
    n: u32,
    k: u32,
    sms: u32,
    max_splits: u32,
    placement: Placement,
) -> Result<Choice> {
    let placement = pick.placement.unwrap_or(placement);
    let mut c = choose(configs, rg, m, n, k, sms, max_splits, placement)?;
    if let Some(config) = pick.config {
        let info = configs.get(config).ok_or_else(|| {
            Error::Invalid(format!(
                "GEMV config {config} does not exist (the kernel has {})",
                configs.len()
            ))
        })?;
        let shape = ConfigShape::of(info)
            .ok_or_else(|| Error::Invalid(format!("cannot read the tiling constants of config `{}`", info.name)))?;
        c = Choice {
            config,
            splits: 1,
            shape,
        };
    }
    if let Some(splits) = pick.splits {
        let most = (k.div_ceil(c.shape.batch_k()) / c.shape.wk).max(1);
        if splits == 0 || (splits > 1 && max_splits <= 1) || splits > max_splits.max(1) || splits > most {
            return Err(Error::Invalid(format!(
                "GEMV split {splits} for k = {k} with config `{}`: it takes 1 to {} (1 without a split-K workspace)",
                configs[c.config].name,
                most.min(max_splits.max(1)),
            )));
        }
        c.splits = splits;
    }
    Ok(c)
}

/// `y = x · wᵀ` with the config and split [`choose`] picks for `placement` (split-K only
/// when `ws` is given), after checking `w` (`[n, k]`) and the workspace. Returns the
/// choice.
#[allow(clippy::too_many_arguments)]
pub fn linear(
    on: &impl LaunchTarget,
    x: &(impl AsInput<bf16, R2> + ?Sized),
    w: &Tensor<bf16>,
    y: &mut (impl AsOutput<bf16, R2> + ?Sized),
    ws: Option<&mut SplitWorkspace>,
    m: u32,
    n: u32,
    k: u32,
    placement: Placement,
) -> Result<Choice> {
    linear_with(
        on,
        &LaunchOptions::default(),
        Pick::default(),
        x,
        w,
        y,
        ws,
        m,
        n,
        k,
        placement,
    )
}

/// The two GEMV kernel families: the plain `y = x · wᵀ` and the fused gate/up + SiLU·mul.
/// Each has a plain, a split-K and an add + RMSNorm-fused kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GemvFamily {
    Linear,
    GateUp,
}

impl GemvFamily {
    /// Row groups of the weight: 1, or 2 for `[w_gate; w_up]`.
    fn row_groups(self) -> u32 {
        match self {
            GemvFamily::Linear => 1,
            GemvFamily::GateUp => 2,
        }
    }

    /// The configs of the plain kernel (the split-K kernel shares them).
    fn configs(self) -> &'static [ConfigInfo] {
        match self {
            GemvFamily::Linear => gemv::CONFIGS,
            GemvFamily::GateUp => gate_up_silu::CONFIGS,
        }
    }

    /// The configs of the add + RMSNorm-fused kernel.
    fn fused_configs(self) -> &'static [ConfigInfo] {
        match self {
            GemvFamily::Linear => add_rmsnorm_gemv::CONFIGS,
            GemvFamily::GateUp => add_rmsnorm_gate_up_silu::CONFIGS,
        }
    }

    /// The name in errors (`linear`, `gate_up`).
    fn name(self) -> &'static str {
        match self {
            GemvFamily::Linear => "linear",
            GemvFamily::GateUp => "gate_up",
        }
    }

    /// Plans `n` output columns (`inter` for gate/up) over `k` with `pick` and launches the
    /// plain or split-K kernel; see [`linear_with`].
    #[allow(clippy::too_many_arguments)]
    fn launch(
        self,
        on: &impl LaunchTarget,
        opts: &LaunchOptions,
        pick: Pick,
        x: &(impl AsInput<bf16, R2> + ?Sized),
        w: &Tensor<bf16>,
        y: &mut (impl AsOutput<bf16, R2> + ?Sized),
        ws: Option<&mut SplitWorkspace>,
        (m, n, k): (u32, u32, u32),
        placement: Placement,
    ) -> Result<Choice> {
        let rg = self.row_groups();
        check_weight(self.name(), w, rg * n, k)?;
        let max_splits = if ws.is_some() { MAX_SPLITS } else { 1 };
        let sms = on.device().sm_count();
        let c = choose_with(self.configs(), pick, rg, m, n, k, sms, max_splits, placement)?;
        let opts = LaunchOptions {
            config: Some(c.config),
            ..opts.clone()
        };
        match ws {
            Some(ws) if c.splits > 1 => {
                ws.check(c.splits, rg, m, n, c.shape.bn)?;
                let (part, tickets) = (&mut ws.ws, &mut ws.counters);
                match self {
                    GemvFamily::Linear => {
                        gemv_splitk::launch_with(on, &opts, x, w, y, part, tickets, m, n, k, c.splits)?
                    }
                    GemvFamily::GateUp => {
                        gate_up_silu_splitk::launch_with(on, &opts, x, w, y, part, tickets, m, n, k, c.splits)?
                    }
                }
            }
            _ => match self {
                GemvFamily::Linear => gemv::launch_with(on, &opts, x, w, y, m, n, k)?,
                GemvFamily::GateUp => gate_up_silu::launch_with(on, &opts, x, w, y, m, n, k)?,
            },
        }
        Ok(c)
    }

    /// The add + RMSNorm-fused launch of [`linear_add_norm_with`] and
    /// [`gate_up_add_norm_with`].
    #[allow(clippy::too_many_arguments)]
    fn launch_add_norm<X, R, O>(
        self,
        on: &impl LaunchTarget,
        opts: &LaunchOptions,
        pick: Pick,
        norm: AddNorm<'_, X, R, O>,
        w: &Tensor<bf16>,
        y: &mut (impl AsOutput<bf16, R2> + ?Sized),
        scratch: &mut Tensor<bf16>,
        (m, n, k): (u32, u32, u32),
        placement: Placement,
    ) -> Result<Option<Choice>>
    where
        X: AsInput<bf16, R2> + ?Sized,
        R: AsInput<bf16, R2> + ?Sized,
        O: AsOutput<bf16, R2> + ?Sized,
    {
        let rg = self.row_groups();
        let what = format!("{}_add_norm", self.name());
        check_weight(&what, w, rg * n, k)?;
        check_norm_weight(&what, norm.weight, k)?;
        let sms = on.device().sm_count();
        let Some(c) = fuse_add_norm(self.configs(), self.fused_configs(), pick, rg, m, n, k, sms, placement)? else {
            return Ok(None);
        };
        let opts = LaunchOptions {
            config: Some(c.config),
            ..opts.clone()
        };
        let AddNorm {
            x,
            res,
            weight,
            res_out,
            eps,
        } = norm;
        match self {
            GemvFamily::Linear => {
                add_rmsnorm_gemv::launch_with(on, &opts, x, res, weight, w, y, res_out, scratch, m, n, k, eps)?
            }
            GemvFamily::GateUp => {
                add_rmsnorm_gate_up_silu::launch_with(on, &opts, x, res, weight, w, y, res_out, scratch, m, n, k, eps)?
            }
        }
        Ok(Some(c))
    }
}

/// [`linear`] with the launch options `opts` (their `config` is replaced by the choice)
/// and `pick` applied to the planner's choice ([`choose_with`]).
#[allow(clippy::too_many_arguments)]
pub fn linear_with(
    on: &impl LaunchTarget,
    opts: &LaunchOptions,
    pick: Pick,
    x: &(impl AsInput<bf16, R2> + ?Sized),
    w: &Tensor<bf16>,
    y: &mut (impl AsOutput<bf16, R2> + ?Sized),
    ws: Option<&mut SplitWorkspace>,
    m: u32,
    n: u32,
    k: u32,
    placement: Placement,
) -> Result<Choice> {
    GemvFamily::Linear.launch(on, opts, pick, x, w, y, ws, (m, n, k), placement)
}

/// `h = silu(x · w_gateᵀ) · (x · w_upᵀ)` with `w_gate_up = [w_gate; w_up]` (`[2·inter, k]`),
/// config and split as [`linear`] (the fused kernel has no bounded configs: its register
/// ring spills at 128, so `placement` changes nothing today). Returns the choice.
#[allow(clippy::too_many_arguments)]
pub fn gate_up(
    on: &impl LaunchTarget,
    x: &(impl AsInput<bf16, R2> + ?Sized),
    w_gate_up: &Tensor<bf16>,
    h: &mut (impl AsOutput<bf16, R2> + ?Sized),
    ws: Option<&mut SplitWorkspace>,
    m: u32,
    inter: u32,
    k: u32,
    placement: Placement,
) -> Result<Choice> {
    gate_up_with(
        on,
        &LaunchOptions::default(),
        Pick::default(),
        x,
        w_gate_up,
        h,
        ws,
        m,
        inter,
        k,
        placement,
    )
}

/// [`gate_up`] with the launch options `opts` (their `config` is replaced by the choice)
/// and `pick` applied to the planner's choice ([`choose_with`]).
#[allow(clippy::too_many_arguments)]
pub fn gate_up_with(
    on: &impl LaunchTarget,
    opts: &LaunchOptions,
    pick: Pick,
    x: &(impl AsInput<bf16, R2> + ?Sized),
    w_gate_up: &Tensor<bf16>,
    h: &mut (impl AsOutput<bf16, R2> + ?Sized),
    ws: Option<&mut SplitWorkspace>,
    m: u32,
    inter: u32,
    k: u32,
    placement: Placement,
) -> Result<Choice> {
    GemvFamily::GateUp.launch(on, opts, pick, x, w_gate_up, h, ws, (m, inter, k), placement)
}

/// The residual add and RMSNorm in front of a fused projection ([`linear_add_norm_with`],
/// [`gate_up_add_norm_with`]): what `norm::add_rmsnorm` would read and write.
pub struct AddNorm<'a, X: ?Sized, R: ?Sized, O: ?Sized> {
    /// The sublayer output, `[m, k]`.
    pub x: &'a X,
    /// The residual stream in, `[m, k]`.
    pub res: &'a R,
    /// The norm weight, `[k]`.
    pub weight: &'a Tensor<bf16>,
    /// The residual stream out, `bf16(x + res)`, `[m, k]`.
    pub res_out: &'a mut O,
    /// The norm's epsilon.
    pub eps: f32,
}

/// Elements of the scratch a fused projection of `n` output columns (`inter` for gate/up)
/// over `m × k` inputs needs with any config: one `[m, k]` slot per column tile of the
/// narrowest tile (16 columns).
pub fn add_norm_scratch_len(m: usize, n: usize, k: usize) -> usize {
    n.div_ceil(16) * m * k
}

/// The planner's choice for a projection when it may run fused with its add + RMSNorm:
/// the choice [`choose_with`] makes among the plain kernel's `plain` configs (with the
/// split-K limit of a workspace, as the unfused projection would), as the index of the
/// config of the same shape among the fused kernel's `fused` configs. `None`, meaning the
/// add + RMSNorm runs as its own kernel, when `m · k` is above
/// [`NORM_PROLOGUE_MAX_ELEMS`](super::NORM_PROLOGUE_MAX_ELEMS), the choice has a split
/// (the fused kernels have none), or the fused kernel lacks that shape.
#[allow(clippy::too_many_arguments)]
pub fn fuse_add_norm(
    plain: &[ConfigInfo],
    fused: &[ConfigInfo],
    pick: Pick,
    rg: u32,
    m: u32,
    n: u32,
    k: u32,
    sms: u32,
    placement: Placement,
) -> Result<Option<Choice>> {
    if (m as u64) * (k as u64) > super::NORM_PROLOGUE_MAX_ELEMS as u64 {
        return Ok(None);
    }
    let c = choose_with(plain, pick, rg, m, n, k, sms, MAX_SPLITS, placement)?;
    if c.splits != 1 {
        return Ok(None);
    }
    Ok(fused
        .iter()
        .position(|info| ConfigShape::of(info) == Some(c.shape))
        .map(|config| Choice { config, ..c }))
}

fn check_norm_weight(what: &str, w: &Tensor<bf16>, k: u32) -> Result<()> {
    if w.shape() != [k as usize] {
        return Err(Error::shape(format!(
            "{what}: the norm weight is {:?}, expected [{k}]",
            w.shape()
        )));
    }
    Ok(())
}

/// `add_rmsnorm` then `y = xn · wᵀ` as one launch of [`add_rmsnorm_gemv`] when
/// [`fuse_add_norm`] says so (returns its choice); `Ok(None)`, launching nothing, when the
/// add + RMSNorm should run as its own kernel before [`linear_with`]. `scratch` holds
/// [`add_norm_scratch_len`]`(m, n, k)` elements.
#[allow(clippy::too_many_arguments)]
pub fn linear_add_norm_with<X, R, O>(
    on: &impl LaunchTarget,
    opts: &LaunchOptions,
    pick: Pick,
    norm: AddNorm<'_, X, R, O>,
    w: &Tensor<bf16>,
    y: &mut (impl AsOutput<bf16, R2> + ?Sized),
    scratch: &mut Tensor<bf16>,
    m: u32,
    n: u32,
    k: u32,
    placement: Placement,
) -> Result<Option<Choice>>
where
    X: AsInput<bf16, R2> + ?Sized,
    R: AsInput<bf16, R2> + ?Sized,
    O: AsOutput<bf16, R2> + ?Sized,
{
    GemvFamily::Linear.launch_add_norm(on, opts, pick, norm, w, y, scratch, (m, n, k), placement)
}

/// [`linear_add_norm_with`] for the fused gate/up projection ([`add_rmsnorm_gate_up_silu`];
/// otherwise `Ok(None)` and [`gate_up_with`] after an `add_rmsnorm`). `scratch` holds
/// [`add_norm_scratch_len`]`(m, inter, k)` elements.
#[allow(clippy::too_many_arguments)]
pub fn gate_up_add_norm_with<X, R, O>(
    on: &impl LaunchTarget,
    opts: &LaunchOptions,
    pick: Pick,
    norm: AddNorm<'_, X, R, O>,
    w_gate_up: &Tensor<bf16>,
    h: &mut (impl AsOutput<bf16, R2> + ?Sized),
    scratch: &mut Tensor<bf16>,
    m: u32,
    inter: u32,
    k: u32,
    placement: Placement,
) -> Result<Option<Choice>>
where
    X: AsInput<bf16, R2> + ?Sized,
    R: AsInput<bf16, R2> + ?Sized,
    O: AsOutput<bf16, R2> + ?Sized,
{
    GemvFamily::GateUp.launch_add_norm(on, opts, pick, norm, w_gate_up, h, scratch, (m, inter, k), placement)
}

/// The residual add and RMSNorm behind a projection ([`linear_norm_after_with`]): the
/// residual added to the projection's output and what `norm::add_rmsnorm` would write.
pub struct NormAfter<'a, R: ?Sized, N: ?Sized, O: ?Sized> {
    /// The residual stream in, `[m, n]`.
    pub res: &'a R,
    /// The norm weight, `[n]`.
    pub weight: &'a Tensor<bf16>,
    /// The normalised rows, `[m, n]`.
    pub xn: &'a mut N,
    /// The residual stream out, `bf16(x · wᵀ + res)`, `[m, n]`.
    pub res_out: &'a mut O,
    /// The norm's epsilon.
    pub eps: f32,
}

/// Scratch of [`gemv_add_rmsnorm`]: the projection's bf16 output before the norm, the
/// rows' partial sums of squares and the launch's ticket. One per launch that may overlap
/// another (sequential launches can share one).
pub struct NormAfterScratch {
    /// `[max_m · n]` bf16.
    pub y: Tensor<bf16>,
    /// `[max_m · ⌈n / 16⌉]` f32: a partial per row and column tile of the narrowest tile.
    pub partials: Tensor<f32>,
    /// One ticket counter, zero between launches.
    pub ticket: Tensor<u32>,
}

impl NormAfterScratch {
    /// Scratch for projections of up to `max_m` rows of `n` output columns.
    pub fn new(device: &Device, max_m: usize, n: usize) -> Result<NormAfterScratch> {
        let ticket = Tensor::zeros(device, &[1])?;
        // Re-zeroed by the device after a failed launch (see `Device::register_tickets`).
        device.register_tickets(&ticket);
        Ok(NormAfterScratch {
            y: Tensor::zeros(device, &[max_m.max(1) * n.max(1)])?,
            partials: Tensor::zeros(device, &[max_m.max(1) * n.div_ceil(16).max(1)])?,
            ticket,
        })
    }
}

/// The largest output (`m · n` elements) behind which [`fuse_norm_after`] runs the
/// add + RMSNorm: above it the last CTA's pass over the rows costs more than the kernel it
/// saves. [`gemv_add_rmsnorm`] itself takes up to
/// [`NORM_PROLOGUE_MAX_ELEMS`](super::NORM_PROLOGUE_MAX_ELEMS).
pub const NORM_AFTER_MAX_ELEMS: u32 = 8 * 1024;

/// The planner's choice for a projection (`rg = 1`) that may run with the add + RMSNorm
/// behind it ([`gemv_add_rmsnorm`], which shares [`gemv`]'s configs): the choice
/// [`choose_with`] makes with `max_splits` (as the unfused projection would). `None`,
/// meaning the add + RMSNorm runs as its own kernel after the projection, when `m` is above
/// 16, `m · n` above [`NORM_AFTER_MAX_ELEMS`] or the choice has a split.
#[allow(clippy::too_many_arguments)]
pub fn fuse_norm_after(
    pick: Pick,
    m: u32,
    n: u32,
    k: u32,
    sms: u32,
    max_splits: u32,
    placement: Placement,
) -> Result<Option<Choice>> {
    if m > super::engine::GROUP_TOKENS || (m as u64) * (n as u64) > NORM_AFTER_MAX_ELEMS as u64 {
        return Ok(None);
    }
    let c = choose_with(gemv::CONFIGS, pick, 1, m, n, k, sms, max_splits, placement)?;
    Ok((c.splits == 1).then_some(c))
}

/// `y = x · wᵀ` then the add + RMSNorm `norm` of `y` as one launch of
/// [`gemv_add_rmsnorm`] when [`fuse_norm_after`] says so (returns its choice); `Ok(None)`,
/// launching nothing, when the projection ([`linear_with`]) and `norm::add_rmsnorm` should
/// run as two kernels. `max_splits` is the split-K limit of the unfused projection (1
/// without a workspace).
#[allow(clippy::too_many_arguments)]
pub fn linear_norm_after_with<R, N, O>(
    on: &impl LaunchTarget,
    opts: &LaunchOptions,
    pick: Pick,
    x: &(impl AsInput<bf16, R2> + ?Sized),
    w: &Tensor<bf16>,
    norm: NormAfter<'_, R, N, O>,
    scratch: &mut NormAfterScratch,
    (m, n, k): (u32, u32, u32),
    max_splits: u32,
    placement: Placement,
) -> Result<Option<Choice>>
where
    R: AsInput<bf16, R2> + ?Sized,
    N: AsOutput<bf16, R2> + ?Sized,
    O: AsOutput<bf16, R2> + ?Sized,
{
    let what = "linear_norm_after";
    check_weight(what, w, n, k)?;
    check_norm_weight(what, norm.weight, n)?;
    let sms = on.device().sm_count();
    let Some(c) = fuse_norm_after(pick, m, n, k, sms, max_splits, placement)? else {
        return Ok(None);
    };
    let opts = LaunchOptions {
        config: Some(c.config),
        ..opts.clone()
    };
    let NormAfter {
        res,
        weight,
        xn,
        res_out,
        eps,
    } = norm;
    let NormAfterScratch { y, partials, ticket } = scratch;
    gemv_add_rmsnorm::launch_with(
        on, &opts, x, w, res, weight, y, partials, ticket, xn, res_out, m, n, k, eps,
    )?;
    Ok(Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_config_has_a_readable_shape() {
        for configs in [
            gemv::CONFIGS,
            gemv_splitk::CONFIGS,
            gate_up_silu::CONFIGS,
            gate_up_silu_splitk::CONFIGS,
            add_rmsnorm_gemv::CONFIGS,
            add_rmsnorm_gate_up_silu::CONFIGS,
            gemv_add_rmsnorm::CONFIGS,
            super::super::lm_head::CONFIGS,
        ] {
            for c in configs {
                let s = ConfigShape::of(c).unwrap_or_else(|| panic!("config `{}`", c.name));
                assert!(s.bn.is_multiple_of(16) && s.wk >= 1 && s.u >= 1 && s.pf <= 2, "{s:?}");
            }
        }
        // Every bounded GEMV config is an unbounded one's tile with bounds that fit the
        // SM's 2048 threads and 64 Ki registers at no fewer than 128 per thread.
        let shapes: Vec<ConfigShape> = gemv::CONFIGS.iter().filter_map(ConfigShape::of).collect();
        let bounded: Vec<&ConfigShape> = shapes.iter().filter(|s| s.bounded()).collect();
        assert!(!bounded.is_empty());
        for b in bounded {
            let twin = ConfigShape { min_ctas: 0, ..*b };
            assert!(shapes.contains(&twin), "{b:?} has no unbounded twin");
            assert!(b.min_ctas * b.threads() * 128 <= 65_536, "{b:?}");
        }
    }

    #[test]
    fn reads_constants_of_any_integer_type() {
        use megaops::launch::ConfigValue::{U32, Usize};
        let info = ConfigInfo {
            name: "BN=64, WK: u32 = 2, U: usize = 4, PF=2usize",
            entry: "e",
            traced_entry: None,
            consts: &[("BN", U32(64)), ("WK", U32(2)), ("U", Usize(4)), ("PF", Usize(2))],
        };
        let shape = ConfigShape {
            bn: 64,
            wk: 2,
            u: 4,
            pf: 2,
            min_ctas: 0,
        };
        assert_eq!(ConfigShape::of(&info), Some(shape));
        let info = ConfigInfo {
            name: "BN=64, WK: u32 = 2, U: usize = 4, PF=2usize, MIN_CTAS: u32 = 2",
            entry: "e",
            traced_entry: None,
            consts: &[
                ("BN", U32(64)),
                ("WK", U32(2)),
                ("U", Usize(4)),
                ("PF", Usize(2)),
                ("MIN_CTAS", U32(2)),
            ],
        };
        assert_eq!(ConfigShape::of(&info), Some(ConfigShape { min_ctas: 2, ..shape }));
        let info = ConfigInfo {
            consts: &[("BN", U32(64)), ("WK", U32(2)), ("U", Usize(4))],
            ..info
        };
        assert_eq!(ConfigShape::of(&info), None, "no PF");
    }

    fn pick_for(placement: Placement, rg: u32, m: u32, n: u32, k: u32) -> Choice {
        let configs = if rg == 2 { gate_up_silu::CONFIGS } else { gemv::CONFIGS };
        choose(configs, rg, m, n, k, 132, MAX_SPLITS, placement).unwrap()
    }

    fn pick(rg: u32, m: u32, n: u32, k: u32) -> Choice {
        pick_for(Placement::BesideProducer, rg, m, n, k)
    }

    /// The measured best tiles of the H200 runs in bench/RESULTS.md (unbounded configs).
    #[test]
    fn picks_the_measured_best_tile_widths() {
        for (rg, m, n, k, bn, wk) in [
            (1, 1, 4096, 1024, 32, 4),  // Qwen3-0.6B qkv
            (1, 1, 1024, 2048, 16, 8),  // Qwen3-0.6B o
            (1, 16, 1024, 3072, 16, 8), // Qwen3-0.6B down
            (1, 1, 2048, 6144, 16, 8),  // Qwen3-1.7B down
            (1, 1, 6144, 4096, 32, 4),  // Qwen3-8B qkv
            (1, 1, 12288, 2048, 64, 2), // Qwen3-1.7B gate+up as one GEMV
            (2, 1, 3072, 1024, 32, 4),  // Qwen3-0.6B gate+up+silu
            (2, 1, 8192, 2048, 64, 2),  // Llama-3.2-1B gate+up+silu
        ] {
            let c = pick(rg, m, n, k);
            assert_eq!(
                (c.shape.bn, c.shape.wk, c.splits),
                (bn, wk, 1),
                "rg={rg} {m}x{n}x{k}: {c:?}"
            );
            assert!(!c.shape.bounded(), "beside a producer: {c:?}");
        }
    }

    /// The best tiles of the bounded configs on the standalone GEMV sweep of
    /// bench/RESULTS.md (H200, 132 SMs).
    #[test]
    fn a_gemv_alone_gets_the_bounded_configs_that_measured_best() {
        for (m, n, k, bn, wk, u) in [
            (1, 4096, 1024, 16, 8, 4),    // Qwen3-0.6B qkv
            (1, 16384, 2048, 64, 2, 4),   // Llama-3.2-1B gate+up as one GEMV
            (4, 12288, 2048, 64, 2, 4),   // Qwen3-1.7B gate+up
            (8, 4096, 12288, 16, 8, 4),   // Qwen3-8B down
            (16, 24576, 4096, 128, 1, 2), // Qwen3-8B gate+up: short batches at 16 tokens
            (16, 16384, 2048, 64, 2, 2),  // Llama-3.2-1B gate+up
            (16, 6144, 1024, 32, 4, 4),   // Qwen3-0.6B gate+up: no short-batch tile fills the GPU
            (16, 4096, 4096, 16, 8, 4),   // Qwen3-8B o
        ] {
            let c = pick_for(Placement::Alone, 1, m, n, k);
            assert_eq!(
                (c.shape.bn, c.shape.wk, c.shape.u, c.splits),
                (bn, wk, u, 1),
                "{m}x{n}x{k}: {c:?}"
            );
            assert!(c.shape.bounded(), "alone: {c:?}");
            assert_eq!(ConfigShape::of(&gemv::CONFIGS[c.config]), Some(c.shape));
        }
        // The fused gate/up kernel has no bounded configs: both placements agree.
        for (m, inter, k) in [(1, 3072, 1024), (16, 8192, 2048)] {
            assert_eq!(
                pick_for(Placement::Alone, 2, m, inter, k),
                pick_for(Placement::BesideProducer, 2, m, inter, k)
            );
        }
    }

    /// A pick's placement replaces the caller's; its config and split still apply on top.
    #[test]
    fn a_picked_placement_replaces_the_callers() {
        let (m, n, k) = (1, 4096, 4096); // Qwen3-8B o
        let with = |pick: Pick| {
            choose_with(
                gemv::CONFIGS,
                pick,
                1,
                m,
                n,
                k,
                132,
                MAX_SPLITS,
                Placement::BesideProducer,
            )
        };
        let beside = with(Pick::default()).unwrap();
        let alone = with(Pick {
            placement: Some(Placement::Alone),
            ..Pick::default()
        })
        .unwrap();
        assert!(!beside.shape.bounded(), "{beside:?}");
        assert_eq!(alone, pick_for(Placement::Alone, 1, m, n, k));
        assert!(alone.shape.bounded(), "{alone:?}");
        let both = with(Pick {
            config: Some(beside.config),
            splits: Some(2),
            placement: Some(Placement::Alone),
        })
        .unwrap();
        assert_eq!((both.config, both.splits), (beside.config, 2));
    }

    #[test]
    fn only_very_narrow_outputs_split() {
        let big = pick(1, 1, 151_936, 1024);
        assert_eq!(big.splits, 1);
        // 64 columns: 4 CTAs of the narrowest tile; split k to fill the GPU.
        let tiny = pick(1, 1, 64, 8192);
        assert!(tiny.splits > 1 && n_tiles(tiny, 64) * tiny.splits <= 132, "{tiny:?}");
        assert_eq!(
            choose(gemv::CONFIGS, 1, 1, 64, 8192, 132, 1, Placement::Alone)
                .unwrap()
                .splits,
            1
        );
    }

    fn n_tiles(c: Choice, n: u32) -> u32 {
        n.div_ceil(c.shape.bn)
    }
}
