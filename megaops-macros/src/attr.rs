//! The annotation grammar: the arguments of `#[megaops::kernel(...)]` and the helper
//! attributes `#[config(...)]` and `#[prefetch]`.
//!
//! ```text
//! kernel-args  := item ("," item)* ","?
//! item         := "block" "=" expr                      // threads per CTA, or (x, y[, z])
//!               | "smem" "=" expr                       // dynamic shared memory, bytes
//!               | "tiles" "(" axis ("," axis)* ")"      // kernel-tile grid
//!               | "input" "(" sync ")" | "output" "(" sync ")"
//!               | "min_ctas" "=" expr                   // launch bounds: CTAs that must fit per SM
//!               | "tensor" "(" IDENT "[" expr,* "]" ")" // shape of a plain pointer parameter
//!               | "scratch" "(" IDENT "[" expr "]" ")"  // a workspace of at least expr elements
//!               | "check" "(" expr "," LIT-STR ")"      // a precondition the launcher checks
//!               | "configs" "=" path "!"                // a shared list of #[config]s
//!               | "persistent" | "debug"
//! axis         := IDENT "=" expr                        // axis name and extent (tiles)
//! sync         := IDENT "[" expr,* "]" "=" "[" coord,* "]" ("," option)*
//! coord        := IDENT ":" expr                        // tile of expr elements, axis IDENT
//!               | "_"                                   // the whole dimension
//! option       := "split" "=" IDENT                     // outputs only: split-K axis
//! config       := "#[config(" (IDENT (":" type)? "=" expr),* ")]"
//! prefetch     := "#[prefetch]"
//! ```
//!
//! Only malformed tokens are errors here. Everything that parses but makes no sense
//! (unknown keys, duplicates, a `split` on an input, ...) is kept in the syntax tree and
//! reported by [`crate::valid`]. Each top-level item is parsed on its own: a syntax error
//! in one is recorded and parsing resumes at the next top-level comma.

use crate::ctxt::Ctxt;
use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::discouraged::Speculative;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, Ident, Token, Type, bracketed, parenthesized, token};

/// The annotation keys `#[megaops::kernel(...)]` understands, for messages.
pub const KEYS: &str = "`block`, `smem`, `tiles(...)`, `input(...)`, `output(...)`, `tensor(...)`, `scratch(...)`, `check(...)`, `min_ctas`, `configs`, `persistent`, `debug`";

/// The parsed arguments of `#[megaops::kernel(...)]`, in the order written.
#[derive(Default)]
pub struct KernelArgs {
    /// One entry per top-level item that parsed.
    pub items: Vec<ArgItem>,
    /// Some item did not parse (rules about missing items then stay quiet).
    pub syntax_errors: bool,
}

/// One top-level item of the annotation.
pub enum ArgItem {
    /// `block = THREADS` or `block = (X, Y, Z)`.
    Block {
        /// The `block` keyword.
        key: Ident,
        /// The expression after `=` (a tuple gives x, y, z).
        shape: Expr,
    },
    /// `smem = BYTES`.
    Smem {
        /// The `smem` keyword.
        key: Ident,
        /// Dynamic shared memory in bytes.
        bytes: Expr,
    },
    /// `tiles(name = extent, ...)`.
    Tiles {
        /// The `tiles` keyword.
        key: Ident,
        /// The axes, outermost first.
        axes: Vec<AxisDecl>,
    },
    /// `input(...)` or `output(...)`.
    Sync(SyncDecl),
    /// `min_ctas = N`: launch bounds (`.maxntid` from `block`, `.minnctapersm N`; none when
    /// `N` is 0).
    MinCtas {
        /// The `min_ctas` keyword.
        key: Ident,
        /// CTAs per SM the register allocation must allow.
        count: Expr,
    },
    /// `tensor(p[dims])`: the shape of a plain (unsynchronised) pointer parameter.
    Tensor {
        /// The parameter.
        param: Ident,
        /// Its extent per dimension (for `scratch`, one expression: the minimum length).
        shape: Vec<Expr>,
        /// `scratch(...)`: any shape with at least `shape[0]` elements.
        scratch: bool,
    },
    /// `check(cond, "message")`: a precondition the launcher checks before launching.
    Check {
        /// A `bool` expression of parameters and config constants.
        cond: Expr,
        /// What to tell the caller when it is false.
        message: syn::LitStr,
    },
    /// `configs = list!`: the tile configs come from the `macro_rules!` list `list`.
    Configs {
        /// The `configs` keyword.
        key: Ident,
        /// The list macro's path.
        list: syn::Path,
    },
    /// `persistent`.
    Persistent {
        /// The `persistent` keyword.
        key: Ident,
    },
    /// `debug`.
    Debug {
        /// The `debug` keyword.
        key: Ident,
    },
    /// Any other key (its value, if any, was skipped).
    Unknown {
        /// The key as written.
        key: Ident,
    },
}

