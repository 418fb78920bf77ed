//! The tile synchronisation woven into a kernel body (paper Listing 3): element regions
//! of the kernel tile, the waits injected before the first statement that reads each
//! input, and the signals after the body.

use super::{Plan, SyncPlan, cast, checked, local};
use crate::ast::MAX_RANK;
use crate::attr::Role;
use crate::paths;
use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::Expr;
use syn::visit_mut::{self, VisitMut};

/// `let __megaops_region_x: [(u32, u32); 4] = [...];` for every synchronised parameter:
/// per dimension `tile_region(coord, SIZE, EXTENT)` or `(0, EXTENT)` for `_`, padded
/// with `(0, 0)`. Computed once per tile, before the user's statements, so that the
/// user's own bindings cannot change what is waited for or signalled.
pub fn regions(plan: &Plan) -> TokenStream {
    let tile_region = paths::tile_region();
    let lets = plan.syncs.iter().map(|s| {
        let mut dims: Vec<TokenStream> = s
            .dims
            .iter()
            .map(|d| {
                let extent = d.extent;
                match d.tile {
                    Some((_, axis, size)) => {
                        let (size, extent) = (cast(size, "u32"), cast(extent, "u32"));
                        quote!(#tile_region(#axis, #size, #extent))
                    }
                    None => {
                        let extent = cast(extent, "u32");
                        quote!((0u32, #extent))
                    }
                }
            })
            .collect();
        dims.resize(MAX_RANK, quote!((0u32, 0u32)));
        let region = &s.region_ident;
        quote!(let #region: [(u32, u32); #MAX_RANK] = [#(#dims),*];)
    });
    quote!(#(#lets)*)
}

/// The wait for input `s`: on failure the tile is abandoned (`failed` set, the body
/// closure returns) and the CTA signals nothing; on success a traced body (`traced`)
/// notes when the wait ended.
pub fn wait(s: &SyncPlan, traced: bool) -> TokenStream {
    let wait_input = paths::wait_input();
    let (ctx, tile, failed) = (
        local("__megaops_ctx"),
        local("__megaops_tile"),
        local("__megaops_failed"),
    );
    let (sync, region) = (&s.sync_ident, &s.region_ident);
    let note = traced.then(|| {
        let (trace_waited, waited) = (paths::trace_waited(), local("__megaops_trace_waited"));
        quote!(#trace_waited(&#ctx, &mut #waited);)
    });
    quote! {
        // SAFETY: the launcher built `sync` for this input's tensor and `region` is this
        // kernel tile's element region of it.
        if !unsafe { #wait_input(&#ctx, #tile, &#sync, &#region) } {
            #failed = true;
            return;
        }
        #note
    }
}

/// CPU-backend body: starts the out-of-tile read check of every synchronised input for
/// this kernel tile (`watch_input`, a no-op unless the virtual GPU checks reads).
pub fn watches(plan: &Plan) -> TokenStream {
    let (ctx, tile) = (local("__megaops_ctx"), local("__megaops_tile"));
    let watch_input = paths::cpu_watch_input();
    let lets = plan.syncs.iter().filter(|s| s.sync.role() == Role::Input).map(|s| {
        let (name, elem, sync) = (s.sync.name(), s.elem, &s.sync_ident);
        quote! {
            #watch_input(&#ctx, #tile, #name as *const u8, ::core::mem::size_of::<#elem>(), &#sync);
        }
    });
    quote!(#(#lets)*)
}

/// The user's top-level statements with the waits inserted: each input's wait goes
/// right before the first statement that mentions it; inputs first mentioned by the
/// same statement wait in annotation order. `host`: the CPU-backend body, where every
/// dereference, `.read()` / `ptr::read(..)` whose operand mentions an input goes through
/// the read check (`ReadProbe`), which checks pointers and references and passes any
/// other operand unchanged. `traced`: the waits note their end for the tile trace.
pub fn body_with_waits(plan: &Plan, host: bool, traced: bool) -> TokenStream {
    let inputs: Vec<&SyncPlan> = plan
        .k
        .syncs
        .iter()
        .filter(|s| s.role() == Role::Input)
        .filter_map(|s| plan.syncs.iter().find(|p| std::ptr::eq(p.sync, s)))
        .collect();
    let mut waited = vec![false; inputs.len()];
    let mut out = TokenStream::new();
    for st in &plan.k.stmts {
        for (i, input) in inputs.iter().enumerate() {
            if !waited[i] && st.mention_of(input.sync.name()).is_some() {
                waited[i] = true;
                out.extend(wait(input, traced));
            }
        }
        if host {
            let mut stmt = st.stmt.clone();
            ProbeReads {
                inputs: inputs.iter().map(|i| i.sync.name()).collect(),
            }
            .visit_stmt_mut(&mut stmt);
            stmt.to_tokens(&mut out);
        } else {
            st.stmt.to_tokens(&mut out);
        }
    }
    out
}

/// Rewrites the reads of a CPU-backend body: `*e`, `e.read()` (also `read_volatile`,
/// `read_unaligned`) and `ptr::read(e)` where `e` mentions an input.
struct ProbeReads<'a> {
    inputs: Vec<&'a syn::Ident>,
}

/// Functions and methods that read through a pointer.
const READS: &[&str] = &["read", "read_volatile", "read_unaligned"];

impl ProbeReads<'_> {
    fn mentions_input(&self, e: &Expr) -> bool {
        let tokens = e.to_token_stream();
        self.inputs
            .iter()
            .any(|i| crate::ast::first_mention(tokens.clone(), i).is_some())
    }

    /// `{ use ...; ReadProbe::new(e).probe() }`.
    fn probe(e: &mut Expr) {
        let (probe, pointer, other) = (paths::read_probe(), paths::probe_pointer(), paths::probe_other());
        let inner = std::mem::replace(e, Expr::Verbatim(TokenStream::new()));
        *e = Expr::Verbatim(quote! {{
            #[allow(unused_imports)]
            use #pointer as _;
            #[allow(unused_imports)]
            use #other as _;
            #probe::new(#inner).probe()
        }});
    }
}

impl VisitMut for ProbeReads<'_> {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        // `&raw const *p` only takes an address: check nothing there.
        if let Expr::RawAddr(r) = e
            && let Expr::Unary(u) = &mut *r.expr
            && matches!(u.op, syn::UnOp::Deref(_))
        {
            return self.visit_expr_mut(&mut u.expr);
        }
        visit_mut::visit_expr_mut(self, e);
        match e {
            Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) && self.mentions_input(&u.expr) => {
                Self::probe(&mut u.expr);
            }
            Expr::MethodCall(m)
                if m.args.is_empty() && READS.iter().any(|r| m.method == r) && self.mentions_input(&m.receiver) =>
            {
                Self::probe(&mut m.receiver);
            }
            Expr::Call(c)
                if c.args.len() == 1
                    && matches!(&*c.func, Expr::Path(p) if p.path.segments.last().is_some_and(|s| READS.iter().any(|r| s.ident == r)))
                    && self.mentions_input(&c.args[0]) =>
            {
                if let Some(arg) = c.args.first_mut() {
                    Self::probe(arg);
                }
            }
            _ => {}
        }
    }
}

/// The signals after the body: one release for all outputs (`begin_signals`: a barrier
/// and one fence), then each output's reductions in signature order (`signal_tiles`), so
/// that a kernel with several outputs does not release one after another. Every thread
/// reaches them (the body is a closure, so a user `return` ends only the closure).
pub fn signals(plan: &Plan) -> TokenStream {
    let (begin_signals, signal_tiles) = (paths::begin_signals(), paths::signal_tiles());
    let producer_tile = paths::producer_tile();
    let (ctx, failed, signalling) = (
        local("__megaops_ctx"),
        local("__megaops_failed"),
        local("__megaops_signalling"),
    );
    let outputs: Vec<&SyncPlan> = plan.syncs.iter().filter(|s| s.sync.role() == Role::Output).collect();
    if outputs.is_empty() {
        return TokenStream::new();
    }
    let syncs = outputs.iter().map(|s| &s.sync_ident);
    let sigs = outputs.iter().map(|s| {
        let mut ktile: Vec<TokenStream> = s
            .dims
            .iter()
            .map(|d| match d.tile {
                Some((_, _, size)) => cast(size, "u32"),
                None => quote!(0u32),
            })
            .collect();
        ktile.resize(MAX_RANK, quote!(0u32));
        let (split, split_index) = match s.split {
            Some((i, axis)) => (quote!(#ctx.tile_grid[#i]), quote!(#axis)),
            None => (quote!(1u32), quote!(0u32)),
        };
        let (sync, region) = (&s.sync_ident, &s.region_ident);
        quote! {
            // SAFETY: the launcher built `sync` for this tensor, the body wrote the kernel
            // tile `region` (the kernel's documented contract), and `begin_signals`
            // released the CTA's stores for every output.
            unsafe {
                #signal_tiles(
                    &#sync,
                    &#region,
                    &#producer_tile { ktile: [#(#ktile),*], split: #split, split_index: #split_index },
                    #signalling
                )
            };
        }
    });
    quote! {
        let #signalling = #begin_signals(&[#(&#syncs),*], #failed);
        #(#sigs)*
    }
}

/// Launcher: the `&[TileDim]` of a synchronised parameter.
pub fn tile_dims(plan: &Plan, s: &SyncPlan) -> TokenStream {
    let tile_dim = paths::tile_dim();
    let what = format!("the kernel tile of `{}`", s.sync.name());
    let dims = s.dims.iter().map(|d| match d.tile {
        Some((axis, _, size)) => {
            let size = checked::cast(plan, size, "u64", &what);
            quote!(#tile_dim::axis(#axis, #size))
        }
        None => quote!(#tile_dim::WHOLE),
    });
    quote!(&[#(#dims),*])
}

/// Launcher: the `&[u64]` shape of a synchronised parameter.
pub fn shape(plan: &Plan, s: &SyncPlan) -> TokenStream {
    let what = format!("the shape of `{}`", s.sync.name());
    let dims = s.dims.iter().map(|d| checked::cast(plan, d.extent, "u64", &what));
    quote!(&[#(#dims),*])
}
