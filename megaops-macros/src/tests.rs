//! Unit tests on token streams: parsing, every validation rule, and the shape of the
//! expansion (where waits go, parameter order, launcher bindings). They need no facade;
//! `tests/macro_*.rs` in the `megaops` package compile expansions for real.

use crate::ast::{Extent, Kernel, infer_type};
use crate::ctxt::Ctxt;
use crate::expand_kernel;
use crate::text::tokens_text;
use proc_macro2::TokenStream;
use quote::{ToTokens, quote};

/// The matmul of the crate docs with a split-K output and a second input.
fn matmul_attr() -> TokenStream {
    quote! {
        block = THREADS,
        smem = (BM + BN) * BK * 2,
        input(a[m, k] = [pid_m: BM, _]),
        output(c[m, n] = [pid_m: BM, pid_n: BN]),
        tensor(b[n, k]),
    }
}

fn matmul_item() -> TokenStream {
    quote! {
        #[config(BM = 64, BN = 64, BK = 32, THREADS = 128)]
        #[config(BM = 128, BN = 128, BK = 32, THREADS = 256)]
        /// C = A B.
        pub unsafe fn matmul(a: *const bf16, b: *const bf16, c: *mut bf16, m: u32, n: u32, k: u32) {
            #[prefetch]
            let w0 = *b;
            let row = pid_m * BM;
            let x = *a.add(row as usize);
            *c = x;
        }
    }
}

fn kernel(attr: TokenStream, item: TokenStream) -> (Kernel, Ctxt) {
    let mut cx = Ctxt::new();
    let f = syn::parse2(item).expect("test item is a fn");
    let k = Kernel::from_syn(attr, f, &mut cx);
    crate::valid::check(&k, &mut cx);
    (k, cx)
}

/// The error messages for a kernel.
fn errors(attr: TokenStream, item: TokenStream) -> Vec<String> {
    kernel(attr, item).1.messages()
}

fn assert_error(attr: TokenStream, item: TokenStream, needle: &str) {
    let errs = errors(attr, item);
    assert!(
        errs.iter().any(|e| e.contains(needle)),
        "expected an error containing {needle:?}, got {errs:#?}"
    );
}

/// The expansion as one line of text.
fn expansion(attr: TokenStream, item: TokenStream) -> String {
    tokens_text(expand_kernel(attr, item, |_| None))
}

fn pos(haystack: &str, needle: &str) -> usize {
    haystack
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not found in:\n{haystack}"))
}

#[test]
fn the_example_is_valid() {
    let (k, cx) = kernel(matmul_attr(), matmul_item());
    assert!(cx.is_empty(), "{:?}", cx.messages());
    assert_eq!(k.configs.len(), 2);
    assert_eq!(k.syncs.len(), 2);
    assert!(k.stmts[0].prefetch.is_some());
    assert!(k.stmts[1].prefetch.is_none());
    assert_eq!(k.docs.len(), 1);
}

#[test]
fn annotation_constants_must_come_from_a_config() {
    let item = quote! {
        #[config(BM = 64, THREADS = 128)]
        pub unsafe fn k(x: *const f32, y: *mut f32, m: u32, n: u32) {
            *y = *x;
        }
    };
    let attr = quote!(block = THREADS, input(x[m, n] = [pid: BM, _]), output(y[m, n] = [pid: BM, col: BN]));
    let errs = errors(attr, item.clone());
    assert_eq!(
        errs,
        [
            "no `#[config]` defines `BN`; the #[config]s define `BM`, `THREADS`. Add `BN` to every #[config], or \
          write a constant from outside the kernel with its crate path (`crate::BN`)"
        ],
    );
    // Paths, parameters and axes are not config constants; `N` as a parameter is fine.
    let attr = quote!(block = crate::THREADS, input(x[m, n] = [pid: BM, _]), output(y[m, n] = [pid: BM, _]));
    assert!(errors(attr, item).is_empty());
    let item = quote!(
        pub unsafe fn k(y: *mut f32, N: u32) {
            *y = 0.0;
        }
    );
    assert!(errors(quote!(block = 32, output(y[N] = [i: 32])), item.clone()).is_empty());
    assert_error(
        quote!(block = THREADS, output(y[N] = [i: 32])),
        item,
        "no `#[config]` defines `THREADS` (this kernel has no #[config])",
    );
}

