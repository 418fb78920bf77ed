//! Graph-level autotuning (paper §3.3): the knobs of a decode step as data ([`knobs`]),
//! a coordinate-descent search over them ([`search`]), the search run on a model's
//! CUDA-graph decode step or its prefill ([`engine`]), and the cache of tuned plans on
//! disk ([`cache`]).
//!
//! Knobs are tuned jointly because each one's best value depends on what runs beside it:
//! a consumer GEMV's config decides how many of its waiting CTAs sit on its producer's
//! SMs, a release point when the next kernel may take them.

pub mod cache;
pub mod engine;
pub mod knobs;
pub mod search;

pub use cache::{CacheEntry, CacheKey, Lookup, TuneCache, workload_key};
pub use engine::{PlanTimer, PrefillTimer, Space, StepTimer, Tuned, tune};
pub use knobs::{Family, GemvPlacement, Release, Site, SiteChoice, SiteOverride, StepPlan};
pub use search::{Event, Knob, Move, Outcome, SearchOptions};
