//! What the macro emits when the kernel has errors: every error as a `compile_error!`,
//! and the user's function with the helper attributes removed, so that the rest of the
//! crate (and the IDE) still sees it and one mistake does not bury the user under
//! follow-up errors. The body keeps compiling on its own: the axis names are bound to
//! `0u32` and the first config's constants are defined, as in a real expansion.

use crate::ast::Kernel;
use crate::attr;
use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use quote::{ToTokens, quote};
use syn::{Ident, ItemFn};

/// The errors followed by the stripped function.
pub fn emit(errors: Vec<syn::Error>, kernel: Option<&Kernel>, item: Option<ItemFn>) -> TokenStream {
    let errors = errors.into_iter().map(|e| e.to_compile_error());
    let item = item.map(|mut f| {
        f.attrs.retain(|a| !attr::is_config(a));
        if let Ok(block) = syn::parse2(strip_prefetch(f.block.to_token_stream())) {
            *f.block = block;
        }
        if let Some(k) = kernel {
            // Names that would hide a parameter stay unbound (that clash is reported).
            let params: Vec<&Ident> = k.params.iter().filter_map(|p| p.name.as_ref()).collect();
            let consts = k
                .configs
                .first()
                .iter()
                .flat_map(|c| &c.consts)
                .filter(|c| !params.contains(&&c.name))
                .filter_map(|c| {
                    let (name, ty, value) = (&c.name, c.ty.as_ref()?, &c.value);
                    Some(quote!(const #name: #ty = #value;))
                })
                .collect::<Vec<_>>();
            let axes: Vec<Ident> = axis_names(k).into_iter().filter(|a| !params.contains(&a)).collect();
            let stmts = &f.block.stmts;
            let body = quote! {{
                #(#consts)*
                #(let #axes: u32 = 0;)*
                #(#stmts)*
            }};
            if let Ok(block) = syn::parse2(body) {
                *f.block = block;
            }
        }
        quote!(#[allow(dead_code, unused)] #f)
    });
    quote!(#(#errors)* #item)
}

/// Every name the annotation uses as an axis (declared, selecting a tile or splitting).
fn axis_names(k: &Kernel) -> Vec<Ident> {
    let mut names: Vec<Ident> = Vec::new();
    let mut add = |i: &Ident| {
        if !names.contains(i) {
            names.push(i.clone());
        }
    };
    for a in k.tiles.iter().flatten() {
        add(&a.name);
    }
    for s in &k.syncs {
        for c in &s.decl.tile {
            if let attr::TileCoord::Axis { axis, .. } = c {
                add(axis);
            }
        }
        if let Some(split) = &s.split {
            add(split);
        }
    }
    names
}

/// `tokens` without any `#[prefetch]` / `#[prefetch(...)]`, at any depth.
pub fn strip_prefetch(tokens: TokenStream) -> TokenStream {
    let mut out = Vec::new();
    let mut iter = tokens.into_iter().peekable();
    while let Some(tt) = iter.next() {
        match tt {
            TokenTree::Punct(p) if p.as_char() == '#' => {
                let is_prefetch = matches!(iter.peek(), Some(TokenTree::Group(g))
                    if g.delimiter() == Delimiter::Bracket
                        && matches!(g.stream().into_iter().next(), Some(TokenTree::Ident(i)) if i == "prefetch"));
                if is_prefetch {
                    iter.next();
                } else {
                    out.push(TokenTree::Punct(p));
                }
            }
            TokenTree::Group(g) => {
                let mut inner = Group::new(g.delimiter(), strip_prefetch(g.stream()));
                inner.set_span(g.span());
                out.push(TokenTree::Group(inner));
            }
            other => out.push(other),
        }
    }
    out.into_iter().collect()
}