#[test]
fn axes_come_from_outputs_first() {
    let (k, _) = kernel(
        quote!(block = 32, input(a[m, k] = [pid_k: BK, pid_m: BM]), output(c[m, n] = [pid_m: 64, pid_n: BN])),
        quote!(
            unsafe fn f(a: *const f32, c: *mut f32, m: u32, n: u32, k: u32) {
                *c = *a;
            }
        ),
    );
    let axes = k.axes();
    let names: Vec<String> = axes.iter().map(|a| a.name.to_string()).collect();
    assert_eq!(names, ["pid_m", "pid_n", "pid_k"]);
    match &axes[0].extent {
        Some(Extent::Derived { dim, size }) => {
            assert_eq!(tokens_text(dim.to_token_stream()), "m");
            assert_eq!(tokens_text(size.to_token_stream()), "64");
        }
        _ => panic!("pid_m's extent should be derived from c"),
    }
}

#[test]
fn tiles_give_the_axes_and_their_order() {
    let (k, cx) = kernel(
        quote!(block = 32, tiles(j = 4, i = n), output(c[n] = [i: 8])),
        quote!(
            unsafe fn f(c: *mut f32, n: u32) {
                *c = 0.0;
            }
        ),
    );
    assert!(cx.is_empty(), "{:?}", cx.messages());
    let names: Vec<String> = k.axes().iter().map(|a| a.name.to_string()).collect();
    assert_eq!(names, ["j", "i"]);
}

#[test]
fn config_types_follow_the_values() {
    let (k, cx) = kernel(
        quote!(block = T, tiles(i = 1)),
        quote! {
            #[config(T = 128, N = 64usize, A = (2.0f32), H = N / 2, B = true, C = 3 as u64, D: i64 = -1, E = 2 * N, F = -1)]
            unsafe fn f() {}
        },
    );
    assert!(cx.is_empty(), "{:?}", cx.messages());
    let types: Vec<String> = k.configs[0]
        .consts
        .iter()
        .map(|c| tokens_text(c.ty.as_ref().expect("typed").to_token_stream()))
        .collect();
    assert_eq!(
        types,
        ["u32", "usize", "f32", "usize", "bool", "u64", "i64", "usize", "i32"]
    );
    assert!(infer_type(&syn::parse_quote!(2.0), &[]).is_none());
    assert!(infer_type(&syn::parse_quote!(f(3)), &[]).is_none());
}

#[test]
fn syntax_errors_do_not_stop_the_other_items() {
    let errs = errors(
        quote!(block = , smem = 4, input(a[m] = [pid]), output(c[m] [i: 4]), persistent = true, tiles(i)),
        quote!(
            unsafe fn f(a: *const f32, c: *mut f32, m: u32) {
                *c = *a;
            }
        ),
    );
    assert!(errs.iter().any(|e| e.contains("expected an expression")), "{errs:#?}");
    assert!(errs.iter().any(|e| e.contains("expected `pid: SIZE`")), "{errs:#?}");
    assert!(errs.iter().any(|e| e.contains("expected `= [...]`")), "{errs:#?}");
    assert!(errs.iter().any(|e| e.contains("`persistent` is a flag")), "{errs:#?}");
    assert!(errs.iter().any(|e| e.contains("expected `i = EXTENT`")), "{errs:#?}");
}