/// One axis of `tiles(...)`.
#[derive(Clone)]
pub struct AxisDecl {
    /// Axis name, bound as a `u32` in the body.
    pub name: Ident,
    /// Number of kernel tiles along the axis.
    pub extent: Expr,
}

/// Whether a synchronised parameter is read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `input(...)`: waited on before the first statement that reads it.
    Input,
    /// `output(...)`: signalled after the body.
    Output,
}

impl Role {
    /// `"input"` or `"output"`.
    pub fn keyword(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Output => "output",
        }
    }
}

/// `input(x[dims] = [coords], options)` or `output(...)`.
#[derive(Clone)]
pub struct SyncDecl {
    /// Input or output.
    pub role: Role,
    /// The parameter it annotates.
    pub param: Ident,
    /// Brackets of the shape (for spans).
    pub shape_bracket: token::Bracket,
    /// Extent of each dimension, outermost first.
    pub shape: Vec<Expr>,
    /// Brackets of the kernel-tile coordinates (for spans).
    pub tile_bracket: token::Bracket,
    /// The kernel tile along each dimension.
    pub tile: Vec<TileCoord>,
    /// Options after the tiling.
    pub options: Vec<SyncOption>,
}

/// The kernel tile of one dimension.
#[derive(Clone)]
pub enum TileCoord {
    /// `_`: the tile spans the whole dimension.
    Whole,
    /// `axis: SIZE`: tile `axis` of `SIZE` elements.
    Axis {
        /// The grid axis.
        axis: Ident,
        /// Elements per tile.
        size: Expr,
    },
}

/// An option of `input(...)` / `output(...)`.
#[derive(Clone)]
pub enum SyncOption {
    /// `split = axis`.
    Split {
        /// The `split` keyword.
        key: Ident,
        /// The split-K axis.
        axis: Ident,
    },
    /// Anything else.
    Unknown {
        /// The key as written.
        key: Ident,
    },
}

/// One `#[config(...)]` attribute.
#[derive(Clone)]
pub struct ConfigAttr {
    /// The attribute (for spans).
    pub attr: Attribute,
    /// Its constants in the order written.
    pub consts: Vec<ConfigConst>,
}

/// `NAME = value` or `NAME: TYPE = value` in `#[config(...)]`.
#[derive(Clone)]
pub struct ConfigConst {
    /// Constant name.
    pub name: Ident,
    /// Explicit type, if written.
    pub ty: Option<Type>,
    /// Value.
    pub value: Expr,
}

/// Parses the arguments of `#[megaops::kernel(...)]`, recording syntax errors in `cx`.
pub fn parse_kernel_args(tokens: TokenStream, cx: &mut Ctxt) -> KernelArgs {
    let parser = |input: ParseStream| -> syn::Result<Vec<syn::Result<ArgItem>>> {
        let mut out = Vec::new();
        while !input.is_empty() {
            let fork = input.fork();
            match parse_item(&fork) {
                Ok(item) => {
                    input.advance_to(&fork);
                    out.push(Ok(item));
                    if !input.is_empty()
                        && let Err(e) = input.parse::<Token![,]>()
                    {
                        out.push(Err(syn::Error::new(
                            e.span(),
                            "expected `,` between kernel annotations",
                        )));
                        skip_past_comma(input)?;
                    }
                }
                Err(e) => {
                    out.push(Err(e));
                    skip_past_comma(input)?;
                }
            }
        }
        Ok(out)
    };
    let mut args = KernelArgs::default();
    match parser.parse2(tokens) {
        Ok(items) => {
            for item in items {
                match item {
                    Ok(item) => args.items.push(item),
                    Err(e) => {
                        args.syntax_errors = true;
                        cx.syn_error(e);
                    }
                }
            }
        }
        Err(e) => {
            args.syntax_errors = true;
            cx.syn_error(e);
        }
    }
    args
}

