//! Expansion of a validated kernel: per tile config a device entry (nvptx64) and a
//! CPU-backend function (host) sharing one body generator ([`device`]), the
//! synchronisation woven into that body ([`sync`]), and the typed host launcher module
//! ([`launcher`]).
//!
//! Nothing here reports user errors: [`crate::valid`] checked everything first. Where a
//! checked fact is needed again (an axis index, a constant's type), a missing value is
//! skipped rather than reported.
//!
//! Hygiene: every local the expansion introduces (`__megaops_ctx`, regions, the body
//! closure, the launcher's builder) is spanned with [`Span::mixed_site`], like a
//! `macro_rules!` local, so user code can neither see nor shadow it. Axis names, config
//! constants and parameters keep the user's spans: the body uses them.

pub mod checked;
pub mod device;
pub mod launcher;
pub mod sync;

use crate::ast::{Axis, Config, Extent, Kernel, Param, Sync};
use crate::attr::TileCoord;
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Ident, Type};

/// The whole expansion of a validated kernel.
pub fn kernel(k: &Kernel) -> TokenStream {
    let plan = Plan::new(k);
    let device = device::entries(&plan);
    let launcher = launcher::module(&plan);
    quote!(#device #launcher)
}

/// A local of the generated code, invisible to the user's code.
pub fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// What the generators share: the kernel, its grid and its synchronised parameters in
/// signature order.
pub struct Plan<'a> {
    /// The kernel.
    pub k: &'a Kernel,
    /// The kernel-tile grid.
    pub axes: Vec<Axis>,
    /// The synchronised parameters, in signature order.
    pub syncs: Vec<SyncPlan<'a>>,
}

/// One synchronised parameter, resolved against the grid.
pub struct SyncPlan<'a> {
    /// Its declaration.
    pub sync: &'a Sync,
    /// The parameter.
    pub param: &'a Param,
    /// Element type (`T` of `*const T` / `*mut T`).
    pub elem: &'a Type,
    /// Per dimension: its extent and, unless `_`, the axis index, axis and tile size.
    pub dims: Vec<DimPlan<'a>>,
    /// The split-K axis: index and name.
    pub split: Option<(usize, &'a Ident)>,
    /// Device: the `TileSync` parameter; host: the binding's `TileSync`.
    pub sync_ident: Ident,
    /// Device: the precomputed element region of the kernel tile.
    pub region_ident: Ident,
    /// Host: the bound device address.
    pub addr_ident: Ident,
}

/// One dimension of a synchronised parameter.
pub struct DimPlan<'a> {
    /// The dimension's extent (an expression of parameters and constants).
    pub extent: &'a Expr,
    /// Which axis selects the tile, and its size; None for `_`.
    pub tile: Option<(usize, &'a Ident, &'a Expr)>,
}

impl<'a> Plan<'a> {
    /// Resolves `k` (validated) into what the generators need.
    pub fn new(k: &'a Kernel) -> Plan<'a> {
        let axes = k.axes();
        let syncs = k
            .syncs_in_signature_order()
            .into_iter()
            .filter_map(|s| {
                let param = k.params.get(s.param?)?;
                let elem = param.elem()?;
                let dims = s
                    .decl
                    .shape
                    .iter()
                    .zip(&s.decl.tile)
                    .map(|(extent, coord)| DimPlan {
                        extent,
                        tile: match coord {
                            TileCoord::Whole => None,
                            TileCoord::Axis { axis, size } => Kernel::axis_index(&axes, axis).map(|i| (i, axis, size)),
                        },
                    })
                    .collect();
                let split = s
                    .split
                    .as_ref()
                    .and_then(|a| Kernel::axis_index(&axes, a).map(|i| (i, a)));
                let n = s.name().to_string();
                Some(SyncPlan {
                    sync: s,
                    param,
                    elem,
                    dims,
                    split,
                    sync_ident: local(&format!("__megaops_sync_{n}")),
                    region_ident: local(&format!("__megaops_region_{n}")),
                    addr_ident: local(&format!("__megaops_addr_{n}")),
                })
            })
            .collect();
        Plan { k, axes, syncs }
    }

    /// The synchronised plan of parameter `p`, if any.
    pub fn sync_of(&self, p: &Param) -> Option<&SyncPlan<'a>> {
        self.syncs.iter().find(|s| std::ptr::eq(s.param, p))
    }

    /// PTX entry name of config `i`, readable in profilers: `<name>__<CONST><value>_..`
    /// from the config's constants (`gemv__BN16_WK8_U4_PF2_MIN_CTAS0`), or
    /// `<name>__cfg<i>` for a config without constants, one whose values are not all
    /// integer or boolean literals, or one whose name another config of the kernel
    /// shares.
    pub fn entry_name(&self, i: usize) -> Ident {
        let name = self.k.name();
        let labels: Vec<Option<String>> = self.k.configs.iter().map(entry_label).collect();
        let unique = |l: &String| labels.iter().filter(|o| o.as_ref() == Some(l)).count() == 1;
        match labels.get(i).cloned().flatten() {
            Some(label) if unique(&label) => format_ident!("{}__{}", name, label, span = name.span()),
            _ => format_ident!("{}__cfg{}", name, i, span = name.span()),
        }
    }

