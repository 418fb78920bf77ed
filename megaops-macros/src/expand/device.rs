//! The kernel body per tile config, emitted from one generator as two PTX entries
//! (nvptx64) — `Plan::entry_name` without any trace code and `Plan::traced_entry_name`
//! with it, which the launcher picks for a traced launch — and as the CPU-backend
//! function `__megaops_cpu_<name>__cfg<i>` (host). The CPU-backend body also watches its
//! synchronised inputs and routes the reads of its statements through the out-of-tile
//! read check ([`sync::watches`], [`sync::body_with_waits`]).
//!
//! ```text
//! const BM: u32 = 64; ...                        // the config's constants
//! kernel_begin_cta(&ctx);
//! wait_prerequisite_grids();                     // griddepcontrol.wait: a programmatic launch
//! let tile = remap_tile(&ctx, block_idx_x());    // persistent: a loop over t += grid_dim_x()
//! if tile >= ctx.num_tiles { return; }
//! let [pid_m, pid_n, ..] = tile_coords(&ctx, tile);
//! let region_a = [...]; let region_c = [...];    // element regions of the kernel tile
//! let start = trace_now(&ctx);                   // traced entry; 0 unless the launch is traced
//! let mut failed = false;
//! let mut body = || { <statements, each input's wait before its first reader> };
//! body();                                       // traced: trace_waited after each wait
//! let end = trace_end(&ctx);                     // traced: a barrier and the clock
//! let signalling = begin_signals(&[&sync_c], failed); // one barrier and fence for all outputs
//! signal_tiles(&sync_c, &region_c, &ProducerTile { .. }, signalling);
//! trace_record(&ctx, tile, start, waited, end);  // traced: thread 0 appends a TileTrace
//! ```

use super::{Plan, config_consts, local, sync};
use crate::paths;
use proc_macro2::TokenStream;
use quote::quote;

/// Both targets' functions for every config: per config the untraced PTX entry (no trace
/// code at all), the traced one ([`Plan::traced_entry_name`]) and the CPU-backend function
/// (which traces when the launch asks).
pub fn entries(plan: &Plan) -> TokenStream {
    let k = plan.k;
    let params = k.item.sig.inputs.iter();
    let (ctx, kernel_ctx, tile_sync) = (local("__megaops_ctx"), paths::kernel_ctx(), paths::tile_sync());
    let syncs: Vec<_> = plan.syncs.iter().map(|s| &s.sync_ident).collect();
    let attrs = &k.attrs;
    let vis = k.vis();
    let params = quote!(#(#params,)* #ctx: #kernel_ctx #(, #syncs: #tile_sync)*);
    let fns = k.configs.iter().enumerate().map(|(i, config)| {
        let consts = || config_consts(config);
        let ptx_entry = |entry: &syn::Ident, traced: bool| {
            let body = body(plan, consts(), false, traced);
            let bounds = launch_bounds(plan, entry, consts());
            quote! {
                #bounds

                #[cfg(target_arch = "nvptx64")]
                #[unsafe(no_mangle)]
                #[allow(non_snake_case, clippy::too_many_arguments)]
                #[deny(unsafe_op_in_unsafe_fn)]
                #(#attrs)*
                pub unsafe extern "ptx-kernel" fn #entry(#params) {
                    #body
                }
            }
        };
        let plain = ptx_entry(&plan.entry_name(i), false);
        let traced = ptx_entry(&plan.traced_entry_name(i), true);
        let (cpu, cpu_body) = (plan.cpu_name(i), body(plan, consts(), true, true));
        quote! {
            #plain
            #traced

            #[cfg(not(target_arch = "nvptx64"))]
            #[doc(hidden)]
            #[allow(non_snake_case, clippy::too_many_arguments)]
            #[deny(unsafe_op_in_unsafe_fn)]
            #(#attrs)*
            #vis unsafe fn #cpu(#params) {
                #cpu_body
            }
        }
    });
    quote!(#(#fns)*)
}

