//! Every user error the macro reports, one function per rule. All rules run, and all
//! errors are reported together; expansion only starts when none was found.

use crate::ast::{Axis, Kernel, MAX_RANK, ParamKind};
use crate::attr::{self, ArgItem, Role, SyncOption, TileCoord};
use crate::ctxt::Ctxt;
use proc_macro2::Span;
use quote::ToTokens;
use std::collections::HashSet;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{Ident, Type};

/// Runs every rule on `k`.
pub fn check(k: &Kernel, cx: &mut Ctxt) {
    check_fn_qualifiers(k, cx);
    check_generics(k, cx);
    check_return_type(k, cx);
    check_params(k, cx);
    check_unknown_keys(k, cx);
    check_configs_list(k, cx);
    check_duplicate_keys(k, cx);
    check_block(k, cx);
    check_sync_params(k, cx);
    check_duplicate_syncs(k, cx);
    check_pointer_kinds(k, cx);
    check_ranks(k, cx);
    check_sync_options(k, cx);
    let axes = k.axes();
    check_grid(k, &axes, cx);
    check_split(k, &axes, cx);
    check_config_sets(k, cx);
    check_config_types(k, cx);
    check_undefined_constants(k, &axes, cx);
    crate::valid_values::check_values(k, cx);
    check_name_clashes(k, &axes, cx);
    check_reads_and_writes(k, cx);
    check_prefetch(k, cx);
    check_tensors(k, cx);
}

/// `tensor(p[...])` names a plain pointer parameter, once; and every plain pointer
/// parameter has a declared shape, so that the launcher can check the tensor it is given
/// (an unchecked pointer would let safe host code make the kernel read out of bounds).
fn check_tensors(k: &Kernel, cx: &mut Ctxt) {
    for (i, t) in k.tensors.iter().enumerate() {
        let (param, shape) = (&t.param, &t.shape);
        let Some(p) = k.params.iter().find(|p| p.name.as_ref() == Some(param)) else {
            let params = names(k.params.iter().filter_map(|p| p.name.as_ref().map(Ident::to_string)));
            cx.error_spanned_by(
                param,
                format!(
                    "`{param}` is not a parameter of `{}`; its parameters are {params}",
                    k.name()
                ),
            );
            continue;
        };
        if k.tensors[..i].iter().any(|q| q.param == *param) {
            cx.error_spanned_by(
                param,
                format!("the shape of `{param}` is declared twice; keep one `tensor(...)`"),
            );
        }
        if k.syncs.iter().any(|s| s.name() == param) {
            cx.error_spanned_by(
                param,
                format!("`{param}` already has its shape in its `input(...)`/`output(...)`; drop the `tensor(...)`"),
            );
        }
        if !matches!(p.kind, ParamKind::ConstPtr(_) | ParamKind::MutPtr(_)) {
            cx.error_spanned_by(
                param,
                format!("`tensor(...)` declares the shape of a pointer parameter; `{param}` is not one"),
            );
        }
        if shape.is_empty() || shape.len() > 4 {
            cx.error_spanned_by(param, format!("`{param}` needs 1 to 4 dimensions, not {}", shape.len()));
        }
    }

    for p in &k.params {
        let Some(name) = &p.name else { continue };
        let plain_ptr = matches!(p.kind, ParamKind::ConstPtr(_) | ParamKind::MutPtr(_));
        let declared = k.syncs.iter().any(|s| s.name() == name) || k.tensors.iter().any(|t| t.param == *name);
        if plain_ptr && !declared {
            cx.error_spanned_by(
                &p.arg,
                format!(
                    "declare the shape of `{name}`, e.g. `tensor({name}[n, k])`: the launcher checks every tensor \
                     against it, so that a wrong tensor is an error instead of an out-of-bounds access"
                ),
            );
        }
    }
}

fn names(list: impl IntoIterator<Item = String>) -> String {
    let v: Vec<String> = list.into_iter().map(|n| format!("`{n}`")).collect();
    if v.is_empty() { "none".to_string() } else { v.join(", ") }
}