#[test]
fn every_rule_reports() {
    let ok_attr = quote!(block = 32, input(a[n] = [i: 4]), output(c[n] = [i: 4]));
    let f = |sig: TokenStream| quote!(#sig { *c = *a; });
    let cases: Vec<(TokenStream, TokenStream, &str)> = vec![
        (
            ok_attr.clone(),
            f(quote!(fn k(a: *const f32, c: *mut f32, n: u32))),
            "must be an `unsafe fn`",
        ),
        (
            ok_attr.clone(),
            f(quote!(async unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "cannot be `async`",
        ),
        (
            ok_attr.clone(),
            f(quote!(const unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "cannot be a `const fn`",
        ),
        (
            ok_attr.clone(),
            f(quote!(unsafe extern "C" fn k(a: *const f32, c: *mut f32, n: u32))),
            "remove the ABI",
        ),
        (
            ok_attr.clone(),
            f(quote!(unsafe fn k<T>(a: *const f32, c: *mut f32, n: u32))),
            "must be concrete",
        ),
        (
            ok_attr.clone(),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32) -> u32)),
            "returns nothing",
        ),
        (
            ok_attr.clone(),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: &u32))),
            "is a reference",
        ),
        (
            ok_attr.clone(),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: &[u32]))),
            "is a reference",
        ),
        (
            ok_attr.clone(),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: (u32, u32)))),
            "is a tuple",
        ),
        (
            ok_attr.clone(),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: impl Copy))),
            "is an `impl Trait`",
        ),
        (
            ok_attr.clone(),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, ref n: u32))),
            "plain identifier",
        ),
        (
            quote!(block = 32, input(a[n] = [i: 4]), output(c[n] = [i: 4]), colour = 3),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "unknown kernel annotation `colour`",
        ),
        (
            quote!(block = 32, block = 64, input(a[n] = [i: 4]), output(c[n] = [i: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "`block` is given twice",
        ),
        (
            quote!(input(a[n] = [i: 4]), output(c[n] = [i: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "missing `block = THREADS`",
        ),
        (
            quote!(block = 32, input(q[n] = [i: 4]), output(c[n] = [i: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "`q` is not a parameter of `k`",
        ),
        (
            quote!(block = 32, input(a[n] = [i: 4]), output(a[n] = [i: 4]), output(c[n] = [i: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "`a` is annotated twice",
        ),
        (
            quote!(block = 32, input(c[n] = [i: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "must be a `*const T` parameter",
        ),
        (
            quote!(block = 32, output(a[n] = [i: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "must be a `*mut T` parameter",
        ),
        (
            quote!(block = 32, input(a[n, n] = [i: 4]), output(c[n] = [i: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "gives 1 coordinate",
        ),
        (
            quote!(block = 32, input(a[n,n,n,n,n] = [i: 4,_,_,_,_]), output(c[n] = [i: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "has 5 dimensions",
        ),
        (
            quote!(block = 32, tiles(a1 = 1, a2 = 1, a3 = 1, a4 = 1, a5 = 1), output(c[n] = [a1: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "at most 4 axes",
        ),
        (
            quote!(block = 32, input(a[n] = [i: 4], split = i), output(c[n] = [i: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "applies to outputs only",
        ),
        (
            quote!(block = 32, input(a[n] = [i: 4]), output(c[n] = [i: 4], split = s)),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "cannot be derived",
        ),
        (
            quote!(block = 32, tiles(i = n), input(a[n] = [i: 4]), output(c[n] = [i: 4], split = s)),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "is not in `tiles(...)`",
        ),
        (
            quote!(block = 32, input(a[n] = [i: 4]), output(c[n] = [i: 4], split = i)),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "both selects a dimension",
        ),
        (
            quote!(block = 32, tiles(i = n), input(a[n] = [j: 4]), output(c[n] = [i: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "axis `j` is not in `tiles(...)`",
        ),
        (
            quote!(block = 32),
            quote!(
                unsafe fn k() {}
            ),
            "must declare its kernel-tile grid",
        ),
        (
            quote!(block = 32, input(a[n] = [_]), output(c[n] = [_])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "declare the grid with `tiles(i = COUNT)`",
        ),
        (
            quote!(block = 32, input(a[n] = [n: 4]), output(c[n] = [n: 4])),
            f(quote!(unsafe fn k(a: *const f32, c: *mut f32, n: u32))),
            "has the name of a parameter",
        ),
        (
            quote!(block = 32, input(a[n] = [i: 4]), output(c[n] = [i: 4])),
            quote!(
                unsafe fn k(a: *const f32, c: *mut f32, n: u32) {
                    *c = 1.0;
                }
            ),
            "input `a` is never read",
        ),
        (
            quote!(block = 32, input(a[n] = [i: 4]), output(c[n] = [i: 4])),
            quote!(
                unsafe fn k(a: *const f32, c: *mut f32, n: u32) {
                    let _x = *a;
                }
            ),
            "output `c` is never written",
        ),
        (
            quote!(block = 32, output(c[n] = [i: 4], stride = 2)),
            quote!(
                unsafe fn k(c: *mut f32, n: u32) {
                    *c = 1.0;
                }
            ),
            "unknown option `stride`",
        ),
    ];
    for (attr, item, needle) in cases {
        let text = tokens_text(item.clone());
        let errs = errors(attr, item);
        assert!(
            errs.iter().any(|e| e.contains(needle)),
            "{text}: expected {needle:?}, got {errs:#?}"
        );
    }
}

#[test]
fn config_rules() {
    let attr = quote!(block = 32, tiles(i = 1));
    assert_error(
        attr.clone(),
        quote!(
            #[config(A = 1, B = 2)]
            #[config(A = 1, C = 3)]
            unsafe fn k() {}
        ),
        "`C` is not defined by the first #[config]",
    );
    assert_error(
        attr.clone(),
        quote!(
            #[config(A = 1, B = 2)]
            #[config(A = 1, C = 3)]
            unsafe fn k() {}
        ),
        "this #[config] does not define `B`",
    );
    assert_error(
        attr.clone(),
        quote!(
            #[config(A = 1, A = 2)]
            unsafe fn k() {}
        ),
        "`A` is defined twice",
    );
    assert_error(
        attr.clone(),
        quote!(
            #[config(A = 2.0)]
            unsafe fn k() {}
        ),
        "cannot tell the type of `A` from `2.0`",
    );
    assert_error(
        attr.clone(),
        quote!(
            #[config(A = 1)]
            #[config(A = 1usize)]
            unsafe fn k() {}
        ),
        "`A` is a `usize` here but a `u32` in the first #[config]",
    );
    assert_error(
        attr,
        quote!(
            #[config(n = 1)]
            unsafe fn k(n: u32) {}
        ),
        "constant `n` has the name of a parameter",
    );
}

#[test]
fn prefetch_rules() {
    let attr = quote!(block = 32, input(a[n] = [i: 4]), output(c[n] = [i: 4]));
    assert_error(
        attr.clone(),
        quote!(
            unsafe fn k(a: *const f32, c: *mut f32, n: u32) {
                #[prefetch]
                let x = *a;
                *c = x;
            }
        ),
        "must not read `a`",
    );
    assert_error(
        attr.clone(),
        quote!(
            unsafe fn k(a: *const f32, c: *mut f32, w: *const f32, n: u32) {
                let x = *a;
                #[prefetch]
                let y = *w;
                *c = x + y;
            }
        ),
        "comes after a statement that reads input `a`",
    );
    assert_error(
        attr.clone(),
        quote!(
            unsafe fn k(a: *const f32, c: *mut f32, n: u32) {
                if n > 0 {
                    #[prefetch]
                    let y = 1;
                }
                *c = *a;
            }
        ),
        "top-level statements of the kernel body only",
    );
    assert_error(
        attr,
        quote!(
            unsafe fn k(a: *const f32, c: *mut f32, n: u32) {
                #[prefetch(2)]
                let y = 1;
                *c = *a;
            }
        ),
        "takes no arguments",
    );
}

#[test]
fn all_errors_are_reported_together() {
    let errs = errors(
        quote!(input(q[n] = [i: 4]), output(c[n] = [i: 4]), colour),
        quote!(
            fn k(c: *mut f32, n: &u32) -> u32 {
                0
            }
        ),
    );
    assert!(errs.len() >= 5, "{errs:#?}");
}

#[test]
fn wait_goes_before_the_first_reader_and_after_prefetch() {
    let out = expansion(matmul_attr(), matmul_item());
    let entry =
        &out[pos(&out, "fn matmul__BM64_BN64_BK32_THREADS128")..pos(&out, "unsafe fn __megaops_cpu_matmul__cfg0")];
    let cpu =
        &out[pos(&out, "unsafe fn __megaops_cpu_matmul__cfg0")..pos(&out, "fn matmul__BM128_BN128_BK32_THREADS256")];
    let wait_a = "wait_input(&__megaops_ctx, __megaops_tile, &__megaops_sync_a, &__megaops_region_a)";
    for body in [entry, cpu] {
        let prefetch = pos(body, "let w0 = *b;");
        let row = pos(body, "let row = pid_m * BM;");
        let wait = pos(body, wait_a);
        let read = pos(body, "let x = *");
        assert!(prefetch < row && row < wait && wait < read, "{body}");
        // The signal comes after the body closure is called.
        let call = pos(body, "__megaops_body();");
        let signal = pos(body, "signal_tiles(&__megaops_sync_c, &__megaops_region_c");
        assert!(read < call && call < signal, "{body}");
    }
    assert!(!out.contains("prefetch"), "#[prefetch] must be stripped: {out}");
    assert!(entry.contains("let x = *a.add(row as usize);"), "{entry}");
    // The CPU-backend body watches `a` for the tile and checks its read; `b` is a plain
    // tensor, read as written.
    let watch = pos(
        cpu,
        "::megaops::__private::cpu_watch_input(&__megaops_ctx, __megaops_tile, a as *const u8, \
         ::core::mem::size_of::<bf16>(), &__megaops_sync_a);",
    );
    let probe = pos(cpu, "::megaops::__private::ReadProbe::new(a.add(row as usize)).probe()");
    assert!(watch < pos(cpu, wait_a) && pos(cpu, wait_a) < probe, "{cpu}");
    assert!(
        !entry.contains("ReadProbe") && !entry.contains("cpu_watch_input"),
        "{entry}"
    );
}

#[test]
fn inputs_first_read_together_wait_in_annotation_order() {
    let out = expansion(
        quote!(block = 32, input(y[n] = [i: 4]), input(x[n] = [i: 4]), output(c[n] = [i: 4])),
        quote!(
            unsafe fn k(x: *const f32, y: *const f32, c: *mut f32, n: u32) {
                *c = *x + *y;
            }
        ),
    );
    let wy = pos(&out, "&__megaops_sync_y, &__megaops_region_y");
    let wx = pos(&out, "&__megaops_sync_x, &__megaops_region_x");
    let read = pos(&out, "*c = *x + *y;");
    assert!(wy < wx && wx < read, "{out}");
}

#[test]
fn sync_parameters_follow_the_signature() {
    let out = expand_kernel(
        quote!(block = 32, output(c[n] = [i: 4]), input(a[n] = [i: 4])),
        quote!(
            unsafe fn k(a: *const f32, c: *mut f32, n: u32) {
                *c = *a;
            }
        ),
        |_| None,
    );
    let file: syn::File = syn::parse2(out).expect("expansion parses");
    let entry = file
        .items
        .iter()
        .find_map(|i| match i {
            syn::Item::Fn(f) if f.sig.ident == "k__cfg0" => Some(f),
            _ => None,
        })
        .expect("device entry");
    let params: Vec<String> = entry
        .sig
        .inputs
        .iter()
        .map(|p| match p {
            syn::FnArg::Typed(pt) => tokens_text(pt.pat.to_token_stream()),
            syn::FnArg::Receiver(_) => "self".into(),
        })
        .collect();
    assert_eq!(
        params,
        ["a", "c", "n", "__megaops_ctx", "__megaops_sync_a", "__megaops_sync_c"]
    );
    assert!(tokens_text(entry.sig.abi.to_token_stream()).contains("ptx-kernel"));
    assert!(
        entry
            .attrs
            .iter()
            .any(|a| tokens_text(a.to_token_stream()).contains("no_mangle"))
    );
}

#[test]
fn launcher_binds_in_signature_order() {
    let out = expansion(matmul_attr(), matmul_item());
    let arm = &out[pos(&out, "0usize =>")..pos(&out, "1usize =>")];
    let a = pos(
        arm,
        ".input::<bf16, ::megaops::__private::R2, _>(\"a\", a, &[(m) as u64, (k) as u64], &[::megaops::__private::TileDim::axis(0usize, (BM) as u64), ::megaops::__private::TileDim::WHOLE])?",
    );
    let b = pos(
        arm,
        ".ptr(\"b\", b, ::core::option::Option::Some(::megaops::__private::Declared::Shape(&[(n) as u64, (k) as u64])))?",
    );
    let c = pos(arm, ".output::<bf16, ::megaops::__private::R2, _>(\"c\", c,");
    let m = pos(arm, ".arg(m);");
    assert!(a < b && b < c && c < m, "{arm}");
    assert!(
        arm.contains(".tiles(&[((m) as u64).div_ceil((BM) as u64), ((n) as u64).div_ceil((BN) as u64)])?"),
        "{arm}"
    );
    assert!(arm.contains(".block([(THREADS) as u64, 1u64, 1u64])?"), "{arm}");
    // `(BM + BN) * BK * 2`, every operation checked in the constants' type.
    let smem = pos(
        arm,
        ".dynamic_smem((::megaops::__private::checked_op(::megaops::__private::CheckedArith::checked_mul,",
    );
    let add = pos(
        arm,
        "::megaops::__private::checked_op(::megaops::__private::CheckedArith::checked_add, BM, BN, \
         &::megaops::__private::OverflowSite { kernel: \"matmul\", what: \"`smem`\", expr: \"BM + BN\", divides: false }, \
         &[(\"BM\", &BM as &dyn ::core::fmt::Debug), (\"BN\", &BN as &dyn ::core::fmt::Debug)],)?",
    );
    assert!(smem < add, "{arm}");
    assert!(arm.contains("expr: \"(BM + BN) * BK * 2\", divides: false }"), "{arm}");
    assert!(arm.contains("const BM: u32 = 64;"), "{arm}");
    assert!(
        arm.contains(
            "super::__megaops_cpu_matmul__cfg0(__megaops_addr_a as *const bf16, __megaops_addr_b as *const bf16, \
         __megaops_addr_c as *mut bf16, m, n, k, *__megaops_ctx, __megaops_sync_a, __megaops_sync_c)"
        ),
        "{arm}"
    );
    assert!(
        out.contains("name: \"BM=128, BN=128, BK=32, THREADS=256\", entry: \"matmul__BM128_BN128_BK32_THREADS256\""),
        "{out}"
    );
    assert!(
        out.contains("a: &(impl ::megaops::__private::AsInput<bf16, ::megaops::__private::R2> + ?Sized)"),
        "{out}"
    );
    assert!(
        out.contains("c: &mut (impl ::megaops::__private::AsOutput<bf16, ::megaops::__private::R2> + ?Sized)"),
        "{out}"
    );
    assert!(out.contains("b: &::megaops::__private::Tensor<bf16>"), "{out}");
}

#[test]
fn split_and_persistent() {
    let out = expansion(
        quote!(block = 128, persistent, tiles(pid_m = m.div_ceil(64), pid_k = 4), input(a[m] = [pid_m: 64]), output(o[m] = [pid_m: 64], split = pid_k)),
        quote!(
            unsafe fn k(a: *const f32, o: *mut f32, m: u32) {
                *o = *a;
            }
        ),
    );
    assert!(
        out.contains("split: __megaops_ctx.tile_grid[1usize], split_index: pid_k"),
        "{out}"
    );
    assert!(out.contains("ktile: [(64) as u32, 0u32, 0u32, 0u32]"), "{out}");
    assert!(out.contains("while __megaops_t < __megaops_ctx.num_tiles"), "{out}");
    assert!(
        out.contains("__megaops_t += ::megaops::__private::grid_dim_x();"),
        "{out}"
    );
    assert!(out.contains(".persistent();"), "{out}");
    assert!(out.contains("::core::option::Option::Some(1usize)"), "{out}");
    assert!(
        out.contains("let [pid_m, pid_k, ..] = ::megaops::__private::tile_coords(&__megaops_ctx, __megaops_tile);"),
        "{out}"
    );
}

#[test]
fn regions_cover_whole_dims_and_pad() {
    let out = expansion(matmul_attr(), matmul_item());
    assert!(
        out.contains(
            "let __megaops_region_a: [(u32, u32); 4usize] = [::megaops::__private::tile_region(pid_m, (BM) as u32, (m) as u32), \
             (0u32, (k) as u32), (0u32, 0u32), (0u32, 0u32)];"
        ),
        "{out}"
    );
}

#[test]
fn without_configs_there_is_one_entry() {
    let out = expansion(
        quote!(block = (32, 4), tiles(i = n), scratch(p[n])),
        quote!(
            pub unsafe fn fill(p: *mut f32, n: u32) {
                *p.add(i as usize) = 1.0;
            }
        ),
    );
    assert!(out.contains("fn fill__cfg0("), "{out}");
    assert!(!out.contains("fill__cfg1"), "{out}");
    assert!(out.contains("name: \"default\""), "{out}");
    assert!(out.contains(".block([(32) as u64, (4) as u64, 1u64])?"), "{out}");
    assert!(out.contains("pub mod fill"), "{out}");
    assert!(
        out.contains(
            ".ptr_mut(\"p\", p, ::core::option::Option::Some(::megaops::__private::Declared::AtLeast((n) as u64)))?"
        ),
        "{out}"
    );
}

#[test]
fn fallback_keeps_the_function_compilable() {
    let out = expansion(
        quote!(block = 32, input(a[m] = [pid_m: BM]), output(c[m] = [pid_m: BM]), colour),
        quote! {
            #[config(BM = 64)]
            pub unsafe fn k(a: *const f32, c: *mut f32, m: u32) { #[prefetch] let z = 0; *c = *a.add((pid_m * BM) as usize); }
        },
    );
    assert!(out.contains("compile_error!"), "{out}");
    assert!(out.contains("const BM: u32 = 64;"), "{out}");
    assert!(out.contains("let pid_m: u32 = 0;"), "{out}");
    // The helper attributes are gone (the error message lists the `configs` key).
    assert!(!out.contains("#[config"), "{out}");
    assert!(!out.contains("prefetch"), "{out}");
    assert!(
        out.contains("pub unsafe fn k(a: *const f32, c: *mut f32, m: u32)"),
        "{out}"
    );
}

#[test]
fn non_functions_are_refused() {
    let out = expansion(
        quote!(block = 32),
        quote!(
            struct S;
        ),
    );
    assert!(out.contains("applies to functions"), "{out}");
    assert!(out.contains("struct S;"), "{out}");
}

#[test]
fn parameters_only_the_annotation_uses_are_marked_used() {
    let out = expansion(
        quote!(block = threads, smem = bytes, tiles(i = n), scratch(p[1])),
        quote!(
            unsafe fn k(p: *mut f32, n: u32, threads: u32, bytes: u32, v: f32) {
                *p = v;
            }
        ),
    );
    let body = &out[pos(&out, "fn k__cfg0")..];
    assert!(body.contains("let _ = &n; let _ = &threads; let _ = &bytes;"), "{body}");
    assert!(!body.contains("let _ = &v;"), "{body}");
    assert!(body.contains("#[allow(unused_variables)] let [i, ..] ="), "{body}");
}

#[test]
fn undeclared_pointer_shapes_are_an_error() {
    assert_error(
        quote!(block = 1, tiles(i = 1)),
        quote!(
            unsafe fn f(p: *const f32) {
                let _ = p;
            }
        ),
        "declare the shape of `p`, e.g. `tensor(p[n, k])`",
    );
}

#[test]
fn declared_tensors_and_checks_are_checked_by_the_launcher() {
    let attr = quote! {
        block = 128,
        input(a[m, k] = [pid_m: 64, _]),
        output(c[m, n] = [pid_m: 64, pid_n: 64]),
        tensor(b[n, k]),
        check(k % 8 == 0, "k must be a multiple of 8"),
    };
    let out = expansion(attr, matmul_item());
    assert!(out.contains(".ptr(\"b\", b, ::core::option::Option::Some(::megaops::__private::Declared::Shape(&[(n) as u64, (k) as u64])))?"), "{out}");
    // The condition is evaluated with checked arithmetic (an overflow is an error too).
    let check = pos(
        &out,
        "if ! ((::megaops::__private::checked_op(::megaops::__private::CheckedArith::checked_rem, k, 8, \
         &::megaops::__private::OverflowSite { kernel: \"matmul\", what: \"the check `k % 8 == 0`\", expr: \"k % 8\", \
         divides: true }, &[(\"k\", &k as &dyn ::core::fmt::Debug)],)?) == (0))",
    );
    assert!(check < pos(&out, "KernelLaunch::new"), "{out}");
    assert!(out.contains("k must be a multiple of 8 (`k % 8 == 0`)"), "{out}");
    assert_error(
        quote!(block = 1, tiles(i = 1), tensor(z[4])),
        quote!(
            unsafe fn f(p: *const f32) {
                let _ = p;
            }
        ),
        "`z` is not a parameter of `f`",
    );
    assert_error(
        quote!(block = 1, tiles(i = 1), tensor(n[4])),
        quote!(
            unsafe fn f(n: u32) {
                let _ = n;
            }
        ),
        "declares the shape of a pointer parameter; `n` is not one",
    );
}

#[test]
fn entries_are_named_after_their_constants() {
    let out = expansion(
        quote!(block = 32, tiles(i = n), scratch(p[n])),
        quote!(
            #[config(BN = 16, MIN_CTAS: u32 = 0u32, FAST = true, OFF = -2)]
            #[config(BN = 4 * 8, MIN_CTAS: u32 = 0u32, FAST = true, OFF = -2)]
            #[config(BN = 7, MIN_CTAS: u32 = 1, FAST = false, OFF: i32 = 3)]
            #[config(BN = 7, MIN_CTAS: u32 = 1, FAST = false, OFF: i32 = 3)]
            pub unsafe fn k(p: *mut f32, n: u32) {
                *p.add(i as usize) = 1.0;
            }
        ),
    );
    assert!(out.contains("fn k__BN16_MIN_CTAS0_FASTtrue_OFFm2("), "{out}");
    // A value that is not a literal, and two configs that would share a name, fall back
    // to the config index.
    assert!(out.contains("fn k__cfg1("), "{out}");
    assert!(out.contains("fn k__cfg2(") && out.contains("fn k__cfg3("), "{out}");
    assert!(out.contains("entry: \"k__BN16_MIN_CTAS0_FASTtrue_OFFm2\""), "{out}");
}

/// Each config gets a plain entry without trace code and a `__traced` one with it,
/// configs with launch bounds included.
#[test]
fn traced_launches_get_their_own_entry() {
    let out = expansion(
        quote!(block = 32, tiles(i = n), scratch(p[n]), min_ctas = MIN_CTAS),
        quote!(
            #[config(BN = 16, MIN_CTAS: u32 = 0)]
            #[config(BN = 32, MIN_CTAS: u32 = 2)]
            #[config(BN = 64, MIN_CTAS: u32 = 1 + 1)]
            pub unsafe fn k(p: *mut f32, n: u32) {
                *p.add(i as usize) = 1.0;
            }
        ),
    );
    let entry = |name: &str| out.contains(&format!("extern \"ptx-kernel\" fn {name}("));
    for name in ["k__BN16_MIN_CTAS0", "k__BN32_MIN_CTAS2", "k__cfg2"] {
        assert!(entry(name) && entry(&format!("{name}__traced")), "{name}: {out}");
        assert!(
            out.contains(&format!(
                "traced_entry: ::core::option::Option::Some(\"{name}__traced\")"
            )),
            "{name}: {out}"
        );
    }
    assert!(!out.contains("traced_entry: ::core::option::Option::None"), "{out}");
    // Plain entries have no trace call: the three traced entries and the three CPU
    // functions do.
    let calls = out.matches("trace_record").count();
    assert_eq!(calls, 3 + 3, "{out}");
}

#[test]
fn configs_record_their_constants_as_typed_data() {
    let out = expansion(
        matmul_attr(),
        quote! {
            #[config(BM = 64, BN = 64, BK = 32, THREADS = 128, U: usize = 4, ALPHA = (0.5f32), ON = true)]
            pub unsafe fn matmul(a: *const bf16, b: *const bf16, c: *mut bf16, m: u32, n: u32, k: u32) {
                let x = *a.add((pid_m * BM) as usize) + *b;
                *c = x;
            }
        },
    );
    let value = "::megaops::__private::ConfigValue";
    for (name, v) in [
        ("BM", "U32"),
        ("THREADS", "U32"),
        ("U", "Usize"),
        ("ALPHA", "F32"),
        ("ON", "Bool"),
    ] {
        assert!(
            out.contains(&format!("(\"{name}\", {value}::{v}({name}))")),
            "{name}: {out}"
        );
    }
    assert!(out.contains("pub struct Consts {"), "{out}");
    assert!(out.contains("pub U: usize,"), "{out}");
    assert!(out.contains("#[derive(Clone, Copy, Debug, PartialEq)]"), "{out}");
    assert!(out.contains("pub const CONSTS: &[Consts] = &["), "{out}");
    assert!(out.contains("Consts { BM, BN, BK, THREADS, U, ALPHA, ON }"), "{out}");
}

#[test]
fn a_config_list_gets_the_kernel_back_without_the_configs_item() {
    let out = expansion(
        quote!(block = 32, configs = crate::lists::tiles!, output(c[m] = [i: BM])),
        quote! {
            /// Docs.
            pub unsafe fn k(c: *mut f32, m: u32) { *c = 0.0; }
        },
    );
    assert!(
        out.starts_with("crate::lists::tiles! { #[::megaops::kernel(block = 32, output(c[m] = [i: BM]))] #[doc ="),
        "{out}"
    );
    assert!(!out.contains("compile_error!"), "{out}");
    // With #[config]s of its own the kernel is checked here, and the mix is an error.
    assert_error(
        quote!(block = 32, configs = tiles!, output(c[m] = [i: BM])),
        quote! {
            #[config(BM = 64)]
            pub unsafe fn k(c: *mut f32, m: u32) { *c = 0.0; }
        },
        "`configs = tiles!` gives this kernel its tile configs: move these #[config]s into `tiles!`",
    );
    assert_error(
        quote!(block = 32, configs = tiles, output(c[m] = [i: 64])),
        quote!(
            pub unsafe fn k(c: *mut f32, m: u32) {
                *c = 0.0;
            }
        ),
        "expected `tiles!`: the config list is a macro",
    );
}

#[test]
fn the_fallback_stubs_the_launcher_of_a_free_kernel() {
    let attr = quote!(block = 32, output(c[m] = [pid_m: BM]), tensor(w[m]), colour);
    let item = quote! {
        #[config(BM = 64, S: Scale = Scale(1))]
        pub unsafe fn k(w: *const f32, c: *mut f32, m: u32, s: Scale) { *c = *w; }
    };
    let out = expansion(attr.clone(), item.clone());
    let stub = &out[pos(&out, "pub mod k {")..];
    assert!(
        stub.contains("pub const CONFIGS: &[::megaops::__private::ConfigInfo] = &[];"),
        "{stub}"
    );
    assert!(stub.contains("pub struct Consts { pub BM: u32, }"), "{stub}");
    assert!(
        stub.contains(
            "pub fn launch < __MegaopsArg0: ?Sized, __MegaopsArg1: ?Sized, __MegaopsArg3 > (__megaops_on: &impl \
             ::megaops::__private::LaunchTarget, __megaops_arg0: &__MegaopsArg0, __megaops_arg1: &mut \
             __MegaopsArg1, __megaops_arg2: u32, __megaops_arg3: __MegaopsArg3)"
        ),
        "{stub}"
    );
    assert!(stub.contains("pub fn launch_with < __MegaopsArg0: ?Sized,"), "{stub}");
    // In an `impl` block a module cannot go: no stub, only the error and the function.
    let out = tokens_text(expand_kernel(attr, item, |_| Some(crate::site::Container::Impl)));
    assert!(out.contains("compile_error!"), "{out}");
    assert!(!out.contains("mod k"), "{out}");
}
