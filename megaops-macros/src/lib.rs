//! `#[megaops::kernel]`: turns an annotated Rust function into MegaOps kernels — one PTX
//! entry per tile config with the data-tile synchronisation of the paper's Listing 3
//! injected, the same body for the CPU backend, and a typed host launcher. Use it through
//! the `megaops` facade; the reference (grammar, what is generated, an example) is on
//! [`macro@kernel`].
//!
//! Layout (parse → validate → expand, as thiserror and serde_derive):
//! - `attr`: the annotation grammar (`#[megaops::kernel(...)]`, `#[config]`,
//!   `#[prefetch]`); only malformed tokens are errors there;
//! - `ast`: the typed kernel (parameters, synchronised tensors, configs with their
//!   constants' types, body statements), every node keeping its spans;
//! - `valid`: every user error, one function per rule, all collected (`ctxt`);
//!   `valid_values`: the rules on constant values (tile sizes, threads per CTA);
//! - `expand/`: `device` (one body generator for the PTX entry and the CPU-backend
//!   function), `sync` (regions, waits, signals), `launcher` (the host module); it never
//!   discovers user errors;
//! - `fallback`: on error, the errors plus the user's function without helper attributes
//!   and (for a free function) a stub of its launcher module;
//! - `paths`: every generated path, all through `::megaops::__private`;
//! - `site`: whether the function sits in an `impl` or `trait` block (its source file
//!   tells), where a kernel cannot go;
//! - `text`: token streams as readable text (messages, docs, the `debug` dump).

mod ast;
mod attr;
mod ctxt;
mod expand;
mod fallback;
mod paths;
mod site;
mod text;
mod valid;
mod valid_values;

#[cfg(test)]
mod tests;

use proc_macro2::TokenStream;