/// With `min_ctas = N`: a marker static `__megaops_launch_bounds__<entry> = [threads, N]`
/// that the PTX linker of `megaops-build` turns into `.maxntid threads, 1, 1` and
/// `.minnctapersm N` on the entry (rustc has no attribute for launch bounds). `block` and
/// `min_ctas` must then be constant expressions of the config's constants; a config whose
/// `min_ctas` is 0 keeps no bounds (the linker drops its marker).
fn launch_bounds(plan: &Plan, entry: &syn::Ident, consts: TokenStream) -> TokenStream {
    let Some(min) = &plan.k.min_ctas else {
        return TokenStream::new();
    };
    let name = quote::format_ident!("__megaops_launch_bounds__{}", entry);
    let threads = match &plan.k.block {
        Some(syn::Expr::Tuple(t)) => {
            let dims = t.elems.iter();
            quote!(1u32 #(* ((#dims) as u32))*)
        }
        Some(e) => quote!(((#e) as u32)),
        None => quote!(0u32),
    };
    quote! {
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(no_mangle)]
        #[used]
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        pub static #name: [u32; 2] = {
            #consts
            [#threads, (#min) as u32]
        };
    }
}

/// The body of one config's entry; `host`: the CPU-backend function's, whose reads of
/// synchronised inputs are checked (see [`sync::watches`]); `traced`: whether it makes the
/// trace calls.
pub fn body(plan: &Plan, consts: TokenStream, host: bool, traced: bool) -> TokenStream {
    let (ctx, tile, t) = (local("__megaops_ctx"), local("__megaops_tile"), local("__megaops_t"));
    let (begin, remap) = (paths::kernel_begin_cta(), paths::remap_tile());
    let prerequisites = paths::wait_prerequisite_grids();
    let (block_idx_x, grid_dim_x) = (paths::block_idx_x(), paths::grid_dim_x());
    let per_tile = tile_body(plan, host, traced);
    let schedule = if plan.k.persistent {
        quote! {
            let mut #t = #block_idx_x();
            while #t < #ctx.num_tiles {
                // SAFETY: t < num_tiles, the length of a remap table.
                let #tile = unsafe { #remap(&#ctx, #t) };
                #per_tile
                #t += #grid_dim_x();
            }
        }
    } else {
        quote! {
            // SAFETY: the launch has num_tiles CTAs; a remap table has num_tiles entries.
            let #tile = unsafe { #remap(&#ctx, #block_idx_x()) };
            if #tile >= #ctx.num_tiles {
                return;
            }
            #per_tile
        }
    };
    // Parameters only the annotation uses (e.g. in `tiles(...)`) are used on the host.
    let annotation_only = plan.k.params_in_annotation();
    quote! {
        #consts
        #(let _ = &#annotation_only;)*
        // SAFETY: the launcher passes a null or valid begin flag.
        unsafe { #begin(&#ctx) };
        // A launch the AsyncStream made programmatically may start before the work before
        // it on its stream ended: every thread waits for that work first.
        #prerequisites();
        #schedule
    }
}

/// One kernel tile: coordinates, regions, the user's statements with waits, signals;
/// with `traced`, the trace calls around them.
fn tile_body(plan: &Plan, host: bool, traced: bool) -> TokenStream {
    let (ctx, tile, failed, run) = (
        local("__megaops_ctx"),
        local("__megaops_tile"),
        local("__megaops_failed"),
        local("__megaops_body"),
    );
    let tile_coords = paths::tile_coords();
    let axes = plan.axes.iter().map(|a| &a.name);
    let regions = sync::regions(plan);
    let watches = if host { sync::watches(plan) } else { TokenStream::new() };
    let stmts = sync::body_with_waits(plan, host, traced);
    let signals = sync::signals(plan);
    let (trace_now, trace_end, trace_record) = (paths::trace_now(), paths::trace_end(), paths::trace_record());
    let (start, waited, end) = (
        local("__megaops_trace_start"),
        local("__megaops_trace_waited"),
        local("__megaops_trace_end"),
    );
    let (trace_start, trace_end, trace_record) = if traced {
        (
            quote! {
                let #start = #trace_now(&#ctx);
                #[allow(unused_mut)]
                let mut #waited = 0u64;
            },
            quote!(let #end = #trace_end(&#ctx);),
            quote! {
                // SAFETY: the launcher passes a null or valid trace log.
                unsafe { #trace_record(&#ctx, #tile, #start, #waited, #end) };
            },
        )
    } else {
        (TokenStream::new(), TokenStream::new(), TokenStream::new())
    };
    quote! {
        #trace_start
        // An axis the body does not need is still part of the declared grid.
        #[allow(unused_variables)]
        let [#(#axes,)* ..] = #tile_coords(&#ctx, #tile);
        #regions
        #watches
        #[allow(unused_mut, unused_variables, unused_assignments)]
        let mut #failed = false;
        // A closure, so that a `return` in the body ends the tile, not the CTA: every
        // thread still reaches the signal barrier below. The statements keep the
        // author's `unsafe` blocks: the entry denies `unsafe_op_in_unsafe_fn`.
        #[allow(unused_mut, clippy::redundant_closure_call)]
        let mut #run = || {
            #stmts
        };
        #run();
        #trace_end
        #signals
        #trace_record
    }
}
