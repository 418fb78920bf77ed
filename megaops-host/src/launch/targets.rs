//! How many producer signals a data tile may receive: the protocol's counting limit.

use crate::error::{Error, Result, TilingErrorKind};
use megaops_device::sync::tiling::{num_data_tiles, target_of};
use megaops_device::sync::{MAX_RANK, MAX_TARGET, TileSync};

/// Checks that no data tile gets more producer signals than the protocol can count.
pub(super) fn check_targets(
    kernel: &str,
    param: &str,
    sync: &TileSync,
    ktile: &[u32; MAX_RANK],
    split: u32,
) -> Result<()> {
    // The largest target is that of an interior data tile: check the first tile of each
    // dimension's interior, bounded by the full count.
    let n = num_data_tiles(&sync.dims, sync.rank);
    if n == 0 {
        return Ok(());
    }
    let mut worst = split.max(1) as u64;
    for (dim, &kt) in sync.dims.iter().zip(ktile).take(sync.rank as usize) {
        let per = if kt == 0 {
            1
        } else if dim.tile == 0 {
            // Irregular: bound by the whole dimension.
            dim.size.div_ceil(kt) as u64
        } else {
            (dim.tile.div_ceil(kt) + 1) as u64
        };
        worst = worst.saturating_mul(per);
    }
    if worst > MAX_TARGET as u64 {
        let exact = if sync.dims.iter().take(sync.rank as usize).all(|d| d.tile != 0) {
            // SAFETY: plain tilings have no bounds table.
            unsafe { target_of(&sync.dims, sync.rank, &[0; MAX_RANK], ktile, split) as u64 }
        } else {
            worst
        };
        if exact > MAX_TARGET as u64 || worst > 4 * MAX_TARGET as u64 {
            return Err(Error::Tiling {
                kind: TilingErrorKind::TooManySignals,
                kernel: Some(kernel.to_string()),
                tensor: Some(param.to_string()),
                message: format!(
                    "`{kernel}` would signal each data tile of `{param}` up to {worst} times; at most {MAX_TARGET} are \
                     supported: use larger kernel tiles or smaller data tiles"
                ),
            });
        }
    }
    Ok(())
}