/// Skips token trees up to and including the next top-level `,` (error recovery).
fn skip_past_comma(input: ParseStream) -> syn::Result<()> {
    input.step(|cursor| {
        let mut rest = *cursor;
        while let Some((tt, next)) = rest.token_tree() {
            rest = next;
            if let TokenTree::Punct(p) = &tt
                && p.as_char() == ','
            {
                break;
            }
        }
        Ok(((), rest))
    })
}

fn parse_item(input: ParseStream) -> syn::Result<ArgItem> {
    let key = input.call(Ident::parse_any)?;
    match key.to_string().as_str() {
        "block" => {
            expect_eq(input, &key, "`block = THREADS` or `block = (X, Y, Z)`")?;
            Ok(ArgItem::Block {
                key,
                shape: input.parse()?,
            })
        }
        "smem" => {
            expect_eq(input, &key, "`smem = BYTES`")?;
            Ok(ArgItem::Smem {
                key,
                bytes: input.parse()?,
            })
        }
        "tiles" => {
            let content = parens(input, &key, "`tiles(pid_m = m.div_ceil(BM), ...)`")?;
            let axes = Punctuated::<AxisDecl, Token![,]>::parse_terminated_with(&content, parse_axis)?;
            Ok(ArgItem::Tiles {
                key,
                axes: axes.into_iter().collect(),
            })
        }
        "input" | "output" => {
            let role = if key == "input" { Role::Input } else { Role::Output };
            let example = match role {
                Role::Input => "`input(a[m, k] = [pid_m: BM, _])`",
                Role::Output => "`output(c[m, n] = [pid_m: BM, pid_n: BN])`",
            };
            let content = parens(input, &key, example)?;
            Ok(ArgItem::Sync(parse_sync(&content, role)?))
        }
        "tensor" | "scratch" => {
            let scratch = key == "scratch";
            let content = parens(
                input,
                &key,
                if scratch {
                    "`scratch(ws[m * n])`"
                } else {
                    "`tensor(w[n, k])`"
                },
            )?;
            let param: Ident = content.parse()?;
            if !content.peek(token::Bracket) {
                return Err(syn::Error::new(
                    param.span(),
                    format!("expected the shape of `{param}` in brackets, e.g. `tensor({param}[n, k])`"),
                ));
            }
            let dims;
            bracketed!(dims in content);
            let shape = Punctuated::<Expr, Token![,]>::parse_terminated(&dims)?;
            let shape: Vec<Expr> = shape.into_iter().collect();
            if scratch && shape.len() != 1 {
                return Err(syn::Error::new(
                    param.span(),
                    format!("`scratch({param}[LEN])` takes one length: the fewest elements `{param}` must hold"),
                ));
            }
            Ok(ArgItem::Tensor { param, shape, scratch })
        }
        "check" => {
            let content = parens(input, &key, "`check(k % 8 == 0, \"k must be a multiple of 8\")`")?;
            let cond: Expr = content.parse()?;
            content.parse::<Token![,]>()?;
            let message: syn::LitStr = content.parse()?;
            if content.peek(Token![,]) {
                content.parse::<Token![,]>()?;
            }
            Ok(ArgItem::Check { cond, message })
        }
        "min_ctas" => {
            expect_eq(input, &key, "`min_ctas = CTAS_PER_SM`")?;
            Ok(ArgItem::MinCtas {
                key,
                count: input.parse()?,
            })
        }
        "configs" => {
            let form = "`configs = list_name!` (a `macro_rules!` list of `#[config(...)]`s)";
            expect_eq(input, &key, form)?;
            let list =
                syn::Path::parse_mod_style(input).map_err(|e| syn::Error::new(e.span(), format!("expected {form}")))?;
            if !input.peek(Token![!]) {
                return Err(syn::Error::new_spanned(
                    &list,
                    format!(
                        "expected `{}!`: the config list is a macro",
                        crate::text::tokens_text(list.to_token_stream())
                    ),
                ));
            }
            input.parse::<Token![!]>()?;
            Ok(ArgItem::Configs { key, list })
        }
        "persistent" => {
            expect_flag(input, &key)?;
            Ok(ArgItem::Persistent { key })
        }
        "debug" => {
            expect_flag(input, &key)?;
            Ok(ArgItem::Debug { key })
        }
        _ => {
            // Skip a value so that the next item still parses; the key is reported later.
            if input.peek(Token![=]) {
                input.parse::<Token![=]>()?;
                input.parse::<Expr>()?;
            } else if input.peek(token::Paren) || input.peek(token::Bracket) || input.peek(token::Brace) {
                input.parse::<TokenTree>()?;
            }
            Ok(ArgItem::Unknown { key })
        }
    }
}