/// Marks an `unsafe fn` as a MegaOps kernel: per tile config a PTX entry with the
/// data-tile synchronisation injected, the same body for the CPU backend, and a typed
/// launcher module.
///
/// # Example
///
/// ```ignore
/// use megaops::bf16;
///
/// /// C = A·B. Kernel tile (pid_m, pid_n): rows pid_m*BM.., columns pid_n*BN.. of C.
/// #[megaops::kernel(
///     block = THREADS,
///     smem = (BM + BN) * BK * 2,
///     input(a[m, k] = [pid_m: BM, _]),
///     output(c[m, n] = [pid_m: BM, pid_n: BN]),
///     tensor(b[n, k]),                  // a plain pointer: its shape, checked at launch
/// )]
/// #[config(BM = 64, BN = 64, BK = 32, THREADS = 128)]
/// #[config(BM = 128, BN = 128, BK = 32, THREADS = 256)]
/// pub unsafe fn matmul(a: *const bf16, b: *const bf16, c: *mut bf16, m: u32, n: u32, k: u32) {
///     #[prefetch]
///     let w = unsafe { *b.add((pid_n * BN) as usize) };    // weights: no producer in flight
///     let row = pid_m * BM;
///     let x = unsafe { *a.add((row * k) as usize) };       // the wait for `a` goes before this
///     // ... compute, write c ...
/// }
///
/// // Host (the crate root has `megaops::kernel_crate!();`); `m, n, k` are the kernel's
/// // `u32` parameters (tensor shapes are `usize`: convert, the launcher checks they agree):
/// matmul::launch(&stream, &x_tiled, &w, &mut y_tiled, m, n, k)?;
/// matmul::launch_with(&stream, &LaunchOptions::config(1), &x_tiled, &w, &mut y_tiled, m, n, k)?;
/// ```
///
/// # Grammar
///
/// ```text
/// #[megaops::kernel(
///     block = EXPR | (X, Y[, Z]),        // required: threads per CTA
///     smem = EXPR,                       // dynamic shared memory in bytes (default 0)
///     tiles(AXIS = EXTENT, ...),         // kernel-tile grid (default: derived, see below)
///     input(P[DIM, ...] = [COORD, ...]), // synchronised input P (a `*const T` parameter)
///     output(P[DIM, ...] = [COORD, ...] [, split = AXIS]), // synchronised output (`*mut T`)
///     tensor(P[DIM, ...]),               // shape of a plain pointer parameter P
///     scratch(P[LEN]),                   // a plain pointer P to at least LEN elements
///     check(COND, "MESSAGE"),            // a launch-time condition on the parameters
///     min_ctas = EXPR,                   // launch bounds: `.maxntid` (block) + `.minnctapersm`
///     configs = LIST!,                   // the #[config]s from a shared list (see below)
///     persistent,                        // CTAs loop over kernel tiles
///     debug,                             // print the expansion to stderr when compiling
/// )]
/// #[config(NAME = VALUE, NAME: TYPE = VALUE, ...)]  // zero or more tile configs
/// #[prefetch] <statement>                           // top-level statements only
///
/// COORD := AXIS: SIZE    // along this dimension: tile AXIS of SIZE elements
///        | _             // along this dimension: all of it
/// ```
///
/// - **Plain pointers.** Every `*const T` / `*mut T` parameter that is not an `input` or
///   `output` needs `tensor(P[DIM, ...])` (the launcher takes a `&Tensor<T>` /
///   `&mut Tensor<T>` and checks that its shape is exactly that) or `scratch(P[LEN])` (any
///   shape with at least `LEN` elements): unchecked pointers would let safe host code make
///   the kernel read or write out of bounds. Plain tensors get no semaphores; on an
///   AsyncStream they are ordered by stream events.
/// - **Checks.** `check(COND, "MESSAGE")` (any number) is evaluated by the launcher before
///   anything runs, with the parameters and config constants in scope; a false `COND`
///   returns `Error::Launch` with `MESSAGE` and the condition's text, e.g.
///   `check(k % 8 == 0, "k must be a multiple of 8")`.
/// - **Value limits.** A kernel tile `SIZE` of 0 and a `block` of 0 or more than 1024
///   threads are compile errors when they are integer literals or config constants with
///   literal values, launch errors otherwise.
/// - **Free functions.** A kernel is a free function (at module level, or in a function
///   body): the launcher module it gets cannot go into an `impl` or `trait` block, and a
///   kernel there is an error that says so (the macro reads the source file to tell).
/// - **Parameter types.** Sizes are `u32` on the device (the GPU's native index width);
///   tensor shapes are `usize` on the host. Launchers take the kernel's parameters as
///   declared, so pass `m as u32` (the launcher then checks each tensor's shape against
///   them, so a truncated size is a shape error, not a wrong result).
/// - `DIM`, `SIZE`, `EXTENT`, `block` and `smem` are expressions of the parameters and
///   the config constants, evaluated by the launcher on the host and (`DIM`, `SIZE`) by
///   the kernel on the device. More than one input is allowed. A name in constant case
///   (`BN`, `THREADS`) must be a `#[config]` constant (or a parameter or axis): a
///   constant from outside the kernel is written with its crate path
///   (`crate::kernels::TILE`; the expressions are also evaluated inside the launcher
///   module, where `self::` means that module). The launcher evaluates every annotation
///   expression in the types the kernel does, with checked arithmetic: a `+ - * / %` or
///   `div_ceil` that overflows (or divides by zero) is a launch error naming the kernel,
///   the annotation, the operation and the values of the parameters it mentions, instead
///   of a wrapped size. So is a dimension past `u32::MAX`, or kernel tiles whose last one
///   ends past `u32::MAX` (their `axis * SIZE + i` would wrap in the kernel's `u32`).
/// - **Launch bounds.** `min_ctas = N` asks ptxas to fit `N` CTAs per SM (`.maxntid` from
///   `block`, `.minnctapersm N`), capping registers per thread the way CUDA's
///   `__launch_bounds__(threads, N)` does. `block` and `min_ctas` must then be constant
///   expressions of the config constants; a config whose `min_ctas` is 0 gets no bounds,
///   so one list can offer bounded and unbounded variants of a tile. (rustc cannot
///   annotate a PTX entry, so the macro emits a marker static that the `megaops-build`
///   linker turns into the directives.)
/// - **Config constants.** Every `#[config]` defines the same names with the same types;
///   each becomes `const NAME: TYPE = VALUE;` at the top of every generated body and
///   launcher arm, so constants work as array lengths and in the annotation. The type is
///   written (`ALPHA: f32 = 0.5`, an addition to the original grammar) or follows from
///   the value: an unsuffixed integer is `u32`, a suffixed literal has its suffix's type
///   (`64usize`, `(2.0f32)`), `x as T` is `T`, `true`/`false` are `bool`, arithmetic on
///   other constants has their type. An unsuffixed float is an error (`f32` or `f64`?).
///   Without `#[config]` there is one implicit config without constants.
/// - **Shared config lists.** `configs = LIST!` gives the kernel the `#[config]`s of a
///   `macro_rules!` list instead of its own, so that kernels with the same tiles (a kernel
///   and its split-K twin) write them once and config `i` is the same tile in each. The
///   list receives the kernel (its annotation first, without `configs = ..`) and puts its
///   `#[config]`s after the annotation:
///
///   ```ignore
///   macro_rules! tiles {
///       (#[$($kernel:tt)*] $($item:tt)*) => {
///           #[$($kernel)*]
///           #[config(BN = 64, WK = 2)]
///           #[config(BN = 128, WK = 1)]
///           $($item)*
///       };
///   }
///   #[megaops::kernel(block = 2 * BN * WK, output(y[n] = [pid_n: BN]), configs = tiles!)]
///   pub unsafe fn gemv(y: *mut f32, n: u32) { /* ... */ }
///   ```
///
///   The list must be in scope where the kernel is (defined above it, or imported), and
///   the kernel then has no `#[config]` of its own. PTX entry names are as if the
///   `#[config]`s were written on the kernel.
/// - **Grid.** The axes of `tiles(...)` in that order; otherwise every axis the tilings
///   select, in order of first appearance with outputs before inputs, each with extent
///   `DIM.div_ceil(SIZE)` of the first output (else input) dimension it selects. A split
///   axis no dimension selects, and a kernel without `input`/`output`, need `tiles(...)`.
///   One to four axes. In the body each axis is a `u32` local: this tile's coordinate,
///   after the launch's CTA remap.
///
/// # What is generated
///
/// For tile config `i` of kernel `name`:
///
/// - nvptx64: `#[unsafe(no_mangle)] pub unsafe extern "ptx-kernel" fn <entry>(<the
///   parameters>, ctx: KernelCtx, <one TileSync per input/output, in signature order>)`,
///   where `<entry>` is `name__<CONST><value>_..` from the config's constants
///   (`gemv__BN16_WK8_U4_PF2_MIN_CTAS0`, readable in profilers), or `name__cfg<i>` for a
///   config without literal constants or whose name another config shares. This entry
///   has no tile-trace code; a second one, `<entry>__traced`, has it and runs the traced
///   launches (`ConfigInfo::traced_entry`);
/// - host: `unsafe fn __megaops_cpu_name__cfg<i>(<same>)` with the kernel's visibility,
///   the same body for the CPU backend (one generator emits both), which also feeds the
///   CPU backend's out-of-tile read check (`VgpuConfig::check_reads`): it calls
///   `watch_input` for each input at the start of each kernel tile, and every
///   dereference, `.read()` or `ptr::read(..)` whose operand mentions an input goes
///   through `ReadProbe`, which checks pointers and references and passes anything else
///   unchanged.
///
/// The body: the config constants; `kernel_begin_cta`; the tile
/// `remap_tile(block_idx_x())`, returning if past the grid (persistent: a loop over
/// `t += grid_dim_x()`); the axis coordinates from `tile_coords`; the element region of
/// each synchronised parameter's kernel tile (per dimension `tile_region(coord, SIZE,
/// DIM)`, or `(0, DIM)` for `_`), computed once so that the user's own bindings cannot
/// change what is waited for; then the user's statements inside a closure, so that a
/// `return` ends the tile and every thread still reaches the signal barrier. The
/// statements are not wrapped in `unsafe`: each unsafe operation needs its own block, as
/// in any `unsafe fn` (the generated functions deny `unsafe_op_in_unsafe_fn`); only the
/// injected calls carry their own `unsafe` blocks. **Before the
/// first top-level statement that mentions an input** the macro inserts
/// `if !wait_input(..) { failed = true; return; }` (inputs first mentioned by the same
/// statement wait in annotation order). After the closure, one release for all outputs
/// (`begin_signals`: a barrier and a fence), then `signal_tiles` for each output with the
/// producer's kernel tile and split (`split = AXIS`: that axis' extent and this tile's
/// coordinate along it).
///
/// `#[prefetch]` marks top-level statements that run before any wait (paper §3.2: load
/// weights no kernel in flight writes); they must not mention an input and must precede
/// every statement that does.
///
/// On the host, `mod name` (the kernel's visibility; its docs plus a generated
/// description of the grid, each tensor's kernel tile and the configs) holds
/// `CONFIGS: &[ConfigInfo]`, `Consts` and `CONSTS: &[Consts]`, `launch(on, args..)` and
/// `launch_with(on, &LaunchOptions, args..)`. The configs' constants are typed data the
/// host reads, so that code picks a config by its properties, never by its index or by
/// parsing its name: `CONFIGS[i].consts` lists `(NAME, ConfigValue)` pairs (constants of
/// primitive types: integers, floats, `bool`) with accessors (`CONFIGS[i].u32("BN")`,
/// `.usize(..)`, `.bool(..)`, `.int(..)` for any integer type, `.get(..)`), and
/// `CONSTS[i]` is a `Consts { BN: u32, .. }` with one field per constant, named and typed
/// as written (`name::CONSTS.iter().position(|c| c.BN == 128 && c.WK == 1)`). An input `x: *const T` of rank R is passed as `&(impl AsInput<T, R> +
/// ?Sized)` (a `Tensor<T>`, or a `Tiled<T, D>` whose tiling `D` has rank R), an output as
/// `&mut (impl AsOutput<T, R> + ?Sized)`, other `*const T`/`*mut T` as `&Tensor<T>`/`&mut
/// Tensor<T>`, values as they are. The launcher loads `crate::__MEGAOPS_PTX`
/// (`megaops::kernel_crate!()`).
///
/// Generated locals use mixed-site hygiene: the body can neither see nor shadow them.
/// The body closure carries no `#[inline(always)]` (attributes on closure expressions
/// are unstable); LLVM inlines it, being called once (checked in the PTX).
///
/// # Limits
///
/// "Mentions" is a token test: a local that shadows an input's name makes the wait come
/// earlier than needed (harmless), but a read hidden in a macro's format string
/// (`"{a}"`) is not seen. Paths relative to the kernel's module (`self::T`) in parameter
/// types do not resolve inside the launcher module; use plain or crate paths.
///
/// # Errors
///
/// Every mistake is reported at the tokens that cause it, all at once; the function is
/// still emitted (helper attributes removed, axes and the first config's constants bound),
/// and so is a stub of its launcher module (`CONFIGS` and `CONSTS` empty, `launch` /
/// `launch_with` taking what call sites pass, `&mut` arguments reborrowed), so that
/// follow-up errors in the body and at the call sites stay out of the way: one mistake,
/// one error. (A kernel in an `impl` or `trait` block gets no stub: a module cannot go
/// there.) `tests/macro-ui/tests/ui` (package `megaops-macro-ui`) has one case per message.
#[proc_macro_attribute]
pub fn kernel(attr: proc_macro::TokenStream, item: proc_macro::TokenStream) -> proc_macro::TokenStream {
    expand_kernel(attr.into(), item.into(), site::container_of).into()
}

