//! The tuner's cache on disk: a JSON file of tuned [`StepPlan`]s, each under a
//! [`CacheKey`] (GPU name and SM count, model config hash, batch, workload, crate
//! version). An entry is used only when its whole key matches; an entry that matches but
//! for the crate version is stale and reported as such.

use super::knobs::StepPlan;
use crate::config::Config;
use crate::error::{ModelError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Environment variable naming the cache file (default [`default_path`]).
pub const CACHE_ENV: &str = "MEGAOPS_TUNE_CACHE";

/// What a tuned plan is valid for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheKey {
    /// The device's name (`Device::name`).
    pub gpu: String,
    /// Its SM count.
    pub sms: u32,
    /// [`config_hash`] of the model's config.
    pub model: String,
    /// Sequences per step.
    pub batch: usize,
    /// The workload (`short-decode`, `long-decode`).
    pub workload: String,
    /// The crate version that tuned it (configs and kernels change between versions).
    pub version: String,
}

/// The workload part of a [`CacheKey`]: the workload's name, with `+cublaslt` for a
/// prefill whose projections run cuBLASLt subkernels (its plan tunes chunk counts, not
/// `matmul` configs) and `+auto` (`+auto:<GFLOP>`) for one that picks per projection.
pub fn workload_key(workload: crate::bench::Workload, gemm: crate::layers::GemmBackend) -> String {
    use crate::layers::GemmBackend;
    match (workload, gemm) {
        (crate::bench::Workload::Prefill, GemmBackend::CublasLt { .. }) => format!("{}+cublaslt", workload.name()),
        (crate::bench::Workload::Prefill, GemmBackend::Auto { .. }) => {
            format!("{}+{}", workload.name(), gemm.name())
        }
        _ => workload.name().to_string(),
    }
}