fn expect_eq(input: ParseStream, key: &Ident, form: &str) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        Ok(())
    } else {
        Err(syn::Error::new(key.span(), format!("expected {form}")))
    }
}

fn expect_flag(input: ParseStream, key: &Ident) -> syn::Result<()> {
    if input.is_empty() || input.peek(Token![,]) {
        Ok(())
    } else {
        Err(syn::Error::new(
            key.span(),
            format!("`{key}` is a flag and takes no value: write just `{key}`"),
        ))
    }
}

fn parens<'a>(input: ParseStream<'a>, key: &Ident, example: &str) -> syn::Result<syn::parse::ParseBuffer<'a>> {
    if !input.peek(token::Paren) {
        return Err(syn::Error::new(
            key.span(),
            format!("expected `{key}(...)`, e.g. {example}"),
        ));
    }
    let content;
    parenthesized!(content in input);
    Ok(content)
}

fn parse_axis(input: ParseStream) -> syn::Result<AxisDecl> {
    let name: Ident = input.parse()?;
    if !input.peek(Token![=]) {
        return Err(syn::Error::new(
            name.span(),
            format!("expected `{name} = EXTENT`: each axis of `tiles(...)` needs its number of kernel tiles"),
        ));
    }
    input.parse::<Token![=]>()?;
    Ok(AxisDecl {
        name,
        extent: input.parse()?,
    })
}

fn parse_sync(input: ParseStream, role: Role) -> syn::Result<SyncDecl> {
    let param: Ident = input.parse()?;
    if !input.peek(token::Bracket) {
        return Err(syn::Error::new(
            param.span(),
            format!("expected the shape of `{param}` in brackets, e.g. `{param}[m, k] = [pid_m: BM, _]`"),
        ));
    }
    let shape_content;
    let shape_bracket = bracketed!(shape_content in input);
    let shape = Punctuated::<Expr, Token![,]>::parse_terminated(&shape_content)?;
    if !input.peek(Token![=]) || !input.peek2(token::Bracket) {
        return Err(syn::Error::new(
            shape_bracket.span.close(),
            format!(
                "expected `= [...]` with the kernel tile of `{param}` after its shape: one `axis: SIZE` or `_` \
                 (whole dimension) per dimension, e.g. `= [pid_m: BM, _]`"
            ),
        ));
    }
    input.parse::<Token![=]>()?;
    let tile_content;
    let tile_bracket = bracketed!(tile_content in input);
    let tile = Punctuated::<TileCoord, Token![,]>::parse_terminated_with(&tile_content, parse_coord)?;
    let mut options = Vec::new();
    while !input.is_empty() {
        input.parse::<Token![,]>()?;
        if input.is_empty() {
            break;
        }
        options.push(parse_option(input)?);
    }
    Ok(SyncDecl {
        role,
        param,
        shape_bracket,
        shape: shape.into_iter().collect(),
        tile_bracket,
        tile: tile.into_iter().collect(),
        options,
    })
}

