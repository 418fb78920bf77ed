//! Where the annotated function sits. An attribute macro is not told whether it is applied
//! to a free function or to an associated function in an `impl` or `trait` block, where
//! the launcher module the macro emits beside the function cannot go (rustc then reports
//! only "module is not supported in `trait`s or `impl`s", at the attribute). The source
//! file, found through the call site's span, tells: it is parsed, and the functions with a
//! `kernel` attribute and the kernel's name are sorted into free and associated ones.
//!
//! The answer is `None` whenever the file cannot tell for sure (no file behind the span,
//! an unreadable or unparsable file, a free and an associated kernel of the same name), so
//! that an uncertain answer never turns a good kernel into an error.

use std::cell::RefCell;
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use syn::visit::Visit;

/// The block an associated function is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Container {
    /// An `impl` block.
    Impl,
    /// A `trait` definition.
    Trait,
}

impl Container {
    /// "an `impl`" / "a `trait`", for messages.
    pub fn block(self) -> &'static str {
        match self {
            Container::Impl => "an `impl`",
            Container::Trait => "a `trait`",
        }
    }
}

/// Kernels of one file: name and container (`None`: a free function).
type FileKernels = Vec<(String, Option<Container>)>;

thread_local! {
    /// Parsed files by path and content hash: a crate with many kernels in one file parses
    /// it once.
    static FILES: RefCell<HashMap<(PathBuf, u64), FileKernels>> = RefCell::new(HashMap::new());
}

/// The container of the kernel `name` whose attribute is being expanded, if the source
/// file shows that it is an associated function. Must run inside a procedural macro.
pub fn container_of(name: &str) -> Option<Container> {
    let path = proc_macro::Span::call_site().local_file()?;
    let text = std::fs::read_to_string(&path).ok()?;
    if !text.contains("impl") && !text.contains("trait") {
        return None;
    }
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    let key = (path, hasher.finish());
    let kernels = FILES.with(|files| {
        if let Some(k) = files.borrow().get(&key) {
            return Some(k.clone());
        }
        let kernels = kernels_of(&text)?;
        files.borrow_mut().insert(key, kernels.clone());
        Some(kernels)
    })?;
    decide(&kernels, name)
}

/// Every function with a `kernel` attribute in `text`, with its container.
fn kernels_of(text: &str) -> Option<FileKernels> {
    let file = syn::parse_file(text).ok()?;
    let mut finder = Finder::default();
    finder.visit_file(&file);
    Some(finder.found)
}

/// The container of `name` if every kernel of that name in the file is associated.
fn decide(kernels: &FileKernels, name: &str) -> Option<Container> {
    let mut of_name = kernels.iter().filter(|(n, _)| n == name).map(|(_, c)| *c);
    let first = of_name.next()??;
    of_name.all(|c| c == Some(first)).then_some(first)
}

/// Whether `attrs` holds a `kernel` attribute (`#[megaops::kernel(..)]`, `#[kernel]`, ...).
fn has_kernel_attr(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().segments.last().is_some_and(|s| s.ident == "kernel"))
}

#[derive(Default)]
struct Finder {
    found: FileKernels,
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if has_kernel_attr(&f.attrs) {
            self.found.push((f.sig.ident.to_string(), None));
        }
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if has_kernel_attr(&f.attrs) {
            self.found.push((f.sig.ident.to_string(), Some(Container::Impl)));
        }
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if has_kernel_attr(&f.attrs) {
            self.found.push((f.sig.ident.to_string(), Some(Container::Trait)));
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"
        #[megaops::kernel(block = 1, tiles(i = 1))]
        pub unsafe fn free() {}

        impl Ops {
            #[megaops::kernel(block = 1, tiles(i = 1))]
            pub unsafe fn method() {}
            fn helper() {
                #[kernel(block = 1, tiles(i = 1))]
                unsafe fn nested() {}
            }
        }

        trait T {
            #[megaops::kernel(block = 1, tiles(i = 1))]
            unsafe fn in_trait() {}
        }

        mod m {
            impl super::Ops {
                #[megaops::kernel(block = 1, tiles(i = 1))]
                unsafe fn both() {}
            }
            #[megaops::kernel(block = 1, tiles(i = 1))]
            unsafe fn both() {}
        }
    "#;

    #[test]
    fn sorts_kernels_into_free_and_associated() {
        let k = kernels_of(SOURCE).expect("parses");
        assert_eq!(decide(&k, "free"), None);
        assert_eq!(decide(&k, "method"), Some(Container::Impl));
        assert_eq!(decide(&k, "nested"), None, "a function in a method's body is free");
        assert_eq!(decide(&k, "in_trait"), Some(Container::Trait));
        assert_eq!(decide(&k, "both"), None, "ambiguous: never an error");
        assert_eq!(decide(&k, "absent"), None);
    }
}
