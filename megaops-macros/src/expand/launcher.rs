//! The typed host launcher: `mod <name>` (host only) with `CONFIGS` (each config's
//! description and constants as typed data), `Consts` / `CONSTS` (the constants as a
//! struct per config), `launch` and `launch_with`.
//!
//! Argument types follow the kernel's parameters: a synchronised input `x: *const T` of
//! rank R becomes `x: &(impl AsInput<T, R> + ?Sized)` (a `Tensor<T>` or a `Tiled<T, D>`
//! whose tiling has rank R), an output `&mut (impl AsOutput<T, R> + ?Sized)`, other
//! pointers `&Tensor<T>` / `&mut Tensor<T>`, values stay values. Each config's arm binds
//! the arguments in signature order (the builder appends kernel parameters in call
//! order) and submits the launch with the CPU-backend body.

use super::{Plan, SyncPlan, checked, config_consts, local, primitive, sync};
use crate::ast::{Extent, Param, ParamKind};
use crate::attr::{Role, TileCoord};
use crate::paths;
use crate::text::{list_text, tokens_text};
use proc_macro2::TokenStream;
use quote::{ToTokens, quote};

/// `mod <name> { ... }` for the host.
pub fn module(plan: &Plan) -> TokenStream {
    let k = plan.k;
    let (name, vis) = (k.name(), k.vis());
    let docs = &k.docs;
    let summary = summary(plan);
    let cfgs = k.attrs.iter().filter(|a| a.path().is_ident("cfg"));
    let (on, opts) = (local("on"), local("opts"));
    let (launch_target, launch_options, config_info, config_value, result) = (
        paths::launch_target(),
        paths::launch_options(),
        paths::config_info(),
        paths::config_value(),
        paths::result(),
    );
    let args: Vec<TokenStream> = k.params.iter().filter_map(|p| arg(plan, p)).collect();
    let names: Vec<_> = k.params.iter().filter_map(|p| p.name.as_ref()).collect();
    let configs = k.configs.iter().enumerate().map(|(i, c)| {
        let entry = plan.entry_name(i).to_string();
        let traced = plan.traced_entry_name(i).to_string();
        let traced = quote!(::core::option::Option::Some(#traced));
        let label = config_label(c);
        let defs = config_consts(c);
        let values = c.consts.iter().filter_map(|x| {
            let (name, variant) = (&x.name, primitive(x.ty.as_ref()?)?);
            let (text, variant) = (
                name.to_string(),
                syn::Ident::new(variant, proc_macro2::Span::call_site()),
            );
            Some(quote!((#text, #config_value::#variant(#name))))
        });
        quote!(#config_info {
            name: #label,
            entry: #entry,
            traced_entry: #traced,
            consts: { #defs &[#(#values),*] },
        })
    });
    let consts_struct = consts_struct(plan);
    let consts_values = k.configs.iter().map(|c| {
        let defs = config_consts(c);
        let names = c.consts.iter().filter(|x| x.ty.is_some()).map(|x| &x.name);
        quote!({ #defs Consts { #(#names),* } })
    });
    let arms = (0..k.configs.len()).map(|i| arm(plan, i));
    let n_configs = k.configs.len();
    let kernel = name.to_string();
    let launch_doc = format!(
        "Launches `{kernel}` on `on` (a stream or an AsyncStream) with tile config 0 and default launch options; \
         see the module docs for what each argument must be."
    );
    let launch_with_doc = format!(
        "Launches `{kernel}` with `opts`: tile config (`opts.config`, an index into [`CONFIGS`]), CTA remap, \
         persistent CTA count, occupancy limit and wait timeout. Shapes, devices and data tilings are checked \
         before anything runs."
    );
    let configs_doc = format!(
        "The tile configs of `{kernel}`: `opts.config = Some(i)` launches `CONFIGS[i]`. Pick one by its \
         constants (`CONFIGS[i].u32(\"BN\")`, or the typed [`CONSTS`]), not by its index or name."
    );
    let consts_doc = format!("The constants of each tile config of `{kernel}`: `CONSTS[i]` is `CONFIGS[i]`'s.");
    let i = local("__megaops_i");
    let error = paths::error();
    quote! {
        #[cfg(not(target_arch = "nvptx64"))]
        #(#cfgs)*
        #(#docs)*
        #[doc = #summary]
        #[allow(dead_code, clippy::too_many_arguments)]
        #vis mod #name {
            #[allow(unused_imports)]
            use super::*;

            #[doc = #configs_doc]
            pub const CONFIGS: &[#config_info] = &[#(#configs),*];

            #consts_struct

            #[doc = #consts_doc]
            pub const CONSTS: &[Consts] = &[#(#consts_values),*];

            #[doc = #launch_doc]
            pub fn launch(#on: &impl #launch_target, #(#args),*) -> #result<()> {
                launch_with(#on, &#launch_options::default(), #(#names),*)
            }

            #[doc = #launch_with_doc]
            pub fn launch_with(#on: &impl #launch_target, #opts: &#launch_options, #(#args),*) -> #result<()> {
                match #opts.config.unwrap_or(0) {
                    #(#arms)*
                    #i => ::core::result::Result::Err(#error::launch(
                        #kernel,
                        ::std::format!(
                            "tile config {} does not exist; `{}` has {} (see `{}::CONFIGS`)",
                            #i, #kernel, #n_configs, #kernel,
                        ),
                    )),
                }
            }
        }
    }
}

/// The launcher's parameter for kernel parameter `p`.
fn arg(plan: &Plan, p: &Param) -> Option<TokenStream> {
    let name = p.name.as_ref()?;
    let ty = match (plan.sync_of(p), &p.kind) {
        (Some(s), _) => {
            let (elem, rank) = (s.elem, paths::rank(s.dims.len()));
            match s.sync.role() {
                Role::Input => {
                    let as_input = paths::as_input();
                    quote!(&(impl #as_input<#elem, #rank> + ?Sized))
                }
                Role::Output => {
                    let as_output = paths::as_output();
                    quote!(&mut (impl #as_output<#elem, #rank> + ?Sized))
                }
            }
        }
        (None, ParamKind::ConstPtr(t)) => {
            let tensor = paths::tensor();
            quote!(&#tensor<#t>)
        }
        (None, ParamKind::MutPtr(t)) => {
            let tensor = paths::tensor();
            quote!(&mut #tensor<#t>)
        }
        (None, _) => p.ty.to_token_stream(),
    };
    Some(quote!(#name: #ty))
}

/// The match arm of config `i`.
fn arm(plan: &Plan, i: usize) -> TokenStream {
    let k = plan.k;
    let Some(config) = k.configs.get(i) else {
        return TokenStream::new();
    };
    let consts = config_consts(config);
    let (on, opts, l, ctx) = (
        local("on"),
        local("opts"),
        local("__megaops_launch"),
        local("__megaops_ctx"),
    );
    let (kernel_launch, kernel_ctx) = (paths::kernel_launch(), paths::kernel_ctx());
    let kernel = k.name().to_string();
    let entry = plan.entry_name(i).to_string();
    let cpu = plan.cpu_name(i);
    let extents = plan.grid_extents();
    let zero_tiles = plan.zero_tile_checks();
    let block = block(plan);
    let smem = match &k.smem {
        Some(e) => checked::cast(plan, e, "u64", "`smem`"),
        None => quote!(0u64),
    };
    let persistent = k.persistent.then(|| quote!(#l.persistent();));
    let error = paths::error();
    let checks = k.checks.iter().map(|(cond, message)| {
        let cond_text = tokens_text(cond.to_token_stream());
        let text = format!("{} (`{cond_text}`)", message.value());
        let cond = checked::expr(plan, cond, &format!("the check `{cond_text}`"));
        quote! {
            if !(#cond) {
                return ::core::result::Result::Err(#error::launch(#kernel, #text));
            }
        }
    });
    let binds = k.params.iter().filter_map(|p| bind(plan, p, &l));
    let call_args = k.params.iter().filter_map(|p| call_arg(plan, p));
    let syncs = plan.syncs.iter().map(|s| &s.sync_ident);
    quote! {
        #i => {
            #consts
            #(#checks)*
            #(#zero_tiles)*
            let mut #l = #kernel_launch::new(#on.device(), #kernel, &crate::__MEGAOPS_PTX, #entry, #opts);
            #l.config_name(CONFIGS[#i].name);
            #l.traced_entry(CONFIGS[#i].traced_entry);
            #l.tiles(&[#(#extents),*])?;
            #l.block(#block)?;
            #l.dynamic_smem(#smem)?;
            #persistent
            #(#binds)*
            #l.submit(#on, move |#ctx: &#kernel_ctx| {
                // SAFETY: the builder checked every argument against the kernel's
                // annotation (device, shape, tiling, coverage) and keeps the buffers
                // alive until the launch is done.
                unsafe { super::#cpu(#(#call_args,)* *#ctx, #(#syncs),*) }
            })
        }
    }
}

/// `[x, y, z]` threads per CTA as `u64`s.
fn block(plan: &Plan) -> TokenStream {
    let dims: Vec<TokenStream> = match &plan.k.block {
        Some(syn::Expr::Tuple(t)) => t
            .elems
            .iter()
            .map(|e| checked::cast(plan, e, "u64", "`block`"))
            .collect(),
        Some(e) => vec![checked::cast(plan, e, "u64", "`block`")],
        None => Vec::new(),
    };
    let pad = (dims.len()..3).map(|_| quote!(1u64));
    quote!([#(#dims,)* #(#pad),*])
}

/// Binding of parameter `p` on builder `l`.
fn bind(plan: &Plan, p: &Param, l: &syn::Ident) -> Option<TokenStream> {
    let name = p.name.as_ref()?;
    let label = name.to_string();
    Some(match (plan.sync_of(p), &p.kind) {
        (Some(s), _) => {
            let (elem, rank) = (s.elem, paths::rank(s.dims.len()));
            let (addr, sync_ident) = (&s.addr_ident, &s.sync_ident);
            let (shape, tile) = (sync::shape(plan, s), sync::tile_dims(plan, s));
            match s.sync.role() {
                Role::Input => quote! {
                    let (#addr, #sync_ident) = #l.input::<#elem, #rank, _>(#label, #name, #shape, #tile)?;
                },
                Role::Output => {
                    let split = match s.split {
                        Some((axis, _)) => quote!(::core::option::Option::Some(#axis)),
                        None => quote!(::core::option::Option::None),
                    };
                    quote! {
                        let (#addr, #sync_ident) = #l.output::<#elem, #rank, _>(#label, #name, #shape, #tile, #split)?;
                    }
                }
            }
        }
        (None, ParamKind::ConstPtr(_)) => {
            let (addr, shape) = (addr_of(name), declared_shape(plan, name));
            quote!(let #addr = #l.ptr(#label, #name, #shape)?;)
        }
        (None, ParamKind::MutPtr(_)) => {
            let (addr, shape) = (addr_of(name), declared_shape(plan, name));
            quote!(let #addr = #l.ptr_mut(#label, #name, #shape)?;)
        }
        (None, _) => quote!(#l.arg(#name);),
    })
}

/// `Some(Declared::Shape(&[dim as u64, ...]))` from `tensor(name[...])`,
/// `Some(Declared::AtLeast(len))` from `scratch(name[len])`, or `None` if undeclared.
fn declared_shape(plan: &Plan, name: &syn::Ident) -> TokenStream {
    let declared = paths::declared();
    match plan.k.tensors.iter().find(|t| t.param == *name) {
        Some(t) if t.scratch => {
            let what = format!("the length of `{name}`");
            let len = t.shape.iter().map(|e| checked::cast(plan, e, "u64", &what));
            quote!(::core::option::Option::Some(#declared::AtLeast(#(#len)*)))
        }
        Some(t) => {
            let what = format!("the shape of `{name}`");
            let dims = t.shape.iter().map(|e| checked::cast(plan, e, "u64", &what));
            quote!(::core::option::Option::Some(#declared::Shape(&[#(#dims),*])))
        }
        None => quote!(::core::option::Option::None),
    }
}

fn addr_of(name: &syn::Ident) -> syn::Ident {
    local(&format!("__megaops_addr_{name}"))
}

/// Argument of the CPU-backend call for parameter `p`.
fn call_arg(plan: &Plan, p: &Param) -> Option<TokenStream> {
    let name = p.name.as_ref()?;
    let addr = match plan.sync_of(p) {
        Some(s) => s.addr_ident.clone(),
        None => addr_of(name),
    };
    Some(match &p.kind {
        ParamKind::ConstPtr(t) => quote!(#addr as *const #t),
        ParamKind::MutPtr(t) => quote!(#addr as *mut #t),
        _ => quote!(#name),
    })
}

/// `pub struct Consts { pub BN: u32, .. }`: one field per config constant, named and
/// typed as the kernel's `#[config]`s give it (`Clone, Copy, Debug, PartialEq` when every
/// type is a primitive).
fn consts_struct(plan: &Plan) -> TokenStream {
    let k = plan.k;
    let consts = k.configs.first().map(|c| c.consts.as_slice()).unwrap_or_default();
    let fields = consts.iter().filter_map(|x| {
        let (name, ty) = (&x.name, x.ty.as_ref()?);
        let doc = format!("`{name}`: `{}`.", tokens_text(ty.to_token_stream()));
        Some(quote!(#[doc = #doc] pub #name: #ty,))
    });
    let derive = consts
        .iter()
        .all(|x| x.ty.as_ref().is_some_and(|t| primitive(t).is_some()))
        .then(|| quote!(#[derive(Clone, Copy, Debug, PartialEq)]));
    let doc = format!(
        "The constants of one tile config of `{}`, typed as its `#[config]`s give them (see [`CONSTS`]).",
        k.name()
    );
    quote! {
        #[doc = #doc]
        #derive
        #[allow(non_snake_case)]
        pub struct Consts { #(#fields)* }
    }
}

/// `"BM=64, BN=64"` for a config (`"default"` for the implicit one).
fn config_label(c: &crate::ast::Config) -> String {
    if c.attr.is_none() {
        return "default".to_string();
    }
    let parts: Vec<String> = c
        .consts
        .iter()
        .map(|x| format!("{}={}", x.name, tokens_text(x.value.to_token_stream())))
        .collect();
    parts.join(", ")
}

/// The generated part of the module docs: grid, tilings, configs.
fn summary(plan: &Plan) -> String {
    let k = plan.k;
    let text = |t: &dyn ToTokens| tokens_text(t.to_token_stream());
    let mut d = String::from("\n# Kernel tiling\n\n");
    d.push_str(if k.persistent {
        "Persistent kernel: each CTA loops over kernel tiles (one CTA per SM unless `LaunchOptions::ctas` says \
         otherwise). Kernel-tile grid, outermost axis first:\n\n"
    } else {
        "One CTA per kernel tile. Kernel-tile grid, outermost axis first:\n\n"
    });
    for (i, a) in plan.axes.iter().enumerate() {
        let extent = match &a.extent {
            Some(Extent::Given(e)) => text(e),
            Some(Extent::Derived { dim, size }) => {
                format!("({}).div_ceil({})", text(dim), text(size))
            }
            None => "?".to_string(),
        };
        d.push_str(&format!("- axis {i}, `{}`: `{extent}` tiles\n", a.name));
    }
    if !plan.syncs.is_empty() {
        d.push_str(
            "\nSynchronised parameters (inputs wait for the data tiles their kernel tile reads; outputs signal \
                    the data tiles their kernel tile wrote):\n\n",
        );
    }
    for s in &plan.syncs {
        d.push_str(&sync_line(s));
    }
    if let Some(b) = &k.block {
        d.push_str(&format!("\nThreads per CTA: `{}`.", text(b)));
    }
    if let Some(m) = &k.smem {
        d.push_str(&format!(" Dynamic shared memory: `{}` bytes.", text(m)));
    }
    d.push_str("\n\n# Tile configs\n\nChosen with `LaunchOptions::config` (default 0):\n\n");
    for (i, c) in k.configs.iter().enumerate() {
        d.push_str(&format!(
            "- `{i}`: `{}` (PTX entry `{}`)\n",
            config_label(c),
            plan.entry_name(i)
        ));
    }
    d
}

fn sync_line(s: &SyncPlan) -> String {
    let shape = list_text(&s.sync.decl.shape);
    let tile: Vec<String> = s
        .sync
        .decl
        .tile
        .iter()
        .map(|c| match c {
            TileCoord::Whole => "_".to_string(),
            TileCoord::Axis { axis, size } => {
                format!("{axis}: {}", tokens_text(size.to_token_stream()))
            }
        })
        .collect();
    let dims: Vec<String> = s
        .dims
        .iter()
        .enumerate()
        .map(|(d, dim)| match dim.tile {
            Some((_, axis, size)) => {
                format!(
                    "dimension {d}: `{}` elements selected by `{axis}`",
                    tokens_text(size.to_token_stream())
                )
            }
            None => format!("dimension {d}: all of it"),
        })
        .collect();
    let split = match s.split {
        Some((_, axis)) => format!("; split-K along `{axis}`: the kernel tiles along it add into the same output tile"),
        None => String::new(),
    };
    format!(
        "- `{}`: {}, element type `{}`, shape `{shape}`, kernel tile `[{}]` ({}){split}\n",
        s.sync.name(),
        s.sync.role().keyword(),
        tokens_text(s.elem.to_token_stream()),
        tile.join(", "),
        dims.join("; ")
    )
}
