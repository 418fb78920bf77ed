//! The knobs of a decode step as data: [`Site`]s (the operators of a layer, shared by
//! every layer, plus the LM head), the [`SiteChoice`] of each, and the [`StepPlan`] a
//! decode step launches with. A plan with nothing set is what the planners choose.

use crate::layers::DecodeTiles;
use megaops::ReleaseNext;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An operator of the decode step whose kernels share knobs: the same operator in every
/// (homogeneous) layer is one site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Site {
    /// The layers' `add_rmsnorm` / `rmsnorm` kernels (both norms of a layer).
    Norm,
    /// The QKV projection GEMV.
    Qkv,
    /// QK-norm + RoPE + cache write.
    Rope,
    /// Decode attention (split-KV).
    Attention,
    /// The attention output projection GEMV.
    OProj,
    /// The MLP's fused gate/up + SiLU·mul GEMV.
    GateUp,
    /// The MLP's down projection GEMV.
    Down,
    /// The LM head GEMV.
    LmHead,
}

impl Site {
    /// Every site, in step order.
    pub const ALL: [Site; 8] = [
        Site::Norm,
        Site::Qkv,
        Site::Rope,
        Site::Attention,
        Site::OProj,
        Site::GateUp,
        Site::Down,
        Site::LmHead,
    ];

    /// The name in knob names and logs (`mlp.down`, …).
    pub fn name(self) -> &'static str {
        match self {
            Site::Norm => "norm",
            Site::Qkv => "attn.qkv",
            Site::Rope => "attn.rope",
            Site::Attention => "attn.core",
            Site::OProj => "attn.o",
            Site::GateUp => "mlp.gate_up",
            Site::Down => "mlp.down",
            Site::LmHead => "lm_head",
        }
    }

    /// Parses [`Site::name`].
    pub fn parse(s: &str) -> Option<Site> {
        Site::ALL.into_iter().find(|site| site.name() == s)
    }

    /// The [`SiteOverride`] keys whose choices the site's launches read (the others would
    /// change nothing, so an override refuses them): every site takes `occupancy` and
    /// `release`; the projections and the LM head their GEMV's `config` and `placement`,
    /// the projections also `splits` (split-K) and `chunks` (cuBLASLt prefill GEMMs), the
    /// producers of the decode path's column-tiled tensors `tile`; the norms `config`;
    /// decode attention `splits`.
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            Site::Norm => &["config", "occupancy", "release"],
            Site::Qkv | Site::OProj | Site::GateUp => &KEYS,
            Site::Down => &["config", "splits", "occupancy", "release", "chunks", "placement"],
            Site::Rope => &["occupancy", "release"],
            Site::Attention => &["splits", "occupancy", "release"],
            Site::LmHead => &["config", "occupancy", "release", "tile", "placement"],
        }
    }
}

/// Knob families: what the ablation holds at the planners' values, one family at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Tile configs (CTA tile shape, warps, batch length).
    TileConfig,
    /// Weight prefetch depth before the input wait (`PF` of the GEMV configs).
    Prefetch,
    /// SMEM padding: the occupancy limit `c` (CTAs per SM) of a launch.
    Padding,
    /// When a launch releases the next one (`ReleaseNext`).
    Release,
    /// Split-K of the GEMVs and split-KV of decode attention.
    Split,
    /// Streams of the AsyncStream.
    Streams,
    /// Columns per data tile of the decode path's column-tiled tensors.
    DataTile,
    /// Row chunks of the prefill's cuBLASLt subkernels (`--prefill-gemm cublaslt`).
    Chunks,
    /// Whether the decode step runs its add + RMSNorms inside the following projections.
    Fusion,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 9] = [
        Family::TileConfig,
        Family::Prefetch,
        Family::Padding,
        Family::Release,
        Family::Split,
        Family::Streams,
        Family::DataTile,
        Family::Chunks,
        Family::Fusion,
    ];

    /// The name on the command line and in the ablation table.
    pub fn name(self) -> &'static str {
        match self {
            Family::TileConfig => "config",
            Family::Prefetch => "prefetch",
            Family::Padding => "padding",
            Family::Release => "release",
            Family::Split => "split",
            Family::Streams => "streams",
            Family::DataTile => "tiles",
            Family::Chunks => "chunks",
            Family::Fusion => "fusion",
        }
    }

    /// Parses [`Family::name`].
    pub fn parse(s: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == s)
    }
}

