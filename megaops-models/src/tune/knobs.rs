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
}

impl SiteChoice {
    /// The config and split as a GEMV planner override.
    pub fn pick(&self) -> megaops_kernels::gemv::plan::Pick {
        megaops_kernels::gemv::plan::Pick {
            config: self.config,
            splits: self.splits,
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

    /// Whether nothing is set (the planners' plan).
    pub fn is_default(&self) -> bool {
        self.streams.is_none()
            && self.fuse_norms.is_none()
            && self.fuse_rope.is_none()
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
                "mlp.down: config 4, splits 2, occupancy limit 1, release LastCta, 8 cuBLASLt chunks".to_string()
            ]
        );
        let tiles = back.decode_tiles();
        assert_eq!(tiles.act, 64);
        assert_eq!(tiles.qkv, DecodeTiles::default().qkv);
        assert_eq!(Family::parse("padding"), Some(Family::Padding));
    }
}
