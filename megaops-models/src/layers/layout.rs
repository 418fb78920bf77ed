//! The sizes of a pass's tensors that the model leaves open: decode attention's split-KV
//! count and the column data tiles of the decode path.

use super::mlp::DECODE_COL_TILE;
use megaops::{Error, Result};

/// Columns per data tile of the decode path's column-tiled tensors, named by the kernel
/// that produces each. A consumer waits for the tiles its CTA reads: narrower tiles let it
/// start earlier, wider ones mean fewer semaphores to signal and poll. The prefill path
/// tiles by rows and ignores them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeTiles {
    /// `qkv [m, q_dim + 2·kv_dim]` (QKV GEMV → QK-norm + RoPE).
    pub qkv: u32,
    /// The attention block's output `[m, h]` (o_proj GEMV → add + RMSNorm).
    pub attn_out: u32,
    /// `act [m, inter]` (gate/up + SiLU·mul GEMV → down GEMV).
    pub act: u32,
    /// The logits `[batch, vocab]` (LM head GEMV → argmax).
    pub logits: u32,
}

impl Default for DecodeTiles {
    /// [`DECODE_COL_TILE`] for every tensor.
    fn default() -> Self {
        DecodeTiles {
            qkv: DECODE_COL_TILE,
            attn_out: DECODE_COL_TILE,
            act: DECODE_COL_TILE,
            logits: DECODE_COL_TILE,
        }
    }
}

impl DecodeTiles {
    /// Narrowest column tile: the narrowest GEMV CTA tile.
    pub const MIN: u32 = 16;
    /// Widest column tile.
    pub const MAX: u32 = 4096;
    /// The column tiles the tuner tries.
    pub const CANDIDATES: [u32; 5] = [32, 64, 128, 256, 512];

    /// Checks that every tile is a power of two from [`DecodeTiles::MIN`] to
    /// [`DecodeTiles::MAX`] columns.
    pub fn check(&self) -> Result<()> {
        for (what, cols) in [
            ("qkv", self.qkv),
            ("attention output", self.attn_out),
            ("act", self.act),
            ("logits", self.logits),
        ] {
            if !cols.is_power_of_two() || !(Self::MIN..=Self::MAX).contains(&cols) {
                return Err(Error::Invalid(format!(
                    "decode data tile of the {what} tensor: {cols} columns (need a power of two from {} to {})",
                    Self::MIN,
                    Self::MAX
                )));
            }
        }
        Ok(())
    }
}

/// What sizes a pass's tensors besides its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassLayout {
    /// Split-KV count that decode attention's workspace is sized for (1 for prefill).
    pub attention_splits: u32,
    /// The decode path's column data tiles.
    pub tiles: DecodeTiles,
}

impl PassLayout {
    /// A layout with `attention_splits` and the default data tiles.
    pub fn with_splits(attention_splits: u32) -> PassLayout {
        PassLayout {
            attention_splits,
            tiles: DecodeTiles::default(),
        }
    }
}

impl Default for PassLayout {
    /// One split and the default data tiles.
    fn default() -> Self {
        PassLayout::with_splits(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_must_be_powers_of_two_in_range() {
        assert!(DecodeTiles::default().check().is_ok());
        for cols in DecodeTiles::CANDIDATES {
            let t = DecodeTiles {
                act: cols,
                ..DecodeTiles::default()
            };
            assert!(t.check().is_ok(), "{cols}");
        }
        for bad in [0, 8, 96, 8192] {
            let t = DecodeTiles {
                logits: bad,
                ..DecodeTiles::default()
            };
            let e = t.check().expect_err("bad tile").to_string();
            assert!(e.contains("logits") && e.contains(&bad.to_string()), "{e}");
        }
    }
}
