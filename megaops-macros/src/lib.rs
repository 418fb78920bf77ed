//! `#[megaops::kernel]`: turns an annotated Rust function into MegaOps kernels — one PTX
//! entry per tile config with the data-tile synchronisation of the paper's Listing 3
//! injected, the same body for the CPU backend, and a typed host launcher. Use it
//! through the `megaops` facade (`#[megaops::kernel(...)]`); generated code names
//! everything through `::megaops::__private`.
//!
//! # Example
//!
//! ```ignore
//! use megaops::bf16;
//!
//! /// C = A·B. Kernel tile (pid_m, pid_n) computes rows pid_m*BM.., columns pid_n*BN.. of C.
//! #[megaops::kernel(
//!     block = THREADS,
//!     smem = (BM + BN) * BK * 2,
//!     input(a[m, k] = [pid_m: BM, _]),
//!     output(c[m, n] = [pid_m: BM, pid_n: BN]),
//! )]
//! #[config(BM = 64, BN = 64, BK = 32, THREADS = 128)]
//! #[config(BM = 128, BN = 128, BK = 32, THREADS = 256)]
//! pub unsafe fn matmul(a: *const bf16, b: *const bf16, c: *mut bf16, m: u32, n: u32, k: u32) {
//!     #[prefetch]
//!     let w = unsafe { *b.add((pid_n * BN) as usize) };  // weights: no producer in flight
//!     let x = unsafe { *a.add((pid_m * BM * k) as usize) }; // the wait for `a` goes here
//!     // ... compute, write c ...
//! }
//!
//! // Host:
//! matmul::launch(&stream, &x_tiled, &w, &mut y_tiled, m, n, k)?;
//! matmul::launch_with(&stream, &LaunchOptions::config(1), &x_tiled, &w, &mut y_tiled, m, n, k)?;
//! ```
//!
//! # Grammar
//!
//! ```text
//! #[megaops::kernel(
//!     block = EXPR | (X, Y[, Z]),        // required: threads per CTA
//!     smem = EXPR,                       // dynamic shared memory in bytes (default 0)
//!     tiles(AXIS = EXTENT, ...),         // kernel-tile grid (default: derived, see below)
//!     input(P[DIM, ...] = [COORD, ...]), // synchronised input P (a `*const T` parameter)
//!     output(P[DIM, ...] = [COORD, ...] [, split = AXIS]), // synchronised output (`*mut T`)
//!     persistent,                        // CTAs loop over kernel tiles
//!     debug,                             // print the expansion to stderr when compiling
//! )]
//! #[config(NAME = VALUE, NAME: TYPE = VALUE, ...)]  // zero or more tile configs
//! COORD := AXIS: SIZE    // the tile along this dimension is tile AXIS of SIZE elements
//!        | _             // the tile spans the whole dimension
//! ```
//!
//! - `DIM`, `SIZE`, `EXTENT`, `block` and `smem` are expressions of the parameters and the
//!   config constants; they are evaluated on the host (launcher) and on the device.
//! - **Config constants.** Every `#[config]` defines the same names; each becomes
//!   `const NAME: TYPE = VALUE;` at the top of every generated body and launcher arm, so
//!   constants work as array lengths and in the annotation. The type is written
//!   (`NAME: f32 = 0.5`) or follows from the value: an unsuffixed integer is `u32`, a
//!   suffixed literal has its suffix's type, `x as T` is `T`, `true`/`false` are `bool`,
//!   arithmetic on other constants has their type. Without `#[config]` there is one
//!   implicit config without constants.
//! - **Grid.** The axes of `tiles(...)`, or else every axis the tilings select, in order
//!   of first appearance with outputs before inputs, each with extent
//!   `DIM.div_ceil(SIZE)` from the first output (else input) dimension it selects. A
//!   split axis that no dimension selects, and a kernel without `input`/`output`, need
//!   `tiles(...)`. One to four axes. In the body each axis is a `u32` local holding this
//!   tile's coordinate (after the launch's CTA remap).
//!
//! # What is generated
//!
//! For tile config `i` of kernel `name`:
//!
//! - nvptx64: `#[unsafe(no_mangle)] pub unsafe extern "ptx-kernel" fn name__cfg<i>(<the
//!   parameters>, ctx: KernelCtx, <one TileSync per input/output, in signature order>)`;
//! - host: `unsafe fn __megaops_cpu_name__cfg<i>(<same>)`, the same body for the CPU
//!   backend.
//!
//! The body: the config constants; `kernel_begin_cta`; the tile `remap_tile(block_idx_x())`
//! (persistent: a loop over `t += grid_dim_x()`), returning when past the grid; the axis
//! coordinates `tile_coords`; the element region of each synchronised parameter's kernel
//! tile (per dimension `tile_region(coord, SIZE, DIM)`, or `(0, DIM)` for `_`); then the
//! user's statements inside a closure (a `return` ends the tile only, so every thread
//! still reaches the signal barrier), where **before the first top-level statement that
//! mentions an input** the macro inserts `if !wait_input(..) { failed = true; return; }`
//! (several inputs first mentioned by one statement wait in annotation order); after the
//! closure, `signal_output` for each output with the producer's kernel tile and split
//! (`split = AXIS`: the extent and coordinate of that axis).
//!
//! `#[prefetch]` marks top-level statements that must run before any wait (e.g. loading
//! weights no kernel in flight writes, paper §3.2); they must not mention an input and
//! must precede every statement that does.
//!
//! On the host, `mod name` (same visibility as the function, the function's docs plus a
//! generated description of the tiling and configs) holds `CONFIGS: &[ConfigInfo]`,
//! `launch(on, args..)` and `launch_with(on, &LaunchOptions, args..)`. Arguments: an
//! input `x: *const T` of rank R is `&(impl AsInput<T, R> + ?Sized)` (a `Tensor<T>` or a
//! `Tiled<T, D>` with a rank-R tiling `D`), an output `&mut (impl AsOutput<T, R> +
//! ?Sized)`, other `*const T`/`*mut T` are `&Tensor<T>`/`&mut Tensor<T>`, values are
//! passed as they are. The launcher needs `crate::__MEGAOPS_PTX`
//! (`megaops::kernel_crate!()`).
//!
//! # Limits
//!
//! "Mentions" is a token test: a local that shadows an input's name makes the wait come
//! earlier than needed (harmless), but a read hidden in a macro's format string
//! (`"{a}"`) is not seen. Paths relative to the kernel's module (`self::T`) in parameter
//! types do not resolve inside the launcher module; use plain or crate paths.
//!
//! # Errors
//!
//! Every mistake is reported at the tokens that cause it, all at once; the function is
//! still emitted (helper attributes removed, axes and constants bound) so that follow-up
//! errors stay out of the way. See `tests/ui` in the `megaops` package for each message.

