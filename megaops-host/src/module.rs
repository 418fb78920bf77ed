//! Embedded PTX modules of kernel crates.

/// The PTX of one kernel crate, one module per GPU architecture, embedded by
/// `megaops::kernel_crate!()` from what `megaops-build` produced, with the cubins `ptxas`
/// assembled from it where one was found at build time. Lives in a `static`; the runtime
/// loads it once per device (the cubin when one fits the device, else the PTX, which the
/// driver compiles) and caches it by its address.
#[derive(Debug)]
pub struct PtxModule {
    /// Crate name, for messages.
    pub name: &'static str,
    /// `(architecture, PTX source)` pairs, e.g. `("sm_90", "...")`.
    pub ptx: &'static [(&'static str, &'static str)],
    /// `(architecture, cubin)` pairs assembled from the PTX of the same architecture;
    /// may be empty.
    pub cubin: &'static [(&'static str, &'static [u8])],
}

impl PtxModule {
    /// Cache key: the static's address.
    pub(crate) fn key(&'static self) -> usize {
        self as *const PtxModule as usize
    }

    /// The best PTX for a device of compute capability `major.minor`: the highest
    /// architecture not above the device's (`sm_90a` only on exactly 9.0).
    pub fn select(&self, major: i32, minor: i32) -> Option<(&'static str, &'static str)> {
        let cc = (major * 10 + minor) as u32;
        self.ptx
            .iter()
            .filter_map(|&(arch, src)| {
                let specific = arch.ends_with('a');
                let n = arch_capability(arch)?;
                let fits = if specific { n == cc } else { n <= cc };
                fits.then_some((n * 2 + specific as u32, arch, src))
            })
            .max_by_key(|&(rank, _, _)| rank)
            .map(|(_, arch, src)| (arch, src))
    }

    /// The cubin assembled from the PTX of `arch` (the architecture [`Self::select`]
    /// chose), if there is one and it runs on a device of compute capability
    /// `major.minor`: a cubin is loaded only on the capability it was assembled for.
    pub fn cubin_for(&self, arch: &str, major: i32, minor: i32) -> Option<&'static [u8]> {
        let cc = (major * 10 + minor) as u32;
        self.cubin
            .iter()
            .find(|&&(a, _)| a == arch && arch_capability(a) == Some(cc))
            .map(|&(_, bin)| bin)
    }
}

/// The compute capability an architecture name stands for, as `major * 10 + minor`
/// (`sm_90a` → 90); `None` for a name that is not `sm_<number>[a]`.
pub(crate) fn arch_capability(arch: &str) -> Option<u32> {
    arch.trim_start_matches("sm_").trim_end_matches('a').parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_highest_compatible_architecture() {
        static M: PtxModule = PtxModule {
            name: "k",
            ptx: &[("sm_80", "a"), ("sm_90", "b"), ("sm_90a", "c"), ("sm_89", "d")],
            cubin: &[("sm_90a", b"C"), ("sm_80", b"A")],
        };
        assert_eq!(M.select(9, 0), Some(("sm_90a", "c")));
        assert_eq!(M.select(8, 9), Some(("sm_89", "d")));
        assert_eq!(M.select(8, 6), Some(("sm_80", "a")));
        assert_eq!(M.select(7, 5), None);
        assert_eq!(M.select(10, 0), Some(("sm_90", "b")));
    }

    #[test]
    fn a_cubin_serves_only_its_own_capability() {
        static M: PtxModule = PtxModule {
            name: "k",
            ptx: &[("sm_80", "a"), ("sm_90a", "c")],
            cubin: &[("sm_90a", b"C"), ("sm_80", b"A")],
        };
        assert_eq!(M.cubin_for("sm_90a", 9, 0), Some(&b"C"[..]));
        assert_eq!(M.cubin_for("sm_80", 8, 0), Some(&b"A"[..]));
        // sm_80 PTX runs on 8.6 through the JIT; its cubin is not loaded there.
        assert_eq!(M.cubin_for("sm_80", 8, 6), None);
        assert_eq!(M.cubin_for("sm_90", 9, 0), None);
    }
}
