//! The typed form of a kernel: the annotation, the tile configs, the parameters and the
//! body, each keeping the syntax it came from so that errors point at the user's tokens.
//!
//! Building it reports only syntax errors; whether the pieces fit together is
//! [`crate::valid`]'s job, and [`crate::expand`] relies on what that checked.

use crate::attr::{self, ArgItem, AxisDecl, ConfigAttr, KernelArgs, Role, SyncDecl, SyncOption, TileCoord};
use crate::ctxt::Ctxt;
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{Attribute, Expr, FnArg, Ident, ItemFn, Pat, Stmt, Type, Visibility};

/// Maximum number of kernel-tile axes and of dimensions of a synchronised tensor
/// (`megaops_device::sync::MAX_RANK`).
pub const MAX_RANK: usize = 4;

/// A kernel as the macro sees it.
pub struct Kernel {
    /// The function as written (spans for signature errors).
    pub item: ItemFn,
    /// The raw annotation items, in order (duplicates and unknown keys included).
    pub args: KernelArgs,
    /// Doc comments of the function.
    pub docs: Vec<Attribute>,
    /// Other attributes of the function (forwarded to the generated functions).
    pub attrs: Vec<Attribute>,
    /// The parameters, in signature order.
    pub params: Vec<Param>,
    /// `block = ...` (first occurrence).
    pub block: Option<Expr>,
    /// `smem = ...` (first occurrence).
    pub smem: Option<Expr>,
    /// `tiles(...)` (first occurrence).
    pub tiles: Option<Vec<AxisDecl>>,
    /// `persistent` given.
    pub persistent: bool,
    /// `min_ctas = ...` (first occurrence): launch bounds.
    pub min_ctas: Option<Expr>,
    /// `tensor(p[dims])` / `scratch(p[len])`: declared shapes of plain pointer parameters.
    pub tensors: Vec<TensorDecl>,
    /// `check(cond, "message")`: preconditions, in order.
    pub checks: Vec<(Expr, syn::LitStr)>,
    /// `debug` given.
    pub debug: bool,
    /// The synchronised parameters, in annotation order.
    pub syncs: Vec<Sync>,
    /// The tile configs; one implicit config without constants when none is written.
    pub configs: Vec<Config>,
    /// The top-level statements of the body.
    pub stmts: Vec<BodyStmt>,
}

/// `tensor(p[dims])` or `scratch(p[len])`.
pub struct TensorDecl {
    /// The parameter.
    pub param: Ident,
    /// Dimensions (`scratch`: the minimum length).
    pub shape: Vec<Expr>,
    /// At least `shape[0]` elements, any shape.
    pub scratch: bool,
}

/// One parameter of the kernel.
pub struct Param {
    /// The parameter as written.
    pub arg: FnArg,
    /// Its name, when the pattern is a plain identifier.
    pub name: Option<Ident>,
    /// Its type (for a receiver, `Self`).
    pub ty: Type,
    /// How it is passed.
    pub kind: ParamKind,
}

/// How a parameter crosses the PTX ABI.
pub enum ParamKind {
    /// `*const T`.
    ConstPtr(Type),
    /// `*mut T`.
    MutPtr(Type),
    /// A plain value.
    Value,
    /// Something the PTX ABI cannot take; the text says what.
    Unsupported(&'static str),
}

/// One `input(...)` or `output(...)` with its parameter resolved.
pub struct Sync {
    /// The declaration.
    pub decl: SyncDecl,
    /// Index of the parameter it annotates, if it exists.
    pub param: Option<usize>,
    /// The split-K axis (outputs; first `split = ...`).
    pub split: Option<Ident>,
}

impl Sync {
    /// The annotated parameter's name as written in the annotation.
    pub fn name(&self) -> &Ident {
        &self.decl.param
    }