fn parse_coord(input: ParseStream) -> syn::Result<TileCoord> {
    if input.peek(Token![_]) {
        input.parse::<Token![_]>()?;
        return Ok(TileCoord::Whole);
    }
    let axis: Ident = input.parse()?;
    if !input.peek(Token![:]) {
        return Err(syn::Error::new(
            axis.span(),
            format!(
                "expected `{axis}: SIZE` (tiles of SIZE elements, selected by axis `{axis}`) or `_` (the whole dimension)"
            ),
        ));
    }
    input.parse::<Token![:]>()?;
    Ok(TileCoord::Axis {
        axis,
        size: input.parse()?,
    })
}

fn parse_option(input: ParseStream) -> syn::Result<SyncOption> {
    let key = input.call(Ident::parse_any)?;
    if key != "split" {
        if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            input.parse::<Expr>()?;
        }
        return Ok(SyncOption::Unknown { key });
    }
    expect_eq(input, &key, "`split = AXIS` (the split-K axis)")?;
    let axis: Ident = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), "expected the name of the split-K axis, e.g. `split = pid_k`"))?;
    Ok(SyncOption::Split { key, axis })
}

/// `configs = list!` of the annotation `tokens` as the list's path and the annotation
/// without that item, when that item is the first `configs` and parses.
pub fn configs_list(tokens: &TokenStream) -> Option<(syn::Path, TokenStream)> {
    let mut items: Vec<Vec<TokenTree>> = vec![Vec::new()];
    for tt in tokens.clone() {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == ',' => items.push(Vec::new()),
            _ => items.last_mut()?.push(tt),
        }
    }
    let is_configs = |item: &Vec<TokenTree>| matches!(item.first(), Some(TokenTree::Ident(i)) if i == "configs");
    let at = items.iter().position(is_configs)?;
    let item: TokenStream = items[at].iter().cloned().collect();
    let list = match Parser::parse2(parse_item, item) {
        Ok(ArgItem::Configs { list, .. }) => list,
        _ => return None,
    };
    let rest = items
        .iter()
        .enumerate()
        .filter(|(i, item)| *i != at && !item.is_empty())
        .map(|(_, item)| item.iter().cloned().collect::<TokenStream>());
    Some((list, quote::quote!(#(#rest),*)))
}

/// Whether `attr` is the helper attribute `#[config(...)]`.
pub fn is_config(attr: &Attribute) -> bool {
    attr.path().is_ident("config")
}

/// Whether `attr` is the helper attribute `#[prefetch]`.
pub fn is_prefetch(attr: &Attribute) -> bool {
    attr.path().is_ident("prefetch")
}

/// Parses one `#[config(...)]`; `#[config]` alone is a config without constants.
pub fn parse_config(attr: &Attribute, cx: &mut Ctxt) -> Option<ConfigAttr> {
    let consts = match &attr.meta {
        syn::Meta::Path(_) => Vec::new(),
        syn::Meta::List(list) => {
            let parser = Punctuated::<ConfigConst, Token![,]>::parse_terminated_with;
            let parsed = list.parse_args_with(|input: ParseStream| parser(input, parse_config_const));
            match parsed {
                Ok(p) => p.into_iter().collect(),
                Err(e) => {
                    cx.syn_error(e);
                    return None;
                }
            }
        }
        syn::Meta::NameValue(nv) => {
            cx.error_spanned_by(nv, "expected `#[config(NAME = value, ...)]`");
            return None;
        }
    };
    Some(ConfigAttr {
        attr: attr.clone(),
        consts,
    })
}

fn parse_config_const(input: ParseStream) -> syn::Result<ConfigConst> {
    let name: Ident = input.parse()?;
    let ty = if input.peek(Token![:]) {
        input.parse::<Token![:]>()?;
        Some(input.parse::<Type>()?)
    } else {
        None
    };
    if !input.peek(Token![=]) {
        return Err(syn::Error::new(
            name.span(),
            format!("expected `{name} = value` (or `{name}: TYPE = value`)"),
        ));
    }
    input.parse::<Token![=]>()?;
    Ok(ConfigConst {
        name,
        ty,
        value: input.parse()?,
    })
}

/// The span of a bracketed list, brackets included (for arity messages).
pub fn bracket_span(b: &token::Bracket) -> proc_macro2::Span {
    b.span.join()
}
