//! Text in and out. (Temporary.)
use crate::error::{ModelError, Result};
use std::path::Path;

/// A tokenizer.
pub struct Tokenizer;

impl Tokenizer {
    /// From a folder.
    pub fn from_dir(_dir: &Path) -> Result<Option<Tokenizer>> {
        Ok(None)
    }
    /// Encode.
    pub fn encode(&self, _text: &str) -> Result<Vec<u32>> {
        Err(ModelError::Tokenizer("unavailable".into()))
    }
    /// Decode.
    pub fn decode(&self, _ids: &[u32]) -> Result<String> {
        Err(ModelError::Tokenizer("unavailable".into()))
    }
}
