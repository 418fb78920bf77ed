//! Attention of a dense decoder: split-KV flash decoding with an in-kernel combine
//! ([`decode`]) and causal flash attention on tensor cores for prefill ([`prefill`]).

pub mod decode;
pub mod math;
pub mod prefill;
