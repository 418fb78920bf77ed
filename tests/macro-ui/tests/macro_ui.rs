//! `#[megaops::kernel]` UI tests: one compile-fail case per error message (with the
//! exact `.stderr` a user sees), type-level cases for the tiling types, and pass cases
//! whose expansions are compiled and type-checked for real. Regenerate the `.stderr`
//! files with `TRYBUILD=overwrite cargo test -p megaops-macro-ui --test macro_ui`, then read them.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
