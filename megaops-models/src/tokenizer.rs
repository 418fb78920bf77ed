//! [`Tokenizer`]: text to token ids and back, from a checkpoint's `tokenizer.json`
//! (Hugging Face `tokenizers`, built with its pure-Rust regex engine).

use crate::error::{ModelError, Result};
use std::path::{Path, PathBuf};

/// The tokenizer file of a Hugging Face model folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// A Hugging Face tokenizer (`tokenizer.json`: normalizer, pre-tokenizer, model,
/// post-processor, decoder), as transformers' fast tokenizers run it.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl Tokenizer {
    /// Reads a `tokenizer.json` file: [`ModelError::Io`] when it cannot be read,
    /// [`ModelError::Tokenizer`] (naming the file) when it does not parse.
    pub fn from_file(path: &Path) -> Result<Tokenizer> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let inner = text
            .parse::<tokenizers::Tokenizer>()
            .map_err(|e| ModelError::Tokenizer(format!("`{}` does not load: {e}", path.display())))?;
        Ok(Tokenizer {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// The tokenizer of model folder `dir` (its `tokenizer.json`), or `None` when the
    /// folder has none (a model run on token ids only).
    pub fn from_dir(dir: &Path) -> Result<Option<Tokenizer>> {
        let path = dir.join(TOKENIZER_FILE);
        match std::fs::metadata(&path) {
            Ok(_) => Tokenizer::from_file(&path).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ModelError::Io { path, source }),
        }
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The token ids of `text`, with the special tokens the tokenizer's post-processor
    /// adds (Llama-3's `<|begin_of_text|>`; none for Qwen3), as transformers'
    /// `tokenizer(text)` does.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_with(text, true)
    }

    /// The token ids of `text`, with or without the post-processor's special tokens.
    pub fn encode_with(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.inner
            .encode(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| ModelError::Tokenizer(format!("cannot encode {:?}: {e}", preview(text))))
    }

    /// The text of `ids`, special tokens included (transformers' `decode` default). Ids
    /// the vocabulary lacks (the padding rows of a model's embedding) are skipped, as
    /// transformers skips them.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| ModelError::Tokenizer(format!("cannot decode {} ids: {e}", ids.len())))
    }

    /// Tokens in the vocabulary, added (special) tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of `token` (a vocabulary entry or an added token such as `<|im_end|>`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The `tokenizers` tokenizer, for anything this wrapper does not offer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// The first characters of `text`, for an error message.
fn preview(text: &str) -> String {
    const MAX: usize = 40;
    match text.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}
