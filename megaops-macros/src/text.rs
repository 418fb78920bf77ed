//! Token streams as text a person reads: in error messages, generated docs and config
//! names on one line (`TokenStream::to_string` puts spaces everywhere, `m . div_ceil (BM)`;
//! this writes `m.div_ceil(BM)`), and the `debug` dump formatted by `prettyplease`.

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use quote::ToTokens;

/// `tokens` on one line, spaced as people write Rust.
pub fn tokens_text(tokens: TokenStream) -> String {
    let mut p = Printer::default();
    p.stream(tokens);
    p.out
}

/// `[a, b, c]` for a list of nodes.
pub fn list_text<T: ToTokens>(items: &[T]) -> String {
    let parts: Vec<String> = items.iter().map(|i| tokens_text(i.to_token_stream())).collect();
    format!("[{}]", parts.join(", "))
}

/// The `debug` dump of an expansion: formatted as `rustfmt` would (`prettyplease`), or
/// on one line if it does not parse as items.
pub fn pretty(tokens: TokenStream) -> String {
    match syn::parse2::<syn::File>(tokens.clone()) {
        Ok(file) => prettyplease::unparse(&file),
        Err(_) => tokens_text(tokens),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// An identifier; `true` for a keyword after which an operator is unary.
    Ident(bool),
    Literal,
    Open(char),
    Close(char),
    Punct(char, Spacing),
}

/// Keywords after which `*`, `&`, `-`, `!`, `[` or `(` start an operand or a type.
const KEYWORDS: &[&str] = &[
    "as", "break", "const", "dyn", "else", "for", "if", "impl", "in", "let", "match", "move", "mut", "return", "where",
    "while",
];

#[derive(Default)]
struct Printer {
    out: String,
    /// The two previous tokens (most recent last).
    prev: Option<Kind>,
    prev2: Option<Kind>,
    /// Open generic argument lists (`<` taken as a bracket).
    generics: usize,
}

impl Printer {
    fn stream(&mut self, tokens: TokenStream) {
        for tt in tokens {
            match tt {
                TokenTree::Group(g) => {
                    let (open, close) = match g.delimiter() {
                        Delimiter::Parenthesis => ('(', ')'),
                        Delimiter::Bracket => ('[', ']'),
                        Delimiter::Brace => ('{', '}'),
                        Delimiter::None => {
                            self.stream(g.stream());
                            continue;
                        }
                    };
                    let brace = open == '{';
                    let empty = g.stream().is_empty();
                    let outer_generics = std::mem::take(&mut self.generics);
                    self.token(&open.to_string(), Kind::Open(open));
                    if brace && !empty {
                        self.out.push(' ');
                    }
                    self.stream(g.stream());
                    if brace && !empty {
                        self.out.push(' ');
                    }
                    self.token(&close.to_string(), Kind::Close(close));
                    self.generics = outer_generics;
                }
                TokenTree::Ident(i) => {
                    let text = i.to_string();
                    let keyword = KEYWORDS.contains(&text.as_str());
                    self.token(&text, Kind::Ident(keyword));
                }
                TokenTree::Literal(l) => self.token(&l.to_string(), Kind::Literal),
                TokenTree::Punct(p) => {
                    let c = p.as_char();
                    let kind = Kind::Punct(c, p.spacing());
                    if c == '<' && self.opens_generics() {
                        self.generics += 1;
                        self.push_raw("<");
                        // Like an opening bracket: the next token sticks to it.
                        self.prev2 = self.prev;
                        self.prev = Some(Kind::Open('<'));
                        continue;
                    }
                    if c == '>'
                        && self.generics > 0
                        && !matches!(self.prev, Some(Kind::Punct('-' | '=', Spacing::Joint)))
                    {
                        self.generics -= 1;
                        self.push_raw(">");
                        self.prev2 = self.prev;
                        self.prev = Some(Kind::Close('>'));
                        continue;
                    }
                    self.token(&c.to_string(), kind);
                }
            }
        }
    }

    /// Whether a `<` here opens generic arguments: after `::` or a capitalised name.
    fn opens_generics(&self) -> bool {
        match self.prev {
            Some(Kind::Punct(':', Spacing::Alone)) => self.prev2 == Some(Kind::Punct(':', Spacing::Joint)),
            Some(Kind::Ident(false)) => self
                .out
                .rsplit(|c: char| !c.is_alphanumeric() && c != '_')
                .next()
                .is_some_and(|w| w.starts_with(|c: char| c.is_ascii_uppercase())),
            Some(Kind::Ident(true)) => self.out.ends_with("impl"),
            _ => false,
        }
    }

    fn push_raw(&mut self, text: &str) {
        self.out.push_str(text);
    }

    fn token(&mut self, text: &str, kind: Kind) {
        if self.space_before(kind) {
            self.out.push(' ');
        }
        self.out.push_str(text);
        self.prev2 = self.prev;
        self.prev = Some(kind);
    }

    /// Whether the previous token makes an operator that follows it unary.
    fn operand_expected(k: Option<Kind>) -> bool {
        matches!(
            k,
            None | Some(Kind::Open(_) | Kind::Close('}') | Kind::Punct(..) | Kind::Ident(true))
        )
    }

    fn space_before(&self, next: Kind) -> bool {
        let Some(prev) = self.prev else { return false };
        if self.out.ends_with(' ') || self.out.ends_with('\n') || self.out.is_empty() {
            return false;
        }
        match (prev, next) {
            (Kind::Open(_), Kind::Close(_)) => false,
            (Kind::Open('{'), _) | (_, Kind::Open('{')) => true,
            (Kind::Open(_), _) | (_, Kind::Close(_)) => false,
            (Kind::Punct(',' | ';', _), _) => true,
            // `::` starting a path, or joining one.
            (_, Kind::Punct(':', Spacing::Joint)) => !matches!(
                prev,
                Kind::Ident(false) | Kind::Close(_) | Kind::Punct('&' | '*' | '!', _)
            ),
            (_, Kind::Punct('?', _)) => matches!(prev, Kind::Punct(..)),
            (_, Kind::Punct(',' | ';' | '.' | ':', _)) => false,
            (Kind::Punct('?', _), _) => !Self::operand_expected(self.prev2),
            (Kind::Punct('.', _), _) => false,
            (Kind::Punct(':', Spacing::Joint), _) => false,
            (Kind::Punct(':', Spacing::Alone), _) => self.prev2 != Some(Kind::Punct(':', Spacing::Joint)),
            (Kind::Punct(_, Spacing::Joint), _) => false,
            (Kind::Punct('#', _), Kind::Open('[')) => false,
            (Kind::Ident(false), Kind::Punct('!', _)) => false,
            (Kind::Punct('!', _), Kind::Open(_)) => Self::operand_expected(self.prev2),
            (Kind::Ident(false) | Kind::Close(')' | ']' | '>'), Kind::Open(_)) => false,
            (Kind::Punct('&' | '*' | '!' | '-', _), _) => !Self::operand_expected(self.prev2),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    #[test]
    fn reads_like_rust() {
        assert_eq!(tokens_text(quote!(m.div_ceil(BM))), "m.div_ceil(BM)");
        assert_eq!(tokens_text(quote!((BM + BN) * BK * 2)), "(BM + BN) * BK * 2");
        assert_eq!(tokens_text(quote!(*const bf16)), "*const bf16");
        assert_eq!(tokens_text(quote!(&mut [f32])), "&mut [f32]");
        assert_eq!(tokens_text(quote!(Tiled<bf16, Rows<64>>)), "Tiled<bf16, Rows<64>>");
        assert_eq!(
            tokens_text(quote!(::megaops::__private::R2)),
            "::megaops::__private::R2"
        );
        assert_eq!(tokens_text(quote!(a[m, k])), "a[m, k]");
        assert_eq!(tokens_text(quote!(x as u64)), "x as u64");
        assert_eq!(tokens_text(quote!(-1)), "-1");
        assert_eq!(tokens_text(quote!(a - 1)), "a - 1");
        assert_eq!(tokens_text(quote!(format!("{}", x))), "format!(\"{}\", x)");
        assert_eq!(
            tokens_text(quote!(if a >= b { c } else { d })),
            "if a >= b { c } else { d }"
        );
        assert_eq!(tokens_text(quote!(x: ::megaops::R2)), "x: ::megaops::R2");
        assert_eq!(
            tokens_text(quote!(let [i, ..] = f::<u32>(&x);)),
            "let [i, ..] = f::<u32>(&x);"
        );
        assert_eq!(tokens_text(quote!(x as *const T)), "x as *const T");
        assert_eq!(
            tokens_text(quote!(&(impl AsInput<T, R2> + ?Sized))),
            "&(impl AsInput<T, R2> + ?Sized)"
        );
        assert_eq!(
            tokens_text(quote!(while i < n {
                *c = *a;
            })),
            "while i < n { *c = *a; }"
        );
        assert_eq!(
            tokens_text(quote!(
                fn f() -> Result<()> {}
            )),
            "fn f() -> Result<()> {}"
        );
    }

    #[test]
    fn the_dump_is_formatted_like_rustfmt() {
        let s = pretty(quote!(
            fn f() {
                let a = 1;
                if a > 0 {
                    g(a);
                } else {
                    h();
                }
            }
        ));
        assert_eq!(
            s,
            "fn f() {\n    let a = 1;\n    if a > 0 {\n        g(a);\n    } else {\n        h();\n    }\n}\n"
        );
        assert_eq!(pretty(quote!(a + 1)), "a + 1", "not items: one line");
    }
}