#![warn(missing_docs)]

mod ast;
mod attr;
mod ctxt;
mod expand;
mod fallback;
mod paths;
mod text;
mod valid;

#[cfg(test)]
mod tests;

use proc_macro2::TokenStream;

/// Marks an `unsafe fn` as a MegaOps kernel; see the [crate docs](crate) for the grammar
/// and what is generated.
#[proc_macro_attribute]
pub fn kernel(
    attr: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    expand_kernel(attr.into(), item.into()).into()
}

/// Parse → validate → expand, or the fallback with every error found.
fn expand_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut cx = ctxt::Ctxt::new();
    let func: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(_) => {
            let err = syn::Error::new_spanned(
                &item,
                "`#[megaops::kernel]` applies to functions: `unsafe fn name(...) { ... }`",
            );
            return fallback::emit(vec![err], None, None)
                .into_iter()
                .chain(item)
                .collect();
        }
    };
    let kernel = ast::Kernel::from_syn(attr, func.clone(), &mut cx);
    valid::check(&kernel, &mut cx);
    if !cx.is_empty() {
        return fallback::emit(cx.into_errors(), Some(&kernel), Some(func));
    }
    let out = expand::kernel(&kernel);
    if kernel.debug {
        eprintln!(
            "// #[megaops::kernel] expansion of `{}`:\n{}\n",
            kernel.name(),
            text::pretty(out.clone())
        );
    }
    out
}