/// [`ReleaseNext`] as stored in a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Release {
    /// `ReleaseNext::FirstCta`.
    FirstCta,
    /// `ReleaseNext::LastCta`.
    LastCta,
}

impl From<Release> for ReleaseNext {
    fn from(r: Release) -> ReleaseNext {
        match r {
            Release::FirstCta => ReleaseNext::FirstCta,
            Release::LastCta => ReleaseNext::LastCta,
        }
    }
}

/// [`Placement`](megaops_kernels::gemv::plan::Placement) as stored in a plan: which
/// configs the GEMV planner considers for a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GemvPlacement {
    /// `Placement::Alone`: bounded configs (two CTAs per SM) where the kernel has them.
    Alone,
    /// `Placement::BesideProducer`: unbounded configs (one CTA per SM).
    Beside,
}

impl GemvPlacement {
    /// The name in plans and on the command line (`alone`, `beside`).
    pub fn name(self) -> &'static str {
        match self {
            GemvPlacement::Alone => "alone",
            GemvPlacement::Beside => "beside",
        }
    }
}

impl From<GemvPlacement> for megaops_kernels::gemv::plan::Placement {
    fn from(p: GemvPlacement) -> Self {
        match p {
            GemvPlacement::Alone => Self::Alone,
            GemvPlacement::Beside => Self::BesideProducer,
        }
    }
}

/// What one site's launches use; `None` leaves a choice to the planner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteChoice {
    /// Index into the kernel's `CONFIGS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<usize>,
    /// Split-K (GEMVs; 1 is the kernel without split) or split-KV (decode attention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub splits: Option<u32>,
    /// Occupancy limit `c` (SMEM padding); 0 is no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupancy_limit: Option<u32>,
    /// When the launch releases the next one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<Release>,
    /// Columns per data tile of the site's output, for the sites whose decode output is
    /// tiled by columns (QKV, o_proj, gate/up, LM head; see [`DecodeTiles`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_tile: Option<u32>,
    /// At most this many row chunks of the site's GEMM when the prefill runs cuBLASLt
    /// subkernels ([`PrefillGemm::CublasLt`](crate::layers::PrefillGemm::CublasLt)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<u32>,
    /// The placement the GEMV planner plans the site's decode GEMV for, when `config` is
    /// unset (the sites' own rule where `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<GemvPlacement>,
}

impl SiteChoice {
    /// The config, split and placement as a GEMV planner override.
    pub fn pick(&self) -> megaops_kernels::gemv::plan::Pick {
        megaops_kernels::gemv::plan::Pick {
            config: self.config,
            splits: self.splits,
            placement: self.placement.map(Into::into),
        }
    }

    /// This choice with every field that `over` sets taken from `over`.
    pub fn overridden_by(self, over: SiteChoice) -> SiteChoice {
        SiteChoice {
            config: over.config.or(self.config),
            splits: over.splits.or(self.splits),
            occupancy_limit: over.occupancy_limit.or(self.occupancy_limit),
            release: over.release.or(self.release),
            data_tile: over.data_tile.or(self.data_tile),
            chunks: over.chunks.or(self.chunks),
            placement: over.placement.or(self.placement),
        }
    }

    /// `opts` of a launch at `site`, named after it ([`Site::name`], which profiles and
    /// traces show), with this choice's occupancy limit and release point applied (the
    /// config is the caller's: it may come from a planner).
    pub fn apply(&self, site: Site, mut opts: megaops::LaunchOptions) -> megaops::LaunchOptions {
        opts.site = Some(site.name());
        if let Some(c) = self.occupancy_limit {
            opts.occupancy_limit = (c > 0).then_some(c);
        }
        if let Some(r) = self.release {
            opts.release_next = r.into();
        }
        opts
    }
}