    /// Input or output.
    pub fn role(&self) -> Role {
        self.decl.role
    }
}

/// One tile config.
pub struct Config {
    /// The `#[config(...)]` it came from (None for the implicit config).
    pub attr: Option<Attribute>,
    /// Its constants.
    pub consts: Vec<Const>,
}

/// A config constant with its type.
pub struct Const {
    /// Name.
    pub name: Ident,
    /// Type: written, or inferred from the value (None when it cannot be inferred).
    pub ty: Option<Type>,
    /// Value.
    pub value: Expr,
}

/// A top-level statement of the body.
pub struct BodyStmt {
    /// The statement with `#[prefetch]` removed.
    pub stmt: Stmt,
    /// The `#[prefetch]` attribute, if the statement had one.
    pub prefetch: Option<Attribute>,
}

impl BodyStmt {
    /// Where the statement first mentions `name`, if it does.
    pub fn mention_of(&self, name: &Ident) -> Option<Span> {
        first_mention(self.stmt.to_token_stream(), name)
    }
}

/// A kernel-tile grid axis.
pub struct Axis {
    /// Its name, bound as a `u32` in the body.
    pub name: Ident,
    /// Number of kernel tiles along it; None when it cannot be derived.
    pub extent: Option<Extent>,
}

/// Where an axis' number of tiles comes from.
pub enum Extent {
    /// Written in `tiles(...)`.
    Given(Expr),
    /// `dim.div_ceil(size)` of the first output (else input) dimension it selects.
    Derived {
        /// The dimension's extent.
        dim: Expr,
        /// The kernel tile size along it.
        size: Expr,
    },
}

impl Kernel {
    /// Builds the typed form from the annotation tokens and the function, recording
    /// syntax errors in `cx`.
    pub fn from_syn(attr: TokenStream, item: ItemFn, cx: &mut Ctxt) -> Kernel {
        let args = attr::parse_kernel_args(attr, cx);
        let (mut docs, mut attrs, mut config_attrs) = (Vec::new(), Vec::new(), Vec::new());
        for a in &item.attrs {
            if attr::is_config(a) {
                if let Some(c) = attr::parse_config(a, cx) {
                    config_attrs.push(c);
                }
            } else if a.path().is_ident("doc") {
                docs.push(a.clone());
            } else {
                attrs.push(a.clone());
            }
        }
        let params = item.sig.inputs.iter().map(Param::from_arg).collect::<Vec<_>>();
        let mut kernel = Kernel {
            docs,
            attrs,
            block: None,
            smem: None,
            tiles: None,
            persistent: false,
            min_ctas: None,
            tensors: Vec::new(),
            checks: Vec::new(),
            debug: false,
            syncs: Vec::new(),
            configs: typed_configs(config_attrs),
            stmts: item.block.stmts.iter().cloned().map(BodyStmt::from_stmt).collect(),
            params,
            item,
            args: KernelArgs::default(),
        };
        for it in &args.items {
            match it {
                ArgItem::Block { shape, .. } => {
                    kernel.block.get_or_insert_with(|| shape.clone());
                }
                ArgItem::Smem { bytes, .. } => {
                    kernel.smem.get_or_insert_with(|| bytes.clone());
                }
                ArgItem::Tiles { axes, .. } => {
                    kernel.tiles.get_or_insert_with(|| axes.clone());
                }
                ArgItem::Tensor { param, shape, scratch } => kernel.tensors.push(TensorDecl {
                    param: param.clone(),
                    shape: shape.clone(),
                    scratch: *scratch,
                }),
                ArgItem::Check { cond, message, .. } => kernel.checks.push((cond.clone(), message.clone())),
                ArgItem::MinCtas { count, .. } => {
                    kernel.min_ctas.get_or_insert_with(|| count.clone());
                }
                ArgItem::Persistent { .. } => kernel.persistent = true,
                ArgItem::Debug { .. } => kernel.debug = true,
                ArgItem::Sync(decl) => {
                    let param = kernel.params.iter().position(|p| p.name.as_ref() == Some(&decl.param));
                    let split = decl.options.iter().find_map(|o| match o {
                        SyncOption::Split { axis, .. } => Some(axis.clone()),
                        SyncOption::Unknown { .. } => None,
                    });
                    kernel.syncs.push(Sync {
                        decl: decl.clone(),
                        param,
                        split,
                    });
                }
                ArgItem::Unknown { .. } | ArgItem::Configs { .. } => {}
            }
        }
        kernel.args = args;
        kernel
    }

