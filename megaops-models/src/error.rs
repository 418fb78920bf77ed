//! [`ModelError`]: what loading or running a model can report, each with its context.

use std::path::PathBuf;

/// Result with [`ModelError`].
pub type Result<T, E = ModelError> = std::result::Result<T, E>;

/// Everything the model engine can report.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The runtime (device, launch, tiling, synchronisation) failed.
    #[error(transparent)]
    Runtime(#[from] megaops::Error),
    /// Reading a file failed (missing `config.json`, weights, tokenizer, …).
    #[error("cannot read `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A JSON file does not parse.
    #[error("`{path}` is not valid JSON for this purpose: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The configuration is inconsistent.
    #[error("invalid model config: {0}")]
    Config(String),
    /// The model or one of its settings is not supported.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// A checkpoint lacks a tensor.
    #[error("checkpoint `{path}` has no tensor `{name}`")]
    MissingTensor {
        /// The checkpoint folder.
        path: PathBuf,
        /// The tensor's checkpoint key.
        name: String,
    },
    /// A checkpoint tensor has the wrong shape.
    #[error("tensor `{name}` has shape {found:?}, the config needs {expected:?}")]
    TensorShape {
        /// The tensor's checkpoint key.
        name: String,
        /// Shape the config implies.
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// A checkpoint tensor has a dtype the engine cannot convert.
    #[error("tensor `{name}` has dtype {dtype}, supported: BF16, F16, F32")]
    TensorDtype {
        /// The tensor's checkpoint key.
        name: String,
        /// Its dtype as the file names it.
        dtype: String,
    },
    /// A safetensors file is malformed.
    #[error("`{path}`: {reason}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A request does not fit the model or its cache (prompt too long, batch too large, …).
    #[error("{0}")]
    Request(String),
    /// Tokenizing or detokenizing failed, or text was given without a tokenizer.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
}
