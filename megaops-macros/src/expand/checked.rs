//! The launcher's evaluation of annotation expressions, with checked arithmetic.
//!
//! Shapes, tile sizes, extents, `block`, `smem`, `scratch` lengths and `check(...)`
//! conditions are evaluated by the launcher in the types the kernel evaluates them in (its
//! parameters' and constants' types: `u32` for sizes). Every `+`, `-`, `*`, `/`, `%` and
//! `.div_ceil(..)` of such an expression goes through `CheckedArith`, and one that would
//! overflow its type or divide by zero returns a launch error that names the kernel, the
//! annotation, the operation and the values of the parameters and constants it mentions,
//! instead of panicking (debug builds) or launching with a wrapped value (release builds,
//! and the device, which computes the same expression in the same type).
//!
//! The rewrite is syntactic and keeps the expression's types: `a * b` becomes
//! `checked_op(CheckedArith::checked_mul, a, b, &OverflowSite { .. }, &[values])?`.
//! Operations inside function bodies the expression calls are not checked.

use super::Plan;
use crate::ast::ParamKind;
use crate::paths;
use crate::text::tokens_text;
use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{BinOp, Expr, Ident, Type};

/// Types whose values a launch error can print.
const PRINTABLE: &[&str] = &[
    "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize", "f32", "f64", "bool",
];

/// `(e) as ty`, `e` evaluated with checked arithmetic; `what` names the annotation in the
/// error (e.g. "the shape of `x`").
pub fn cast(plan: &Plan, e: &Expr, ty: &str, what: &str) -> TokenStream {
    let span = Span::call_site().located_at(e.span());
    let ty = Ident::new(ty, span);
    let inner = expr(plan, e, what);
    quote_spanned!(span=> (#inner) as #ty)
}

/// `e` evaluated with checked arithmetic.
pub fn expr(plan: &Plan, e: &Expr, what: &str) -> TokenStream {
    Rewrite { plan, what }.expr(e)
}

struct Rewrite<'a, 'p> {
    plan: &'a Plan<'p>,
    what: &'a str,
}

impl Rewrite<'_, '_> {
    fn expr(&self, e: &Expr) -> TokenStream {
        match e {
            Expr::Binary(b) => {
                let (l, r) = (self.expr(&b.left), self.expr(&b.right));
                match arith(&b.op) {
                    Some(method) => self.checked(e, method, l, r),
                    None => {
                        let op = &b.op;
                        quote!((#l) #op (#r))
                    }
                }
            }
            Expr::Paren(p) => {
                let inner = self.expr(&p.expr);
                quote!((#inner))
            }
            Expr::Group(g) => self.expr(&g.expr),
            Expr::Unary(u) => {
                let (op, inner) = (&u.op, self.expr(&u.expr));
                quote!(#op (#inner))
            }
            Expr::Cast(c) => {
                let (inner, ty) = (self.expr(&c.expr), &c.ty);
                quote!((#inner) as #ty)
            }
            Expr::MethodCall(m) if m.method == "div_ceil" && m.args.len() == 1 && m.turbofish.is_none() => {
                let (recv, arg) = (self.expr(&m.receiver), self.expr(&m.args[0]));
                self.checked(e, "checked_div_ceil", recv, arg)
            }
            Expr::MethodCall(m) => {
                let recv = self.expr(&m.receiver);
                let (method, turbofish) = (&m.method, &m.turbofish);
                let args = m.args.iter().map(|a| self.expr(a));
                quote!((#recv).#method #turbofish (#(#args),*))
            }
            Expr::Call(c) => {
                let func = &c.func;
                let args = c.args.iter().map(|a| self.expr(a));
                quote!(#func(#(#args),*))
            }
            other => other.to_token_stream(),
        }
    }

    /// `checked_op(CheckedArith::<method>, l, r, &OverflowSite { .. }, &[values])?`.
    fn checked(&self, whole: &Expr, method: &str, l: TokenStream, r: TokenStream) -> TokenStream {
        let (arith, op, site) = (paths::checked_arith(), paths::checked_op(), paths::overflow_site());
        let method = Ident::new(method, Span::call_site());
        let kernel = self.plan.k.name().to_string();
        let text = tokens_text(whole.to_token_stream());
        let divides = matches!(whole, Expr::MethodCall(_))
            || matches!(whole, Expr::Binary(b) if matches!(b.op, BinOp::Div(_) | BinOp::Rem(_)));
        let values = self.values(whole).into_iter().map(|name| {
            let label = name.to_string();
            quote!((#label, &#name as &dyn ::core::fmt::Debug))
        });
        let what = self.what;
        quote! {
            #op(
                #arith::#method,
                #l,
                #r,
                &#site { kernel: #kernel, what: #what, expr: #text, divides: #divides },
                &[#(#values),*],
            )?
        }
    }

    /// The parameters and config constants of printable types that `e` mentions, in order
    /// of first mention.
    fn values(&self, e: &Expr) -> Vec<Ident> {
        let k = self.plan.k;
        let printable = |ty: &Type| PRINTABLE.contains(&tokens_text(ty.to_token_stream()).as_str());
        let mut candidates: Vec<&Ident> = k
            .params
            .iter()
            .filter(|p| matches!(p.kind, ParamKind::Value) && printable(&p.ty))
            .filter_map(|p| p.name.as_ref())
            .collect();
        if let Some(c) = k.configs.first() {
            candidates.extend(
                c.consts
                    .iter()
                    .filter(|x| x.ty.as_ref().is_some_and(printable))
                    .map(|x| &x.name),
            );
        }
        let mut out: Vec<Ident> = Vec::new();
        collect_idents(e.to_token_stream(), &mut |i| {
            if candidates.contains(&i) && !out.contains(i) {
                out.push(i.clone());
            }
        });
        out
    }
}

/// The `CheckedArith` method of an arithmetic operator.
fn arith(op: &BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::Add(_) => "checked_add",
        BinOp::Sub(_) => "checked_sub",
        BinOp::Mul(_) => "checked_mul",
        BinOp::Div(_) => "checked_div",
        BinOp::Rem(_) => "checked_rem",
        _ => return None,
    })
}

fn collect_idents(tokens: TokenStream, f: &mut impl FnMut(&Ident)) {
    for tt in tokens {
        match tt {
            proc_macro2::TokenTree::Ident(i) => f(&i),
            proc_macro2::TokenTree::Group(g) => collect_idents(g.stream(), f),
            _ => {}
        }
    }
}