/// Parse → validate → expand, or the fallback with every error found. `container` tells
/// whether the function named so sits in an `impl` or `trait` block.
fn expand_kernel(
    attr: TokenStream,
    item: TokenStream,
    container: impl FnOnce(&str) -> Option<site::Container>,
) -> TokenStream {
    let mut cx = ctxt::Ctxt::new();
    let func: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(_) => {
            let err = syn::Error::new_spanned(
                &item,
                "`#[megaops::kernel]` applies to functions: `unsafe fn name(...) { ... }`",
            );
            return fallback::emit(vec![err], None, None, false)
                .into_iter()
                .chain(item)
                .collect();
        }
    };
    // `configs = list!`: the list puts its `#[config]`s after the annotation (without that
    // item) and calls this macro again, which then checks everything.
    if let Some((list, rest)) = attr::configs_list(&attr)
        && !func.attrs.iter().any(attr::is_config)
    {
        return quote::quote!(#list! { #[::megaops::kernel(#rest)] #func });
    }
    let container = container(&func.sig.ident.to_string());
    if let Some(c) = container {
        cx.error_spanned_by(&func.sig.ident, valid::not_free_message(&func.sig.ident, c));
    }
    let kernel = ast::Kernel::from_syn(attr, func.clone(), &mut cx);
    valid::check(&kernel, &mut cx);
    if !cx.is_empty() {
        return fallback::emit(cx.into_errors(), Some(&kernel), Some(func), container.is_none());
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