fn ty_text(t: &Type) -> String {
    crate::text::tokens_text(t.to_token_stream())
}

/// `unsafe` required; `async`, `const`, `extern` and variadics refused.
fn check_fn_qualifiers(k: &Kernel, cx: &mut Ctxt) {
    let sig = &k.item.sig;
    if sig.unsafety.is_none() {
        cx.error_spanned_by(
            sig.fn_token,
            format!(
                "a MegaOps kernel must be an `unsafe fn`: its caller promises that the pointers are valid for the \
                 tiles it reads and writes; write `unsafe fn {}(...)`",
                sig.ident
            ),
        );
    }
    if let Some(t) = &sig.asyncness {
        cx.error_spanned_by(t, "a kernel cannot be `async`: remove `async`");
    }
    if let Some(t) = &sig.constness {
        cx.error_spanned_by(t, "a kernel cannot be a `const fn`: remove `const`");
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned_by(
            abi,
            "remove the ABI: `#[megaops::kernel]` generates the `extern \"ptx-kernel\"` entry points itself",
        );
    }
    if let Some(v) = &sig.variadic {
        cx.error_spanned_by(
            v,
            "a kernel cannot be variadic: the PTX ABI needs raw pointers or plain values",
        );
    }
}

/// No generic parameters or where clauses.
fn check_generics(k: &Kernel, cx: &mut Ctxt) {
    let g = &k.item.sig.generics;
    let msg = "a PTX entry must be concrete: remove the generic parameters and use #[config] constants \
               (one PTX entry per #[config]) instead";
    if !g.params.is_empty() {
        cx.error_spanned_by(&g.params, msg);
    } else if let Some(w) = &g.where_clause {
        cx.error_spanned_by(w, msg);
    }
}

/// A kernel returns nothing.
fn check_return_type(k: &Kernel, cx: &mut Ctxt) {
    if let syn::ReturnType::Type(_, ty) = &k.item.sig.output {
        cx.error_spanned_by(
            &k.item.sig.output,
            format!(
                "a kernel returns nothing: remove `-> {}` and write results through a `*mut` parameter",
                ty_text(ty)
            ),
        );
    }
}

/// Parameters are identifiers of raw-pointer or plain-value type.
fn check_params(k: &Kernel, cx: &mut Ctxt) {
    for p in &k.params {
        if let ParamKind::Unsupported(what) = &p.kind {
            match &p.arg {
                syn::FnArg::Receiver(r) => cx.error_spanned_by(
                    r,
                    "kernels must be free functions: remove `self` (and move the kernel out of its `impl` block, \
                     if it is in one)",
                ),
                syn::FnArg::Typed(pt) => {
                    let instead = match pointer_instead(&pt.ty) {
                        Some(ptr) => format!("write `{ptr}`"),
                        None => "use `*const T` for a buffer the kernel reads, `*mut T` for one it writes".to_string(),
                    };
                    cx.error_spanned_by(
                        &pt.ty,
                        format!("this parameter is {what}: the PTX ABI needs raw pointers or plain values; {instead}"),
                    )
                }
            }
            continue;
        }
        if p.name.is_none()
            && let syn::FnArg::Typed(pt) = &p.arg
        {
            cx.error_spanned_by(
                &pt.pat,
                "a kernel parameter must be a plain identifier (the PTX ABI needs raw pointers or plain values): \
                     name it and destructure inside the body",
            );
        }
    }
}

/// The error for a kernel inside an `impl` or `trait` block.
pub fn not_free_message(name: &Ident, c: crate::site::Container) -> String {
    let block = c.block();
    format!(
        "kernels must be free functions: `{name}` is inside {block} block, but `#[megaops::kernel]` emits a \
         launcher module `{name}` beside the function, which {block} block cannot hold; move `{name}` to module \
         level (its launcher is then `{name}::launch`)"
    )
}