/// One site's choices given by hand, as `--site` takes them:
/// `<site>:<key>=<value>[,<key>=<value>…]`, e.g. `mlp.down:placement=alone` or
/// `mlp.gate_up:config=0,splits=2`. Keys: `config`, `splits`, `occupancy` (0: no limit),
/// `release` (`first_cta`, `last_cta`), `tile` (columns per data tile), `chunks`,
/// `placement` (`alone`, `beside`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteOverride {
    /// The site.
    pub site: Site,
    /// The fields it sets; the others stay as they were.
    pub choice: SiteChoice,
}

/// Every key of a [`SiteOverride`].
const KEYS: [&str; 7] = [
    "config",
    "splits",
    "occupancy",
    "release",
    "tile",
    "chunks",
    "placement",
];

/// Tile configs of the norms (`rmsnorm` and `add_rmsnorm` share one list).
const NORM_CONFIGS: usize = megaops_kernels::norm::rmsnorm::CONFIGS.len();

impl std::str::FromStr for SiteOverride {
    type Err = String;

    fn from_str(s: &str) -> Result<SiteOverride, String> {
        let names = || Site::ALL.map(Site::name).join(", ");
        let (site, fields) = s
            .split_once(':')
            .ok_or_else(|| format!("`{s}`: expected <site>:<key>=<value>,… (sites: {})", names()))?;
        let site = Site::parse(site).ok_or_else(|| format!("`{site}` is not a site (sites: {})", names()))?;
        let mut choice = SiteChoice::default();
        for field in fields.split(',') {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| format!("`{field}`: expected <key>=<value>"))?;
            if KEYS.contains(&key) && !site.keys().contains(&key) {
                return Err(format!(
                    "`{key}` is not a knob of {} (its knobs: {})",
                    site.name(),
                    site.keys().join(", ")
                ));
            }
            let number = || {
                value
                    .parse::<u32>()
                    .map_err(|_| format!("`{key}={value}`: expected a whole number"))
            };
            match key {
                "config" if site == Site::Norm && number()? as usize >= NORM_CONFIGS => {
                    return Err(format!("`{field}`: the norms' configs are 0 to {}", NORM_CONFIGS - 1));
                }
                "config" => choice.config = Some(number()? as usize),
                "splits" if number()? == 0 => return Err(format!("`{field}`: splits start at 1")),
                "splits" => choice.splits = Some(number()?),
                "occupancy" => choice.occupancy_limit = Some(number()?),
                "tile" if number()? == 0 => return Err(format!("`{field}`: a data tile has columns")),
                "tile" => choice.data_tile = Some(number()?),
                "chunks" if number()? == 0 => return Err(format!("`{field}`: chunks start at 1")),
                "chunks" => choice.chunks = Some(number()?),
                "release" => {
                    choice.release = Some(match value {
                        "first_cta" => Release::FirstCta,
                        "last_cta" => Release::LastCta,
                        _ => return Err(format!("`{field}`: release is first_cta or last_cta")),
                    })
                }
                "placement" => {
                    choice.placement = Some(match value {
                        "alone" => GemvPlacement::Alone,
                        "beside" => GemvPlacement::Beside,
                        _ => return Err(format!("`{field}`: placement is alone or beside")),
                    })
                }
                _ => return Err(format!("`{key}` is not a site knob ({})", KEYS.join(", "))),
            }
        }
        Ok(SiteOverride { site, choice })
    }
}

impl std::fmt::Display for SiteOverride {
    /// The form [`SiteOverride`] parses.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.choice;
        let mut parts = Vec::new();
        let mut add = |key: &str, v: Option<String>| {
            if let Some(v) = v {
                parts.push(format!("{key}={v}"));
            }
        };
        add("config", c.config.map(|v| v.to_string()));
        add("splits", c.splits.map(|v| v.to_string()));
        add("occupancy", c.occupancy_limit.map(|v| v.to_string()));
        add(
            "release",
            c.release.map(|r| {
                match r {
                    Release::FirstCta => "first_cta",
                    Release::LastCta => "last_cta",
                }
                .to_string()
            }),
        );
        add("tile", c.data_tile.map(|v| v.to_string()));
        add("chunks", c.chunks.map(|v| v.to_string()));
        add("placement", c.placement.map(|p| p.name().to_string()));
        write!(f, "{}:{}", self.site.name(), parts.join(","))
    }
}