    /// The kernel's name.
    pub fn name(&self) -> &Ident {
        &self.item.sig.ident
    }

    /// The kernel's visibility.
    pub fn vis(&self) -> &Visibility {
        &self.item.vis
    }

    /// The synchronised parameters in signature order (the order of their `TileSync`
    /// parameters and of the launcher's bindings). Declarations of unknown parameters
    /// and repeated declarations are skipped.
    pub fn syncs_in_signature_order(&self) -> Vec<&Sync> {
        let mut out: Vec<&Sync> = Vec::new();
        for (i, _) in self.params.iter().enumerate() {
            if let Some(s) = self.syncs.iter().find(|s| s.param == Some(i)) {
                out.push(s);
            }
        }
        out
    }

    /// The kernel-tile grid: the axes of `tiles(...)`, or else every axis the tilings
    /// use, in order of first appearance (outputs before inputs), each with the extent of
    /// the first dimension it selects.
    pub fn axes(&self) -> Vec<Axis> {
        if let Some(tiles) = &self.tiles {
            return tiles
                .iter()
                .map(|a| Axis {
                    name: a.name.clone(),
                    extent: Some(Extent::Given(a.extent.clone())),
                })
                .collect();
        }
        let mut axes: Vec<Axis> = Vec::new();
        let ordered = self
            .syncs
            .iter()
            .filter(|s| s.role() == Role::Output)
            .chain(self.syncs.iter().filter(|s| s.role() == Role::Input));
        for s in ordered {
            for (dim, coord) in s.decl.shape.iter().zip(&s.decl.tile) {
                if let TileCoord::Axis { axis, size } = coord
                    && !axes.iter().any(|a| a.name == *axis)
                {
                    axes.push(Axis {
                        name: axis.clone(),
                        extent: Some(Extent::Derived {
                            dim: dim.clone(),
                            size: size.clone(),
                        }),
                    });
                }
            }
        }
        // Split axes that no dimension selects have no extent to derive.
        for s in &self.syncs {
            if let Some(split) = &s.split
                && !axes.iter().any(|a| a.name == *split)
            {
                axes.push(Axis {
                    name: split.clone(),
                    extent: None,
                });
            }
        }
        axes
    }

    /// Every expression of the annotation: `block`, `smem`, `min_ctas`, `tiles(...)`
    /// extents, `tensor(...)`/`scratch(...)` dimensions, `check(...)` conditions, and the
    /// shapes and tile sizes of `input(...)`/`output(...)`.
    pub fn annotation_exprs(&self) -> Vec<&Expr> {
        let mut exprs: Vec<&Expr> = self.block.iter().chain(&self.smem).chain(&self.min_ctas).collect();
        exprs.extend(self.tiles.iter().flatten().map(|a| &a.extent));
        exprs.extend(self.tensors.iter().flat_map(|t| &t.shape));
        exprs.extend(self.checks.iter().map(|(c, _)| c));
        for s in &self.syncs {
            exprs.extend(&s.decl.shape);
            exprs.extend(s.decl.tile.iter().filter_map(|c| match c {
                TileCoord::Axis { size, .. } => Some(size),
                TileCoord::Whole => None,
            }));
        }
        exprs
    }

    /// The parameters the annotation's expressions mention (`block`, `smem`, `tiles`,
    /// shapes, tile sizes): the device body may not use them otherwise.
    pub fn params_in_annotation(&self) -> Vec<&Ident> {
        let exprs = self.annotation_exprs();
        self.params
            .iter()
            .filter_map(|p| p.name.as_ref())
            .filter(|name| exprs.iter().any(|e| first_mention(e.to_token_stream(), name).is_some()))
            .collect()
    }