/// The raw pointer to use instead of a reference or slice type.
fn pointer_instead(ty: &Type) -> Option<String> {
    let (mutable, elem) = match ty {
        Type::Reference(r) => (r.mutability.is_some(), &*r.elem),
        _ => return None,
    };
    let elem = match elem {
        Type::Slice(s) => &*s.elem,
        other => other,
    };
    Some(format!("*{} {}", if mutable { "mut" } else { "const" }, ty_text(elem)))
}

/// Every annotation key is known.
fn check_unknown_keys(k: &Kernel, cx: &mut Ctxt) {
    for item in &k.args.items {
        if let ArgItem::Unknown { key } = item {
            cx.error_spanned_by(
                key,
                format!("unknown kernel annotation `{key}`; expected one of {}", attr::KEYS),
            );
        }
    }
}

/// `configs = list!` is the kernel's whole config list: it goes without `#[config]`s.
/// (A kernel with only `configs = list!` never gets here: the macro hands it to the list.)
fn check_configs_list(k: &Kernel, cx: &mut Ctxt) {
    for item in &k.args.items {
        if let ArgItem::Configs { key, list } = item
            && k.configs.iter().any(|c| c.attr.is_some())
        {
            let list = crate::text::tokens_text(list.to_token_stream());
            cx.error_spanned_by(
                key,
                format!(
                    "`configs = {list}!` gives this kernel its tile configs: move these #[config]s into `{list}!`, \
                     or drop the `configs = ...`"
                ),
            );
        }
    }
}

/// `block`, `smem`, `tiles`, `persistent` and `debug` are given at most once.
fn check_duplicate_keys(k: &Kernel, cx: &mut Ctxt) {
    let mut seen: HashSet<String> = HashSet::new();
    for item in &k.args.items {
        let key = match item {
            ArgItem::Block { key, .. }
            | ArgItem::Smem { key, .. }
            | ArgItem::Tiles { key, .. }
            | ArgItem::MinCtas { key, .. }
            | ArgItem::Configs { key, .. }
            | ArgItem::Persistent { key }
            | ArgItem::Debug { key } => key,
            ArgItem::Sync(_) | ArgItem::Unknown { .. } | ArgItem::Tensor { .. } | ArgItem::Check { .. } => continue,
        };
        if !seen.insert(key.to_string()) {
            cx.error_spanned_by(key, format!("`{key}` is given twice; keep one"));
        }
    }
}

/// `block` is given and has 1 to 3 dimensions.
fn check_block(k: &Kernel, cx: &mut Ctxt) {
    match &k.block {
        // A malformed item may have been the `block`: do not pile a guess on top.
        None if k.args.syntax_errors => {}
        None => cx.error_at(
            Span::call_site(),
            "missing `block = THREADS`: say how many threads each CTA runs, e.g. `block = 128` or `block = (32, 4, 1)`",
        ),
        Some(syn::Expr::Tuple(t)) if t.elems.is_empty() || t.elems.len() > 3 => {
            cx.error_spanned_by(
                t,
                format!("`block` has 1 to 3 dimensions (x, y, z), not {}", t.elems.len()),
            );
        }
        Some(_) => {}
    }
}

/// Every annotated name is a parameter.
fn check_sync_params(k: &Kernel, cx: &mut Ctxt) {
    for s in &k.syncs {
        if s.param.is_none() {
            let params = names(k.params.iter().filter_map(|p| p.name.as_ref().map(Ident::to_string)));
            cx.error_spanned_by(
                s.name(),
                format!(
                    "`{}` is not a parameter of `{}`; its parameters are {params}",
                    s.name(),
                    k.name()
                ),
            );
        }
    }
}

/// A parameter is annotated at most once.
fn check_duplicate_syncs(k: &Kernel, cx: &mut Ctxt) {
    for (i, s) in k.syncs.iter().enumerate() {
        if s.param.is_some() && k.syncs[..i].iter().any(|t| t.param == s.param) {
            cx.error_spanned_by(
                s.name(),
                format!(
                    "`{}` is annotated twice; a parameter is either one `input(...)` or one `output(...)`",
                    s.name()
                ),
            );
        }
    }
}