/// The knob values of a decode step: streams and one [`SiteChoice`] per site. The
/// default (nothing set) runs the planners' choices.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepPlan {
    /// Streams of the overlapping AsyncStream (`None`: the caller's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams: Option<usize>,
    /// Per-site choices; a missing site is left to the planners.
    #[serde(default)]
    pub sites: BTreeMap<Site, SiteChoice>,
    /// Whether the decoder layers run their add + RMSNorms inside the projections that
    /// follow, where the GEMV planner can fuse them (`None`: no, each is its own kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuse_norms: Option<bool>,
    /// Whether decode attention runs the QK-norm, RoPE and cache write itself
    /// (`None`: yes, one kernel instead of two).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuse_rope: Option<bool>,
    /// Whether the decode step runs each add + RMSNorm behind the projection before it
    /// (the output and down projections; `None`: `model::DEFAULT_NORM_AFTER`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub norm_after: Option<bool>,
}

impl StepPlan {
    /// The choice of `site` (all `None` when unset).
    pub fn site(&self, site: Site) -> SiteChoice {
        self.sites.get(&site).copied().unwrap_or_default()
    }

    /// The choice of `site`, mutable (inserted unset if missing).
    pub fn site_mut(&mut self, site: Site) -> &mut SiteChoice {
        self.sites.entry(site).or_default()
    }

    /// The decode pass's column data tiles: each tiled site's `data_tile`, the default
    /// where unset.
    pub fn decode_tiles(&self) -> DecodeTiles {
        let d = DecodeTiles::default();
        let cols = |site: Site, default: u32| self.site(site).data_tile.unwrap_or(default);
        DecodeTiles {
            qkv: cols(Site::Qkv, d.qkv),
            attn_out: cols(Site::OProj, d.attn_out),
            act: cols(Site::GateUp, d.act),
            logits: cols(Site::LmHead, d.logits),
        }
    }

    /// Applies `over`: the fields it sets replace the site's.
    pub fn override_site(&mut self, over: SiteOverride) {
        let site = self.site_mut(over.site);
        *site = site.overridden_by(over.choice);
    }

    /// Whether nothing is set (the planners' plan).
    pub fn is_default(&self) -> bool {
        self.streams.is_none()
            && self.fuse_norms.is_none()
            && self.fuse_rope.is_none()
            && self.norm_after.is_none()
            && self.sites.values().all(|c| *c == SiteChoice::default())
    }

