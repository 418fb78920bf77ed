//! Every path the generated code names. All go through `::megaops::__private`, the
//! facade's hidden re-export module, so that a kernel crate needs only the `megaops`
//! dependency and the runtime crates can move things without breaking expansions.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::Ident;

/// `::megaops::__private::<name>`.
fn private(name: &str) -> TokenStream {
    let name = Ident::new(name, Span::call_site());
    quote!(::megaops::__private::#name)
}

macro_rules! paths {
    ($($(#[$doc:meta])* $f:ident => $name:literal;)*) => {$(
        $(#[$doc])*
        pub fn $f() -> TokenStream {
            private($name)
        }
    )*};
}

paths! {
    /// The per-launch context parameter block (`megaops_device::sync::KernelCtx`).
    kernel_ctx => "KernelCtx";
    /// One synchronised tensor's semaphores (`megaops_device::sync::TileSync`).
    tile_sync => "TileSync";
    /// Where a producer tile sits in the producer's tiling.
    producer_tile => "ProducerTile";
    /// `kernel_begin_cta(&ctx)`.
    kernel_begin_cta => "kernel_begin_cta";
    /// `wait_prerequisite_grids()`.
    wait_prerequisite_grids => "wait_prerequisite_grids";
    /// `remap_tile(&ctx, t) -> u32`.
    remap_tile => "remap_tile";
    /// `tile_coords(&ctx, tile) -> [u32; 4]`.
    tile_coords => "tile_coords";
    /// `tile_region(coord, ktile, size) -> (u32, u32)`.
    tile_region => "tile_region";
    /// `wait_input(&ctx, tile, &sync, &region) -> bool`.
    wait_input => "wait_input";
    /// `begin_signals(&[&sync, ..], failed) -> bool`.
    begin_signals => "begin_signals";
    /// `signal_tiles(&sync, &region, &producer, signalling)`.
    signal_tiles => "signal_tiles";
    /// `trace_now(&ctx) -> u64`.
    trace_now => "trace_now";
    /// `trace_waited(&ctx, &mut waited)`.
    trace_waited => "trace_waited";
    /// `trace_end(&ctx) -> u64`.
    trace_end => "trace_end";
    /// `trace_record(&ctx, tile, start, waited, end)`.
    trace_record => "trace_record";
    /// `block_idx_x() -> u32`.
    block_idx_x => "block_idx_x";
    /// `grid_dim_x() -> u32`.
    grid_dim_x => "grid_dim_x";
    /// Host: the launch builder.
    kernel_launch => "KernelLaunch";
    /// Host: per-launch options.
    launch_options => "LaunchOptions";
    /// Host: a stream or AsyncStream.
    launch_target => "LaunchTarget";
    /// Host: one tile config's description.
    config_info => "ConfigInfo";
    /// Host: the typed value of a config constant.
    config_value => "ConfigValue";
    /// Host: how a dimension is tiled by the kernel.
    tile_dim => "TileDim";
    /// Host: a synchronised input argument.
    as_input => "AsInput";
    /// Host: a synchronised output argument.
    as_output => "AsOutput";
    /// Host: a plain device tensor.
    tensor => "Tensor";
    /// Host: the declared shape of a plain pointer parameter.
    declared => "Declared";
    /// Host: the runtime's error type.
    error => "Error";
    /// Host: `Result<T, Error>`.
    result => "Result";
    /// Host (CPU backend): starts the out-of-tile read check of an input for a kernel tile.
    cpu_watch_input => "cpu_watch_input";
    /// Host (CPU backend): wraps the operand of a read for the read check.
    read_probe => "ReadProbe";
    /// Host (CPU backend): the read check of pointers and references.
    probe_pointer => "ProbePointer";
    /// Host (CPU backend): every other operand passes unchanged.
    probe_other => "ProbeOther";
    /// Host: checked arithmetic for the launcher's evaluation of annotation expressions.
    checked_arith => "CheckedArith";
    /// Host: one checked operation of an annotation expression.
    checked_op => "checked_op";
    /// Host: where that operation is, for its error.
    overflow_site => "OverflowSite";
}

/// Host: the rank type `R1` ... `R4`.
pub fn rank(n: usize) -> TokenStream {
    private(&format!("R{n}"))
}
