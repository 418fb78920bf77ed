//! Error collection: every phase records its errors here instead of stopping at the
//! first, so the user sees all of them at once (serde_derive's `Ctxt`).

use proc_macro2::Span;
use quote::ToTokens;
use std::fmt::Display;

/// The errors found so far, in the order they were found.
#[derive(Default)]
pub struct Ctxt {
    errors: Vec<syn::Error>,
}

impl Ctxt {
    /// An empty collection.
    pub fn new() -> Self {
        Ctxt::default()
    }

    /// Records an error spanning the tokens of `node`.
    pub fn error_spanned_by<T: ToTokens, M: Display>(&mut self, node: T, msg: M) {
        self.errors.push(syn::Error::new_spanned(node.into_token_stream(), msg));
    }

    /// Records an error at `span`.
    pub fn error_at<M: Display>(&mut self, span: Span, msg: M) {
        self.errors.push(syn::Error::new(span, msg));
    }

    /// Records an error syn produced while parsing.
    pub fn syn_error(&mut self, err: syn::Error) {
        self.errors.push(err);
    }

    /// Whether nothing went wrong.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// The errors, consuming the collection.
    pub fn into_errors(self) -> Vec<syn::Error> {
        self.errors
    }

    /// The errors recorded so far (for tests).
    #[cfg(test)]
    pub fn messages(&self) -> Vec<String> {
        self.errors
            .iter()
            .flat_map(|e| e.clone().into_iter().map(|e| e.to_string()))
            .collect()
    }
}