    /// Position of `name` in the grid `axes`.
    pub fn axis_index(axes: &[Axis], name: &Ident) -> Option<usize> {
        axes.iter().position(|a| a.name == *name)
    }
}

impl Param {
    fn from_arg(arg: &FnArg) -> Param {
        match arg {
            FnArg::Receiver(r) => Param {
                arg: arg.clone(),
                name: None,
                ty: (*r.ty).clone(),
                kind: ParamKind::Unsupported("`self`"),
            },
            FnArg::Typed(pt) => {
                let name = match &*pt.pat {
                    Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => Some(pi.ident.clone()),
                    _ => None,
                };
                Param {
                    arg: arg.clone(),
                    name,
                    ty: (*pt.ty).clone(),
                    kind: classify(&pt.ty),
                }
            }
        }
    }

    /// The element type of a pointer parameter.
    pub fn elem(&self) -> Option<&Type> {
        match &self.kind {
            ParamKind::ConstPtr(t) | ParamKind::MutPtr(t) => Some(t),
            _ => None,
        }
    }
}

/// How a parameter of type `ty` crosses the PTX ABI.
pub fn classify(ty: &Type) -> ParamKind {
    match ty {
        Type::Ptr(p) if p.mutability.is_some() => ParamKind::MutPtr((*p.elem).clone()),
        Type::Ptr(p) => ParamKind::ConstPtr((*p.elem).clone()),
        Type::Paren(p) => classify(&p.elem),
        Type::Group(g) => classify(&g.elem),
        Type::Reference(_) => ParamKind::Unsupported("a reference"),
        Type::Slice(_) => ParamKind::Unsupported("a slice"),
        Type::Tuple(_) => ParamKind::Unsupported("a tuple"),
        Type::ImplTrait(_) => ParamKind::Unsupported("an `impl Trait`"),
        Type::TraitObject(_) => ParamKind::Unsupported("a trait object"),
        Type::BareFn(_) => ParamKind::Unsupported("a function pointer"),
        Type::Never(_) => ParamKind::Unsupported("`!`"),
        Type::Infer(_) => ParamKind::Unsupported("`_`"),
        _ => ParamKind::Value,
    }
}

impl BodyStmt {
    fn from_stmt(mut stmt: Stmt) -> BodyStmt {
        let mut prefetch = None;
        if let Some(attrs) = stmt_attrs_mut(&mut stmt)
            && let Some(i) = attrs.iter().position(attr::is_prefetch)
        {
            prefetch = Some(attrs.remove(i));
            attrs.retain(|a| !attr::is_prefetch(a));
        }
        BodyStmt { stmt, prefetch }
    }
}

/// The outer attributes of a statement.
pub fn stmt_attrs_mut(stmt: &mut Stmt) -> Option<&mut Vec<Attribute>> {
    match stmt {
        Stmt::Local(l) => Some(&mut l.attrs),
        Stmt::Macro(m) => Some(&mut m.attrs),
        Stmt::Expr(e, _) => expr_attrs_mut(e),
        Stmt::Item(_) => None,
    }
}

/// The outer attributes of an expression.
pub fn expr_attrs_mut(e: &mut Expr) -> Option<&mut Vec<Attribute>> {
    macro_rules! attrs {
        ($($v:ident),*) => {
            match e {
                $(Expr::$v(x) => Some(&mut x.attrs),)*
                _ => None,
            }
        };
    }
    attrs!(
        Array, Assign, Async, Await, Binary, Block, Break, Call, Cast, Closure, Const, Continue, Field, ForLoop, Group,
        If, Index, Infer, Let, Lit, Loop, Macro, Match, MethodCall, Paren, Path, Range, RawAddr, Reference, Repeat,
        Return, Struct, Try, TryBlock, Tuple, Unary, Unsafe, While, Yield
    )
}

/// The span of the first identifier `name` in `tokens` (at any depth).
pub fn first_mention(tokens: TokenStream, name: &Ident) -> Option<Span> {
    for tt in tokens {
        match tt {
            TokenTree::Ident(i) if i == *name => return Some(i.span()),
            TokenTree::Group(g) => {
                if let Some(s) = first_mention(g.stream(), name) {
                    return Some(s);
                }
            }
            _ => {}
        }
    }
    None
}

fn typed_configs(attrs: Vec<ConfigAttr>) -> Vec<Config> {
    if attrs.is_empty() {
        return vec![Config {
            attr: None,
            consts: Vec::new(),
        }];
    }
    attrs
        .into_iter()
        .map(|c| {
            let mut consts: Vec<Const> = c
                .consts
                .into_iter()
                .map(|k| Const {
                    name: k.name,
                    ty: k.ty,
                    value: k.value,
                })
                .collect();
            // Constants may use earlier or later ones: infer until nothing changes.
            loop {
                let mut changed = false;
                for i in 0..consts.len() {
                    if consts[i].ty.is_none()
                        && let Some(t) = infer_type(&consts[i].value, &consts)
                    {
                        consts[i].ty = Some(t);
                        changed = true;
                    }
                }
                if !changed {
                    break;
                }
            }
            Config {
                attr: Some(c.attr),
                consts,
            }
        })
        .collect()
}

/// The type of a config constant's value, as far as the syntax tells: an unsuffixed
/// integer literal is `u32`, a suffixed literal has its suffix's type, `true`/`false`
/// are `bool`, `x as T` is `T`, a path to another constant has that constant's type,
/// comparisons are `bool`, other operators take the type of an operand (one that is not
/// an unsuffixed literal, if any: `2 * BM` has `BM`'s type). None otherwise (unsuffixed
/// floats included: `2.0` could be `f32` or `f64`).
pub fn infer_type(e: &Expr, known: &[Const]) -> Option<Type> {
    infer(e, known).map(|(t, _)| t)
}

/// The inferred type and whether it is certain (false for unsuffixed integers).
fn infer(e: &Expr, known: &[Const]) -> Option<(Type, bool)> {
    use syn::{BinOp, Lit, UnOp};
    let ty = |s: &str, sure: bool| syn::parse_str::<Type>(s).ok().map(|t| (t, sure));
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) if i.suffix().is_empty() => ty("u32", false),
            Lit::Int(i) => ty(i.suffix(), true),
            Lit::Float(f) if !f.suffix().is_empty() => ty(f.suffix(), true),
            Lit::Bool(_) => ty("bool", true),
            _ => None,
        },
        Expr::Paren(p) => infer(&p.expr, known),
        Expr::Group(g) => infer(&g.expr, known),
        Expr::Cast(c) => Some(((*c.ty).clone(), true)),
        Expr::Unary(u) => match (&u.op, &*u.expr) {
            (UnOp::Neg(_), Expr::Lit(syn::ExprLit { lit: Lit::Int(i), .. })) if i.suffix().is_empty() => {
                ty("i32", false)
            }
            (UnOp::Neg(_) | UnOp::Not(_), inner) => infer(inner, known),
            _ => None,
        },
        Expr::Binary(b) => match b.op {
            BinOp::Eq(_)
            | BinOp::Ne(_)
            | BinOp::Lt(_)
            | BinOp::Le(_)
            | BinOp::Gt(_)
            | BinOp::Ge(_)
            | BinOp::And(_)
            | BinOp::Or(_) => ty("bool", true),
            BinOp::Shl(_) | BinOp::Shr(_) => infer(&b.left, known),
            _ => {
                // Both sides must be known, or a later constant could change the answer.
                let (l, r) = (infer(&b.left, known)?, infer(&b.right, known)?);
                Some(if !l.1 && r.1 { r } else { l })
            }
        },
        Expr::Path(p) => {
            let id = p.path.get_ident()?;
            known
                .iter()
                .find(|c| c.name == *id)
                .and_then(|c| c.ty.clone())
                .map(|t| (t, true))
        }
        _ => None,
    }
}
