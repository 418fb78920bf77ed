//! What the macro emits when the kernel has errors: every error as a `compile_error!`,
//! the user's function with the helper attributes removed, and a stub of the launcher
//! module (`CONFIGS`, `launch`, `launch_with`, each `launch` taking any argument in each
//! parameter's place), so that the rest of the crate (and the IDE) still sees both and
//! one mistake gives one error, not follow-ups at every call site. The body keeps
//! compiling on its own: the axis names are bound to `0u32` and the first config's
//! constants are defined, as in a real expansion.

use crate::ast::Kernel;
use crate::{attr, paths};
use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote};
use syn::{Ident, ItemFn};

/// The errors followed by the stripped function and the launcher stub.
pub fn emit(errors: Vec<syn::Error>, kernel: Option<&Kernel>, item: Option<ItemFn>) -> TokenStream {
    let errors = errors.into_iter().map(|e| e.to_compile_error());
    let stub = item.as_ref().map(launcher_stub);
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
    quote!(#(#errors)* #item #stub)
}

/// `mod name` as the real expansion names it, with an empty `CONFIGS` and `launch` /
/// `launch_with` generic over one argument per parameter of `f` (never called: the crate
/// does not compile).
fn launcher_stub(f: &ItemFn) -> TokenStream {
    let (name, vis) = (&f.sig.ident, &f.vis);
    let cfgs = f.attrs.iter().filter(|a| a.path().is_ident("cfg"));
    let (launch_target, launch_options, config_info, result) = (
        paths::launch_target(),
        paths::launch_options(),
        paths::config_info(),
        paths::result(),
    );
    let n = f.sig.inputs.len();
    let types: Vec<Ident> = (0..n).map(|i| format_ident!("__MegaopsArg{}", i)).collect();
    let args: Vec<Ident> = (0..n)
        .map(|i| Ident::new(&format!("__megaops_arg{i}"), Span::mixed_site()))
        .collect();
    let (on, opts) = (
        Ident::new("__megaops_on", Span::mixed_site()),
        Ident::new("__megaops_opts", Span::mixed_site()),
    );
    quote! {
        #[cfg(not(target_arch = "nvptx64"))]
        #(#cfgs)*
        #[allow(dead_code, unused, non_camel_case_types, clippy::all)]
        #vis mod #name {
            pub const CONFIGS: &[#config_info] = &[];

            pub fn launch<#(#types),*>(#on: &impl #launch_target, #(#args: #types),*) -> #result<()> {
                ::core::unreachable!("`#[megaops::kernel]` reported errors for this kernel")
            }

            pub fn launch_with<#(#types),*>(
                #on: &impl #launch_target,
                #opts: &#launch_options,
                #(#args: #types),*
            ) -> #result<()> {
                ::core::unreachable!("`#[megaops::kernel]` reported errors for this kernel")
            }
        }
    }
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