    /// One line per set choice, e.g. `mlp.down: config 3, splits 2`.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(s) = self.streams {
            out.push(format!("streams: {s}"));
        }
        if let Some(f) = self.fuse_norms {
            out.push(format!("norm fusion: {}", if f { "on" } else { "off" }));
        }
        if let Some(f) = self.fuse_rope {
            out.push(format!("rope fusion: {}", if f { "on" } else { "off" }));
        }
        if let Some(f) = self.norm_after {
            out.push(format!(
                "norms behind the projections: {}",
                if f { "on" } else { "off" }
            ));
        }
        for (site, c) in &self.sites {
            let mut parts = Vec::new();
            if let Some(v) = c.config {
                parts.push(format!("config {v}"));
            }
            if let Some(v) = c.splits {
                parts.push(format!("splits {v}"));
            }
            if let Some(v) = c.occupancy_limit {
                parts.push(if v == 0 {
                    "no occupancy limit".into()
                } else {
                    format!("occupancy limit {v}")
                });
            }
            if let Some(r) = c.release {
                parts.push(format!("release {r:?}"));
            }
            if let Some(v) = c.data_tile {
                parts.push(format!("data tiles of {v} columns"));
            }
            if let Some(v) = c.chunks {
                parts.push(format!("{v} cuBLASLt chunks"));
            }
            if let Some(p) = c.placement {
                parts.push(format!("planned {}", p.name()));
            }
            if !parts.is_empty() {
                out.push(format!("{}: {}", site.name(), parts.join(", ")));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_round_trips_through_json_and_applies_its_options() {
        let mut plan = StepPlan {
            streams: Some(3),
            ..StepPlan::default()
        };
        *plan.site_mut(Site::Down) = SiteChoice {
            config: Some(4),
            splits: Some(2),
            occupancy_limit: Some(1),
            release: Some(Release::LastCta),
            data_tile: None,
            chunks: Some(8),
            placement: Some(GemvPlacement::Alone),
        };
        plan.site_mut(Site::GateUp).data_tile = Some(64);
        let json = serde_json::to_string(&plan).expect("json");
        assert!(json.contains("\"down\""), "{json}");
        let back: StepPlan = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, plan);
        assert!(!back.is_default() && StepPlan::default().is_default());
        let opts = back
            .site(Site::Down)
            .apply(Site::Down, megaops::LaunchOptions::config(4));
        assert_eq!(opts.occupancy_limit, Some(1));
        assert_eq!(opts.site, Some("mlp.down"));
        assert_eq!(opts.release_next, ReleaseNext::LastCta);
        assert_eq!(back.site(Site::Qkv), SiteChoice::default());
        assert_eq!(
            back.describe(),
            vec![
                "streams: 3".to_string(),
                "mlp.gate_up: data tiles of 64 columns".to_string(),
                "mlp.down: config 4, splits 2, occupancy limit 1, release LastCta, 8 cuBLASLt chunks, planned alone"
                    .to_string()
            ]
        );
        let tiles = back.decode_tiles();
        assert_eq!(tiles.act, 64);
        assert_eq!(tiles.qkv, DecodeTiles::default().qkv);
        assert_eq!(Family::parse("padding"), Some(Family::Padding));
    }

    #[test]
    fn site_overrides_parse_print_and_apply() {
        assert_eq!(
            "norm:config=5".parse::<SiteOverride>(),
            Err("`config=5`: the norms' configs are 0 to 4".to_string())
        );
        assert_eq!(
            "norm:config=4".parse::<SiteOverride>().map(|o| o.choice.config),
            Ok(Some(4))
        );
        // A key the site's launches do not read is refused, not silently ignored.
        assert_eq!(
            "attn.rope:config=1".parse::<SiteOverride>(),
            Err("`config` is not a knob of attn.rope (its knobs: occupancy, release)".to_string())
        );
        assert!("attn.core:config=0".parse::<SiteOverride>().is_err());
        assert!("mlp.down:tile=64".parse::<SiteOverride>().is_err());
        assert!("lm_head:splits=2".parse::<SiteOverride>().is_err());
        assert!("norm:placement=alone".parse::<SiteOverride>().is_err());
        assert!("attn.core:splits=4".parse::<SiteOverride>().is_ok());
        assert!("lm_head:tile=64,placement=alone".parse::<SiteOverride>().is_ok());
        let over: SiteOverride = "mlp.down:placement=alone,splits=2".parse().expect("parse");
        assert_eq!(over.site, Site::Down);
        assert_eq!(over.choice.placement, Some(GemvPlacement::Alone));
        assert_eq!(over.choice.splits, Some(2));
        assert_eq!(over.to_string(), "mlp.down:splits=2,placement=alone");
        let all: SiteOverride =
            "attn.o:config=3,splits=1,occupancy=0,release=last_cta,tile=64,chunks=2,placement=beside"
                .parse()
                .expect("every key");
        assert_eq!(all.to_string().parse::<SiteOverride>(), Ok(all));
        let mut plan = StepPlan::default();
        plan.site_mut(Site::Down).config = Some(7);
        plan.site_mut(Site::Down).splits = Some(4);
        plan.override_site(over);
        let down = plan.site(Site::Down);
        assert_eq!(
            (down.config, down.splits, down.placement),
            (Some(7), Some(2), Some(GemvPlacement::Alone))
        );
        assert_eq!(
            down.pick().placement,
            Some(megaops_kernels::gemv::plan::Placement::Alone)
        );
        for (bad, says) in [
            ("down:config=1", "is not a site"),
            ("mlp.down", "expected <site>:"),
            ("mlp.down:config", "expected <key>=<value>"),
            ("mlp.down:config=x", "whole number"),
            ("mlp.down:splits=0", "start at 1"),
            ("mlp.down:placement=near", "alone or beside"),
            ("mlp.down:warps=2", "is not a site knob"),
        ] {
            let e = bad.parse::<SiteOverride>().expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
