//! Rules on the *values* of `#[config]` constants and literal annotation values that
//! can be checked at compile time: a kernel tile of 0 elements (the launcher would
//! divide by it) and a CTA of 0 or more than 1024 threads (the launch would fail). Values
//! that are not integer literals (expressions, parameters) are checked by the launcher.

use crate::ast::{Config, Kernel};
use crate::attr::TileCoord;
use crate::ctxt::Ctxt;
use syn::{Expr, Lit};

/// Most threads a CTA may have (every NVIDIA GPU since sm_20).
const MAX_THREADS: u128 = 1024;

/// Runs the value rules on `k`.
pub fn check_values(k: &Kernel, cx: &mut Ctxt) {
    check_tile_sizes(k, cx);
    check_block_size(k, cx);
}

/// The integer an expression stands for in `config`: an integer literal, or the name of
/// a constant of `config` whose value is one.
fn int_value<'a>(e: &'a Expr, config: Option<&'a Config>) -> Option<(u128, &'a Expr)> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => i.base10_parse::<u128>().ok().map(|v| (v, e)),
            _ => None,
        },
        Expr::Paren(p) => int_value(&p.expr, config),
        Expr::Group(g) => int_value(&g.expr, config),
        Expr::Path(p) => {
            let name = p.path.get_ident()?;
            let c = config?.consts.iter().find(|c| c.name == *name)?;
            int_value(&c.value, None)
        }
        _ => None,
    }
}

/// Where the value came from, for messages: `` `BM = 0` in #[config] 2`` or `` `0` ``.
fn origin(e: &Expr, k: &Kernel, i: usize) -> String {
    let text = crate::text::tokens_text(quote::ToTokens::to_token_stream(e));
    match (e, k.configs.get(i)) {
        (Expr::Path(p), Some(c)) if c.attr.is_some() => {
            let name = p.path.get_ident().map(ToString::to_string).unwrap_or(text);
            if k.configs.len() > 1 {
                format!("`{name}` (set by #[config] {})", i + 1)
            } else {
                format!("`{name}` (set by the #[config])")
            }
        }
        _ => format!("`{text}`"),
    }
}

/// The configs to evaluate annotation values in: every config (the implicit one has no
/// constants).
fn configs(k: &Kernel) -> Vec<Option<&Config>> {
    if k.configs.is_empty() {
        vec![None]
    } else {
        k.configs.iter().map(Some).collect()
    }
}

/// A kernel tile has at least one element along every dimension it is tiled in.
fn check_tile_sizes(k: &Kernel, cx: &mut Ctxt) {
    for s in &k.syncs {
        for (d, coord) in s.decl.tile.iter().enumerate() {
            let TileCoord::Axis { axis, size } = coord else {
                continue;
            };
            for (i, config) in configs(k).into_iter().enumerate() {
                let Some((0, lit)) = int_value(size, config) else {
                    continue;
                };
                cx.error_spanned_by(
                    lit,
                    format!(
                        "the kernel tile size {} of `{}` along dimension {d} (axis `{axis}`) is 0: a kernel tile \
                         needs at least 1 element",
                        origin(size, k, i),
                        s.name()
                    ),
                );
                break;
            }
        }
    }
}

/// A CTA has 1 to 1024 threads.
fn check_block_size(k: &Kernel, cx: &mut Ctxt) {
    let Some(block) = &k.block else {
        return;
    };
    let dims: Vec<&Expr> = match block {
        Expr::Tuple(t) => t.elems.iter().collect(),
        e => vec![e],
    };
    for (i, config) in configs(k).into_iter().enumerate() {
        let values: Vec<Option<(u128, &Expr)>> = dims.iter().map(|e| int_value(e, config)).collect();
        let known: Vec<u128> = values.iter().flatten().map(|(v, _)| *v).collect();
        let Some(at) = values.iter().flatten().map(|(_, e)| *e).next() else {
            continue;
        };
        let what = if dims.len() == 1 {
            origin(dims[0], k, i)
        } else {
            format!("`block` in config {}", i + 1)
        };
        let product = known
            .iter()
            .try_fold(1u128, |a, &v| a.checked_mul(v))
            .unwrap_or(u128::MAX);
        if known.contains(&0) {
            cx.error_spanned_by(
                at,
                format!("{what} gives a CTA of 0 threads: a CTA has 1 to {MAX_THREADS} threads"),
            );
            break;
        }
        if product > MAX_THREADS {
            cx.error_spanned_by(
                at,
                format!("{what} gives a CTA of {product} threads: a CTA has at most {MAX_THREADS} threads"),
            );
            break;
        }
    }
}