impl CacheKey {
    /// The key of `config` at `batch` for `workload` on a device, with this crate's
    /// version.
    pub fn new(gpu: &str, sms: u32, config: &Config, batch: usize, workload: &str) -> CacheKey {
        CacheKey {
            gpu: gpu.to_string(),
            sms,
            model: config_hash(config),
            batch,
            workload: workload.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    fn same_but_version(&self, other: &CacheKey) -> bool {
        CacheKey {
            version: other.version.clone(),
            ..self.clone()
        } == *other
    }
}

/// One tuned plan and how it was found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// What it is valid for.
    pub key: CacheKey,
    /// The tuned plan.
    pub plan: StepPlan,
    /// Step time of the planners' plan, ms (of the layers tuned).
    pub start_ms: f64,
    /// Step time of the tuned plan, ms (of the layers tuned).
    pub tuned_ms: f64,
    /// Decoder layers the tuner ran.
    pub layers: usize,
    /// Seconds since the Unix epoch when it was tuned.
    pub tuned_at: u64,
    /// The knobs that moved, in order (`knob: from → to (before → after ms)`).
    #[serde(default)]
    pub moves: Vec<String>,
}

/// What a lookup found.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup<'a> {
    /// An entry for exactly this key.
    Hit(&'a CacheEntry),
    /// An entry for this key but another crate version: not used.
    Stale(&'a CacheEntry),
    /// Nothing for this key.
    Miss,
}

/// The cache file's contents.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TuneCache {
    /// Every entry, one per key.
    pub entries: Vec<CacheEntry>,
}

/// `$MEGAOPS_TUNE_CACHE`, else `$XDG_CACHE_HOME/megaops/tune.json`, else
/// `$HOME/.cache/megaops/tune.json`, else `megaops-tune.json` in the working directory.
pub fn default_path() -> PathBuf {
    if let Some(p) = std::env::var_os(CACHE_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    match base {
        Some(b) => b.join("megaops").join("tune.json"),
        None => PathBuf::from("megaops-tune.json"),
    }
}

/// A stable hash of the model's config (FNV-1a 64 over its JSON form), as 16 hex digits:
/// two models with the same dimensions share tuned plans, whatever their weights.
pub fn config_hash(config: &Config) -> String {
    let json = serde_json::to_string(config).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in json.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

impl TuneCache {
    /// Reads the cache at `path`; a missing file is an empty cache, an unreadable or
    /// malformed one an error naming the file (delete it, or set [`CACHE_ENV`] to another
    /// file).
    pub fn load(path: &Path) -> Result<TuneCache> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TuneCache::default()),
            Err(source) => {
                return Err(ModelError::Io {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        serde_json::from_str(&text).map_err(|source| ModelError::Json {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Writes the cache to `path` (creating its folder), through a temporary file renamed
    /// over it.
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| ModelError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| ModelError::Request(format!("tune cache: cannot serialise: {e}")))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(|source| ModelError::Io {
            path: tmp.clone(),
            source,
        })?;
        std::fs::rename(&tmp, path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The entry for `key`, or a stale one (same key, other version), or nothing.
    pub fn find(&self, key: &CacheKey) -> Lookup<'_> {
        if let Some(e) = self.entries.iter().find(|e| e.key == *key) {
            return Lookup::Hit(e);
        }
        match self.entries.iter().find(|e| e.key.same_but_version(key)) {
            Some(e) => Lookup::Stale(e),
            None => Lookup::Miss,
        }
    }

    /// Adds `entry`, replacing any entry of the same key or of a stale version of it.
    pub fn insert(&mut self, entry: CacheEntry) {
        self.entries.retain(|e| !e.key.same_but_version(&entry.key));
        self.entries.push(entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::knobs::{Site, SiteChoice};

    fn entry(key: CacheKey) -> CacheEntry {
        let mut plan = StepPlan::default();
        *plan.site_mut(Site::GateUp) = SiteChoice {
            config: Some(2),
            ..SiteChoice::default()
        };
        CacheEntry {
            key,
            plan,
            start_ms: 1.0,
            tuned_ms: 0.9,
            layers: 4,
            tuned_at: 0,
            moves: vec!["mlp.gate_up.config: 0 → 2".into()],
        }
    }

    /// A prefill plan for cuBLASLt subkernels is keyed apart from the Rust GEMMs' one;
    /// decode keys do not depend on the prefill's GEMMs.
    #[test]
    fn cublaslt_prefill_plans_have_their_own_key() {
        use crate::bench::Workload;
        use crate::layers::GemmBackend;
        let lt = GemmBackend::CublasLt { chunks: 4 };
        assert_eq!(workload_key(Workload::Prefill, GemmBackend::Rust), "prefill");
        assert_eq!(workload_key(Workload::Prefill, lt), "prefill+cublaslt");
        assert_eq!(
            workload_key(Workload::Prefill, GemmBackend::CublasLt { chunks: 8 }),
            "prefill+cublaslt",
            "the chunk counts are the plan's"
        );
        assert_eq!(workload_key(Workload::ShortDecode, lt), "short-decode");
        assert_eq!(workload_key(Workload::Prefill, GemmBackend::AUTO), "prefill+auto");
        let at_half = GemmBackend::Auto { min_flops: 500_000_000 };
        assert_eq!(workload_key(Workload::Prefill, at_half), "prefill+auto:0.5");
        assert_eq!(workload_key(Workload::LongDecode, at_half), "long-decode");
    }

    #[test]
    fn writes_reloads_and_rejects_stale_or_other_keys() {
        let dir = std::env::temp_dir().join(format!("megaops-tune-cache-{}", std::process::id()));
        let path = dir.join("sub").join("tune.json");
        let config = crate::presets::preset("tiny").expect("preset");
        let key = CacheKey::new("GPU X", 132, &config, 4, "short-decode");
        assert_eq!(TuneCache::load(&path).expect("missing is empty"), TuneCache::default());

        let mut cache = TuneCache::default();
        cache.insert(entry(key.clone()));
        cache.save(&path).expect("save");
        let back = TuneCache::load(&path).expect("load");
        assert_eq!(back, cache);
        assert_eq!(back.find(&key), Lookup::Hit(&cache.entries[0]));

        // Any other part of the key misses.
        for other in [
            CacheKey {
                batch: 8,
                ..key.clone()
            },
            CacheKey {
                sms: 114,
                ..key.clone()
            },
            CacheKey {
                gpu: "GPU Y".into(),
                ..key.clone()
            },
            CacheKey {
                workload: "long-decode".into(),
                ..key.clone()
            },
            CacheKey::new(
                "GPU X",
                132,
                &crate::presets::preset("tiny-llama").expect("preset"),
                4,
                "short-decode",
            ),
        ] {
            assert_eq!(back.find(&other), Lookup::Miss, "{other:?}");
        }
        // Another crate version: found but stale, and never a hit.
        let old = CacheKey {
            version: "0.0.1".into(),
            ..key.clone()
        };
        let mut stale = TuneCache::default();
        stale.insert(entry(old));
        stale.save(&path).expect("save");
        let back = TuneCache::load(&path).expect("load");
        assert!(matches!(back.find(&key), Lookup::Stale(e) if e.key.version == "0.0.1"));
        // Re-tuning replaces the stale entry.
        let mut back = back;
        back.insert(entry(key.clone()));
        assert_eq!(back.entries.len(), 1);
        assert!(matches!(back.find(&key), Lookup::Hit(_)));

        // A file that is not a cache is an error naming it.
        std::fs::write(&path, "{ not json").expect("write");
        let e = TuneCache::load(&path).expect_err("malformed");
        assert!(e.to_string().contains("tune.json"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_config_hash_depends_on_dimensions_only() {
        let a = crate::presets::preset("tiny").expect("preset");
        let mut b = a.clone();
        assert_eq!(config_hash(&a), config_hash(&b));
        b.num_hidden_layers += 1;
        assert_ne!(config_hash(&a), config_hash(&b));
        assert_eq!(config_hash(&a).len(), 16);
    }
}
