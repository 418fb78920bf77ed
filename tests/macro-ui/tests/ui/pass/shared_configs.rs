// One config list for two kernels (`configs = list!`), and configs picked by their typed
// constants rather than by index or name.
use megaops::launch::{ConfigValue, config_where};

pub static __MEGAOPS_PTX: megaops::PtxModule = megaops::PtxModule { name: "ui", ptx: &[], cubin: &[] };

/// The tile configs `zero` and `copy` share.
macro_rules! tiles {
    (#[$($kernel:tt)*] $($item:tt)*) => {
        #[$($kernel)*]
        #[config(BM = 64, WIDE = false)]
        #[config(BM = 128, WIDE = true)]
        $($item)*
    };
}

#[megaops::kernel(block = 128, output(y[m] = [i: BM]), configs = tiles!)]
pub unsafe fn zero(y: *mut f32, m: u32) {
    unsafe { *y.add((i * BM) as usize) = if WIDE { 0.0 } else { -0.0 } };
}

#[megaops::kernel(block = 128, input(x[m] = [i: BM]), output(y[m] = [i: BM]), configs = tiles!)]
pub unsafe fn copy(x: *const f32, y: *mut f32, m: u32) {
    unsafe { *y.add((i * BM) as usize) = *x.add((i * BM) as usize) };
}

fn main() {
    assert_eq!(zero::CONFIGS.len(), 2);
    assert_eq!(zero::CONFIGS[1].entry, "zero__BM128_WIDEtrue");
    assert_eq!(copy::CONFIGS[1].entry, "copy__BM128_WIDEtrue");
    assert_eq!(copy::CONFIGS[0].consts, &[("BM", ConfigValue::U32(64)), ("WIDE", ConfigValue::Bool(false))]);
    for (a, b) in zero::CONSTS.iter().zip(copy::CONSTS) {
        assert_eq!((a.BM, a.WIDE), (b.BM, b.WIDE));
    }
    let wide = copy::CONFIGS.iter().position(|c| c.bool("WIDE") == Some(true));
    assert_eq!(wide, Some(1));
    assert_eq!(config_where(zero::CONFIGS, &[("BM", 64)]), Some(0));
    assert_eq!(copy::CONSTS.iter().position(|c| c.BM == 128), Some(1));
}
