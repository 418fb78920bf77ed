//! Inputs that used to crash the process are errors that say what is wrong (issue 18,
//! "crashes instead of errors"). CPU backend.

use half::bf16;
use megaops_host::testing::cpu_device;
use megaops_host::{Result, Tensor};

#[test]
fn huge_zeros_and_full_are_errors_not_aborts() -> Result<()> {
    let dev = cpu_device(0)?;
    let huge = [1usize << 20, 1 << 20]; // 2 TiB of bf16
    // Before: `zeros` and `full` built the whole tensor in host memory first and aborted.
    for (what, got) in [
        ("empty", Tensor::<bf16>::empty(&dev, &huge).map(|_| ())),
        ("zeros", Tensor::<bf16>::zeros(&dev, &huge).map(|_| ())),
        ("full", Tensor::<bf16>::full(&dev, &huge, bf16::ONE).map(|_| ())),
    ] {
        let e = got.expect_err(what);
        assert!(e.to_string().contains("out of host memory"), "{what}: {e}");
    }
    // Ordinary sizes still work, also through the chunked fill (more than one chunk).
    let t = Tensor::<f32>::full(&dev, &[3, (1 << 20) + 5], 2.5)?;
    assert!(t.to_vec()?.iter().all(|&v| v == 2.5));
    t.fill(-1.0)?;
    assert!(t.to_vec()?.iter().all(|&v| v == -1.0));
    let narrow = t.narrow(1, 2)?;
    narrow.fill(7.0)?;
    let v = t.to_vec()?;
    let row = (1 << 20) + 5;
    assert!(v[..row].iter().all(|&x| x == -1.0) && v[row..2 * row].iter().all(|&x| x == 7.0));
    assert!(v[2 * row..].iter().all(|&x| x == -1.0));
    Ok(())
}
