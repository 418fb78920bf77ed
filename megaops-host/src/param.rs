//! Kernel parameters as the driver copies them: the bytes of each value.

use std::mem::MaybeUninit;

/// One kernel parameter's bytes. `MaybeUninit` because the padding of a `#[repr(C)]`
/// block (`KernelCtx` has some) is copied as it is and never read on the host.
pub(crate) type ParamBytes = Vec<MaybeUninit<u8>>;

/// The bytes of `v`, as a kernel parameter of type `V` receives them. `V` must have the
/// same layout on the host and on nvptx64: a primitive or other
/// [`DeviceRepr`](cudarc::driver::DeviceRepr) value, a device address, or one of the
/// `#[repr(C)]` blocks shared with the device crate (`KernelCtx`, `TileSync`,
/// `FillSpans`).
pub(crate) fn param_bytes<V: Copy>(v: &V) -> ParamBytes {
    // SAFETY: `v` points to `size_of::<V>()` readable bytes; viewing them as
    // `MaybeUninit<u8>` makes no claim about the padding among them.
    unsafe { std::slice::from_raw_parts((v as *const V).cast::<MaybeUninit<u8>>(), size_of::<V>()) }.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_becomes_its_bytes() {
        let b = param_bytes(&0x0102_0304u32);
        // SAFETY: a u32 has no padding: every byte is initialised.
        let b: Vec<u8> = b.iter().map(|x| unsafe { x.assume_init() }).collect();
        assert_eq!(b, 0x0102_0304u32.to_ne_bytes());
        // A padded block keeps its size (padding included) and is read without UB.
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Padded {
            a: u32,
            b: u64,
        }
        assert_eq!(param_bytes(&Padded { a: 1, b: 2 }).len(), 16);
    }
}