/// Inputs are `*const T`, outputs `*mut T`.
fn check_pointer_kinds(k: &Kernel, cx: &mut Ctxt) {
    for s in &k.syncs {
        let Some(p) = s.param.and_then(|i| k.params.get(i)) else {
            continue;
        };
        if k.syncs
            .iter()
            .position(|t| t.param == s.param)
            .is_some_and(|first| !std::ptr::eq(&k.syncs[first], s))
        {
            continue; // a repeated declaration, reported by check_duplicate_syncs
        }
        let ok = match (s.role(), &p.kind) {
            (_, ParamKind::Unsupported(_)) => true, // reported by check_params
            (Role::Input, ParamKind::ConstPtr(_)) | (Role::Output, ParamKind::MutPtr(_)) => true,
            _ => false,
        };
        if !ok {
            let (want, why) = match s.role() {
                Role::Input => ("*const T", "the kernel only reads it"),
                Role::Output => ("*mut T", "the kernel writes it"),
            };
            cx.error_spanned_by(
                &p.ty,
                format!(
                    "{} `{}` must be a `{want}` parameter ({why}), found `{}`",
                    s.role().keyword(),
                    s.name(),
                    ty_text(&p.ty)
                ),
            );
        }
    }
}

/// Shape and kernel tile have the same number of dimensions, 1 to 4.
fn check_ranks(k: &Kernel, cx: &mut Ctxt) {
    for s in &k.syncs {
        let (rank, coords) = (s.decl.shape.len(), s.decl.tile.len());
        if rank == 0 || rank > MAX_RANK {
            cx.error_at(
                attr::bracket_span(&s.decl.shape_bracket),
                format!(
                    "`{}` has {rank} dimensions; a synchronised tensor has 1 to {MAX_RANK}",
                    s.name()
                ),
            );
        } else if rank != coords {
            let shape = crate::text::list_text(&s.decl.shape);
            cx.error_at(
                attr::bracket_span(&s.decl.tile_bracket),
                format!(
                    "`{}` has {rank} dimension{} (`{shape}`) but its kernel tile gives {coords} coordinate{}: \
                     write one `axis: SIZE` or `_` (whole dimension) per dimension",
                    s.name(),
                    plural(rank),
                    plural(coords)
                ),
            );
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Options: `split` on outputs only, once; nothing else.
fn check_sync_options(k: &Kernel, cx: &mut Ctxt) {
    for s in &k.syncs {
        let mut splits = 0;
        for o in &s.decl.options {
            match o {
                SyncOption::Unknown { key } => {
                    let valid = match s.role() {
                        Role::Input => "inputs take no options".to_string(),
                        Role::Output => "the only option is `split = AXIS`".to_string(),
                    };
                    cx.error_spanned_by(
                        key,
                        format!("unknown option `{key}` of `{}(...)`; {valid}", s.role().keyword()),
                    );
                }
                SyncOption::Split { key, .. } if s.role() == Role::Input => {
                    cx.error_spanned_by(
                        key,
                        "`split` applies to outputs only: it says that several kernel tiles add into one output tile",
                    );
                }
                SyncOption::Split { key, .. } => {
                    splits += 1;
                    if splits > 1 {
                        cx.error_spanned_by(key, "`split` is given twice; an output has one split-K axis");
                    }
                }
            }
        }
    }
}

/// The grid has 1 to 4 axes, `tiles(...)` has no duplicates, and every axis a tiling
/// uses is in it.
fn check_grid(k: &Kernel, axes: &[Axis], cx: &mut Ctxt) {
    if axes.is_empty() {
        match k.syncs.first() {
            _ if k.args.syntax_errors => {}
            None => cx.error_at(
                Span::call_site(),
                "a kernel without `input(...)`/`output(...)` must declare its kernel-tile grid: add \
                 `tiles(i = COUNT)` (one CTA per kernel tile)",
            ),
            Some(s) => cx.error_at(
                attr::bracket_span(&s.decl.tile_bracket),
                "no tiling selects a kernel tile with `axis: SIZE`, so there is no kernel-tile grid: tile a \
                 dimension (e.g. `[i: 256]`) or declare the grid with `tiles(i = COUNT)`",
            ),
        }
        return;
    }
    if let Some(tiles) = &k.tiles {
        for (i, a) in tiles.iter().enumerate() {
            if tiles[..i].iter().any(|b| b.name == a.name) {
                cx.error_spanned_by(&a.name, format!("axis `{}` is declared twice in `tiles(...)`", a.name));
            }
        }
        for s in &k.syncs {
            for c in &s.decl.tile {
                if let TileCoord::Axis { axis, .. } = c
                    && !tiles.iter().any(|a| a.name == *axis)
                {
                    let declared = names(tiles.iter().map(|a| a.name.to_string()));
                    cx.error_spanned_by(
                        axis,
                        format!(
                            "axis `{axis}` is not in `tiles(...)` ({declared}); add it there or use a declared axis"
                        ),
                    );
                }
            }
        }
    }
    if let Some(extra) = axes.get(MAX_RANK) {
        cx.error_spanned_by(
            &extra.name,
            format!(
                "a kernel-tile grid has at most {MAX_RANK} axes; `{}` would be axis {}",
                extra.name,
                MAX_RANK + 1
            ),
        );
    }
}

/// The split axis is a grid axis with an extent, and does not also select a dimension of
/// the output it splits.
fn check_split(k: &Kernel, axes: &[Axis], cx: &mut Ctxt) {
    for s in &k.syncs {
        let Some(split) = &s.split else { continue };
        if s.role() != Role::Output {
            continue;
        }
        match axes.iter().find(|a| a.name == *split) {
            None => cx.error_spanned_by(
                split,
                format!(
                    "split axis `{split}` is not in `tiles(...)`; add it with its number of tiles, e.g. \
                     `{split} = k.div_ceil(BK)`"
                ),
            ),
            Some(Axis { extent: None, .. }) => cx.error_spanned_by(
                split,
                format!(
                    "the number of tiles along split axis `{split}` cannot be derived: no dimension is tiled by \
                     `{split}: SIZE`; declare the grid with `tiles(...)`, e.g. `tiles(pid_m = ..., pid_n = ..., \
                     {split} = k.div_ceil(BK))`"
                ),
            ),
            Some(_) => {}
        }
        let selects = s
            .decl
            .tile
            .iter()
            .any(|c| matches!(c, TileCoord::Axis { axis, .. } if axis == split));
        if selects {
            cx.error_spanned_by(
                split,
                format!(
                    "`{split}` both selects a dimension of `{}` and splits it; the split axis enumerates kernel tiles \
                     that add into the same output tile, so it must not appear in `{}`'s kernel tile",
                    s.name(),
                    s.name()
                ),
            );
        }
    }
}

/// Every `#[config]` defines the same constants, each once.
fn check_config_sets(k: &Kernel, cx: &mut Ctxt) {
    let Some(first) = k.configs.first() else {
        return;
    };
    for c in &k.configs {
        for (i, x) in c.consts.iter().enumerate() {
            if c.consts[..i].iter().any(|y| y.name == x.name) {
                cx.error_spanned_by(&x.name, format!("`{}` is defined twice in this #[config]", x.name));
            }
        }
    }
    for c in k.configs.iter().skip(1) {
        let Some(attr) = &c.attr else { continue };
        for x in &c.consts {
            if !first.consts.iter().any(|y| y.name == x.name) {
                cx.error_spanned_by(
                    &x.name,
                    format!(
                        "`{}` is not defined by the first #[config]; every #[config] must define the same constants",
                        x.name
                    ),
                );
            }
        }
        let missing: Vec<String> = first
            .consts
            .iter()
            .filter(|y| !c.consts.iter().any(|x| x.name == y.name))
            .map(|y| y.name.to_string())
            .collect();
        if !missing.is_empty() {
            cx.error_spanned_by(
                attr,
                format!(
                    "this #[config] does not define {}, which the first #[config] defines; every #[config] must \
                     define the same constants",
                    names(missing)
                ),
            );
        }
    }
}

/// Every constant has a known type, the same in every config.
fn check_config_types(k: &Kernel, cx: &mut Ctxt) {
    let Some(first) = k.configs.first() else {
        return;
    };
    for c in &k.configs {
        for x in &c.consts {
            let Some(ty) = &x.ty else {
                let value = crate::text::tokens_text(x.value.to_token_stream());
                cx.error_spanned_by(
                    &x.value,
                    format!(
                        "cannot tell the type of `{}` from `{value}`: write `{}: TYPE = {value}`, or give the value a \
                         suffix (`64usize`, `0.5f32`) or a cast (`... as u64`)",
                        x.name, x.name
                    ),
                );
                continue;
            };
            let Some(base) = first
                .consts
                .iter()
                .find(|y| y.name == x.name)
                .and_then(|y| y.ty.as_ref())
            else {
                continue;
            };
            if ty_text(base) != ty_text(ty) {
                cx.error_spanned_by(
                    &x.value,
                    format!(
                        "`{}` is a `{}` here but a `{}` in the first #[config]; every #[config] must give a constant \
                         the same type",
                        x.name,
                        ty_text(ty),
                        ty_text(base)
                    ),
                );
            }
        }
    }
}

/// A constant the annotation names without a path (`BN`, not `crate::BN`) is a `#[config]`
/// constant (or a parameter or axis of that name): otherwise rustc would only say "cannot
/// find value `BN` in this scope", at a place in the generated code.
fn check_undefined_constants(k: &Kernel, axes: &[Axis], cx: &mut Ctxt) {
    let mut known: Vec<String> = Vec::new();
    for c in &k.configs {
        for x in &c.consts {
            if !known.contains(&x.name.to_string()) {
                known.push(x.name.to_string());
            }
        }
    }
    let defined = names(known.clone());
    known.extend(k.params.iter().filter_map(|p| p.name.as_ref().map(Ident::to_string)));
    known.extend(axes.iter().map(|a| a.name.to_string()));
    let mut reported: Vec<String> = Vec::new();
    for e in k.annotation_exprs() {
        let mut found = ConstantNames::default();
        found.visit_expr(e);
        for name in found.0 {
            let text = name.to_string();
            if known.contains(&text) || reported.contains(&text) {
                continue;
            }
            let msg = if k.configs.iter().any(|c| c.attr.is_some()) {
                format!(
                    "no `#[config]` defines `{text}`; the #[config]s define {defined}. Add `{text}` to every \
                     #[config], or write a constant from outside the kernel with its crate path (`crate::{text}`)"
                )
            } else {
                format!(
                    "no `#[config]` defines `{text}` (this kernel has no #[config]): add `#[config({text} = ...)]`, \
                     or write a constant from outside the kernel with its crate path (`crate::{text}`)"
                )
            };
            cx.error_spanned_by(&name, msg);
            reported.push(text);
        }
    }
}

/// The single-identifier paths in constant case (`BN`, `THREADS`, `K2`) of an expression.
#[derive(Default)]
struct ConstantNames(Vec<Ident>);

impl<'ast> Visit<'ast> for ConstantNames {
    fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
        if p.qself.is_none()
            && p.path.leading_colon.is_none()
            && let Some(ident) = p.path.get_ident()
        {
            let text = ident.to_string();
            let constant_case = text.chars().any(|c| c.is_ascii_uppercase())
                && text
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if constant_case {
                self.0.push(ident.clone());
            }
        }
        syn::visit::visit_expr_path(self, p);
    }
}

/// Axis names and config constants do not shadow parameters or each other.
fn check_name_clashes(k: &Kernel, axes: &[Axis], cx: &mut Ctxt) {
    let params: Vec<&Ident> = k.params.iter().filter_map(|p| p.name.as_ref()).collect();
    let consts: Vec<&Ident> = k
        .configs
        .first()
        .map(|c| c.consts.iter().map(|x| &x.name).collect())
        .unwrap_or_default();
    for a in axes {
        if params.contains(&&a.name) {
            cx.error_spanned_by(
                &a.name,
                format!(
                    "axis `{}` has the name of a parameter; the axis would hide it in the body: rename the axis",
                    a.name
                ),
            );
        } else if consts.contains(&&a.name) {
            cx.error_spanned_by(
                &a.name,
                format!("axis `{}` has the name of a #[config] constant: rename one", a.name),
            );
        }
    }
    for c in &k.configs {
        for x in &c.consts {
            if params.contains(&&x.name) {
                cx.error_spanned_by(
                    &x.name,
                    format!(
                        "#[config] constant `{}` has the name of a parameter: rename one",
                        x.name
                    ),
                );
            }
        }
    }
}

/// Every input is read and every output written somewhere in the body.
fn check_reads_and_writes(k: &Kernel, cx: &mut Ctxt) {
    for s in &k.syncs {
        if s.param.is_none() {
            continue;
        }
        if k.stmts.iter().any(|st| st.mention_of(s.name()).is_some()) {
            continue;
        }
        let msg = match s.role() {
            Role::Input => format!(
                "input `{0}` is never read in the body, so there is no statement to put its wait before: read it, or \
                 remove `input({0} ...)` if the kernel does not need it",
                s.name()
            ),
            Role::Output => format!(
                "output `{0}` is never written in the body, so its data tiles would be signalled without data: write \
                 it, or remove `output({0} ...)`",
                s.name()
            ),
        };
        cx.error_spanned_by(s.name(), msg);
    }
}

/// `#[prefetch]` statements take no arguments, read no synchronised input, come before
/// the first statement that reads one, and are top-level statements.
fn check_prefetch(k: &Kernel, cx: &mut Ctxt) {
    let inputs: Vec<&Ident> = k
        .syncs
        .iter()
        .filter(|s| s.role() == Role::Input && s.param.is_some())
        .map(|s| s.name())
        .collect();
    let mut first_read: Option<&Ident> = None;
    for st in &k.stmts {
        if let Some(attr) = &st.prefetch {
            if !matches!(attr.meta, syn::Meta::Path(_)) {
                cx.error_spanned_by(attr, "`#[prefetch]` takes no arguments");
            }
            if let Some(input) = first_read {
                cx.error_spanned_by(
                    attr,
                    format!(
                        "this `#[prefetch]` statement comes after a statement that reads input `{input}`, so it would \
                         run after the wait: move it above the first read of a synchronised input"
                    ),
                );
            }
            for input in &inputs {
                if let Some(span) = st.mention_of(input) {
                    cx.error_at(
                        span,
                        format!(
                            "a `#[prefetch]` statement runs before the wait for `{input}`'s data tiles, so it must not \
                             read `{input}`: prefetch only data no kernel in flight writes (e.g. weights)"
                        ),
                    );
                }
            }
        }
        if first_read.is_none() {
            first_read = inputs.iter().find(|i| st.mention_of(i).is_some()).copied();
        }
        let mut nested = NestedPrefetch::default();
        nested.visit_stmt(&st.stmt);
        for span in nested.0 {
            cx.error_at(
                span,
                "`#[prefetch]` marks top-level statements of the kernel body only: move this statement out",
            );
        }
    }
}

#[derive(Default)]
struct NestedPrefetch(Vec<Span>);

impl<'ast> Visit<'ast> for NestedPrefetch {
    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        if attr::is_prefetch(a) {
            self.0.push(a.span());
        }
    }
}