    /// PTX entry of config `i` with the tile-trace calls, `<entry>__traced`, which a traced
    /// launch runs (configs with launch bounds too).
    pub fn traced_entry_name(&self, i: usize) -> Ident {
        let entry = self.entry_name(i);
        format_ident!("{}__traced", entry, span = entry.span())
    }

    /// CPU-backend function of config `i`: `__megaops_cpu_<name>__cfg<i>`.
    pub fn cpu_name(&self, i: usize) -> Ident {
        let name = self.k.name();
        format_ident!("__megaops_cpu_{}__cfg{}", name, i, span = name.span())
    }

    /// Launcher statements that return a launch error when a kernel tile size the grid
    /// divides by is 0 (a value `valid_values` could not see: an expression or a
    /// parameter).
    pub fn zero_tile_checks(&self) -> Vec<TokenStream> {
        let (error, kernel) = (crate::paths::error(), self.k.name().to_string());
        self.axes
            .iter()
            .filter_map(|a| match a.extent.as_ref()? {
                Extent::Derived { size, .. } => {
                    let text = format!(
                        "the kernel tile size `{}` of axis `{}` is 0: a kernel tile needs at least 1 element",
                        crate::text::tokens_text(quote::ToTokens::to_token_stream(size)),
                        a.name
                    );
                    let size = checked::cast(self, size, "u64", &format!("the tile size of axis `{}`", a.name));
                    Some(quote! {
                        if #size == 0 {
                            return ::core::result::Result::Err(#error::launch(#kernel, #text));
                        }
                    })
                }
                Extent::Given(_) => None,
            })
            .collect()
    }

    /// Number of kernel tiles along each axis, as `u64` expressions (launcher).
    pub fn grid_extents(&self) -> Vec<TokenStream> {
        self.axes
            .iter()
            .filter_map(|a| {
                let what = format!("the extent of axis `{}`", a.name);
                match a.extent.as_ref()? {
                    Extent::Given(e) => Some(checked::cast(self, e, "u64", &what)),
                    Extent::Derived { dim, size } => {
                        let (dim, size) = (
                            checked::cast(self, dim, "u64", &what),
                            checked::cast(self, size, "u64", &what),
                        );
                        Some(quote!((#dim).div_ceil(#size)))
                    }
                }
            })
            .collect()
    }
}

/// `(e) as ty` located at `e`, so that a type error in the user's expression points at
/// it, while the tokens stay marked as generated (call-site hygiene), so that lints such
/// as `clippy::unnecessary_cast` do not fire on a cast the user never wrote.
pub fn cast(e: &Expr, ty: &str) -> TokenStream {
    let span = Span::call_site().located_at(e.span());
    let ty = Ident::new(ty, span);
    quote_spanned!(span=> (#e) as #ty)
}

/// `const NAME: TYPE = value;` for every constant of `config`.
pub fn config_consts(config: &Config) -> TokenStream {
    let consts = config.consts.iter().filter_map(|c| {
        let (name, ty, value) = (&c.name, c.ty.as_ref()?, &c.value);
        Some(quote!(#[allow(dead_code, non_upper_case_globals)] const #name: #ty = #value;))
    });
    quote!(#(#consts)*)
}

/// The `megaops::launch::ConfigValue` variant for a constant of type `ty` when `ty` is a
/// primitive written as a plain name (`u32` → `U32`); `None` for any other type, whose
/// constants the launcher's `ConfigInfo::consts` leaves out.
pub fn primitive(ty: &Type) -> Option<&'static str> {
    let ty = match ty {
        Type::Group(g) => &*g.elem,
        Type::Paren(p) => &*p.elem,
        t => t,
    };
    let Type::Path(p) = ty else {
        return None;
    };
    if p.qself.is_some() {
        return None;
    }
    Some(match p.path.get_ident()?.to_string().as_str() {
        "u8" => "U8",
        "u16" => "U16",
        "u32" => "U32",
        "u64" => "U64",
        "usize" => "Usize",
        "i8" => "I8",
        "i16" => "I16",
        "i32" => "I32",
        "i64" => "I64",
        "isize" => "Isize",
        "f32" => "F32",
        "f64" => "F64",
        "bool" => "Bool",
        _ => return None,
    })
}

/// `BN16_WK8_U4` for a config's constants, if it has any and every value is an integer
/// or boolean literal (`m` marks a negative value).
fn entry_label(c: &crate::ast::Config) -> Option<String> {
    if c.consts.is_empty() {
        return None;
    }
    let parts: Option<Vec<String>> = c
        .consts
        .iter()
        .map(|k| Some(format!("{}{}", k.name, literal_text(&k.value)?)))
        .collect();
    Some(parts?.join("_"))
}

/// The digits of an integer literal (suffix dropped), `true`/`false`, or `m<digits>` for
/// a negated integer literal.
fn literal_text(e: &syn::Expr) -> Option<String> {
    match e {
        syn::Expr::Lit(l) => match &l.lit {
            syn::Lit::Int(i) => Some(i.base10_digits().to_string()),
            syn::Lit::Bool(b) => Some(b.value.to_string()),
            _ => None,
        },
        syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => literal_text(&u.expr).map(|d| format!("m{d}")),
        syn::Expr::Paren(p) => literal_text(&p.expr),
        syn::Expr::Group(g) => literal_text(&g.expr),
        _ => None,
    }
}
