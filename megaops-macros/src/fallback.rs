//! What the macro emits when the kernel has errors: every error as a `compile_error!`,
//! the user's function with the helper attributes removed, and (for a free function) a
//! stub of its launcher module, so that the rest of the crate (and the IDE) still sees
//! both and one mistake gives one error, not follow-ups in the body or at every call
//! site (as thiserror's `fallback.rs`). The body keeps compiling on its own: the axis
//! names are bound to `0u32` and the first config's constants are defined, as in a real
//! expansion.

use crate::ast::{Kernel, ParamKind};
use crate::{attr, paths};
use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote};
use syn::{Ident, ItemFn};

/// The errors followed by the stripped function and, when `stub` (the function is free:
/// an `impl` or `trait` block cannot hold a module), the launcher stub.
pub fn emit(errors: Vec<syn::Error>, kernel: Option<&Kernel>, item: Option<ItemFn>, stub: bool) -> TokenStream {
    let errors = errors.into_iter().map(|e| e.to_compile_error());
    let stub = match (&item, stub) {
        (Some(f), true) => launcher_stub(f, kernel),
        _ => TokenStream::new(),
    };
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

/// `mod name` as the real expansion names it (host only), with empty `CONFIGS` and
/// `CONSTS`, a `Consts` with the first config's typed constants, and `launch` /
/// `launch_with` taking what the call sites pass: a pointer parameter takes `&A` /
/// `&mut A` for any `A` (so `&mut t` and a `&mut` variable are reborrowed, not moved), a
/// value of a primitive type that type (so literals infer as in the real launcher), any
/// other value any `A`. Never called: the crate does not compile.
fn launcher_stub(f: &ItemFn, kernel: Option<&Kernel>) -> TokenStream {
    let (name, vis) = (&f.sig.ident, &f.vis);
    let cfgs = f.attrs.iter().filter(|a| a.path().is_ident("cfg"));
    let (launch_target, launch_options, config_info, result) = (
        paths::launch_target(),
        paths::launch_options(),
        paths::config_info(),
        paths::result(),
    );
    let mut generics: Vec<TokenStream> = Vec::new();
    let mut args: Vec<TokenStream> = Vec::new();
    for (i, input) in f.sig.inputs.iter().enumerate() {
        let arg = Ident::new(&format!("__megaops_arg{i}"), Span::mixed_site());
        let generic = format_ident!("__MegaopsArg{}", i);
        let ty = match input {
            syn::FnArg::Typed(pt) => match crate::ast::classify(&pt.ty) {
                ParamKind::ConstPtr(_) => Some(quote!(&#generic)),
                ParamKind::MutPtr(_) => Some(quote!(&mut #generic)),
                ParamKind::Value if crate::expand::primitive(&pt.ty).is_some() => {
                    let ty = &pt.ty;
                    args.push(quote!(#arg: #ty));
                    continue;
                }
                _ => None,
            },
            syn::FnArg::Receiver(_) => None,
        };
        match ty {
            Some(ty) => {
                args.push(quote!(#arg: #ty));
                generics.push(quote!(#generic: ?Sized));
            }
            None => {
                args.push(quote!(#arg: #generic));
                generics.push(quote!(#generic));
            }
        }
    }
    let fields = kernel
        .and_then(|k| k.configs.first())
        .iter()
        .flat_map(|c| &c.consts)
        .filter_map(|c| {
            let (name, ty) = (&c.name, c.ty.as_ref()?);
            crate::expand::primitive(ty)?;
            Some(quote!(pub #name: #ty,))
        })
        .collect::<Vec<_>>();
    let (on, opts) = (
        Ident::new("__megaops_on", Span::mixed_site()),
        Ident::new("__megaops_opts", Span::mixed_site()),
    );
    let unreachable = quote!(::core::unreachable!(
        "`#[megaops::kernel]` reported errors for this kernel"
    ));
    quote! {
        #[cfg(not(target_arch = "nvptx64"))]
        #(#cfgs)*
        #[allow(dead_code, unused, non_camel_case_types, non_snake_case, missing_docs, clippy::all)]
        #vis mod #name {
            #[allow(unused_imports)]
            use super::*;

            pub struct Consts { #(#fields)* }

            pub const CONFIGS: &[#config_info] = &[];

            pub const CONSTS: &[Consts] = &[];

            pub fn launch<#(#generics),*>(#on: &impl #launch_target, #(#args),*) -> #result<()> {
                #unreachable
            }

            pub fn launch_with<#(#generics),*>(
                #on: &impl #launch_target,
                #opts: &#launch_options,
                #(#args),*
            ) -> #result<()> {
                #unreachable
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
