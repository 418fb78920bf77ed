//! Data tilings: how the user cuts the tensor between two kernels into data tiles, each
//! with one semaphore (paper §2.1). The tiling is part of a [`crate::Tiled`] tensor's
//! type, so a producer and a consumer that disagree on it do not compile.
//!
//! Plain tilings with constant tile sizes: [`Rows`], [`Grid`], [`Chunks`]; with run-time
//! sizes: [`DynRows`], [`DynGrid`], [`DynChunks`]; irregular ones: implement
//! [`DataTiling`] with [`DimSpec::Bounds`] (a precomputed table of tile boundaries), or
//! use [`Irregular`].

use crate::error::{Error, Result, TilingErrorKind};
use crate::notes::HostDim;
use megaops_device::sync::tiling as dev;
use megaops_device::sync::{DimTiling, MAX_RANK};

mod sealed {
    pub trait Sealed {}
}

/// Tensor rank as a type, so that rank mismatches are compile errors.
pub trait Rank:
    sealed::Sealed + Clone + Copy + std::fmt::Debug + Default + PartialEq + Eq + Send + Sync + 'static
{
    /// The rank.
    const N: usize;
}

macro_rules! ranks {
    ($($(#[$doc:meta])* $name:ident = $n:literal),*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name;
        impl sealed::Sealed for $name {}
        impl Rank for $name { const N: usize = $n; }
    )*};
}
ranks!(
    /// Rank 1.
    R1 = 1,
    /// Rank 2.
    R2 = 2,
    /// Rank 3.
    R3 = 3,
    /// Rank 4.
    R4 = 4
);

/// How one dimension is cut into data tiles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimSpec {
    /// One data tile spans the whole dimension.
    Whole,
    /// Plain tiles of this many elements (the last one may be partial).
    Tile(u32),
    /// Irregular tiles: ascending boundaries from 0 to the dimension's size (a tile per
    /// adjacent pair). Uploaded to the device as a table.
    Bounds(Vec<u32>),
}

/// States that a data tiling tiles tensors of rank `R`; kernels that read or write a
/// rank-`R` tensor accept `Tiled` tensors whose tiling implements `TilesRank<R>`, so a rank
/// mismatch is reported in these words rather than as a trait-projection mismatch.
#[diagnostic::on_unimplemented(
    message = "data tiling `{Self}` does not tile tensors of rank `{R}`",
    label = "the kernel reads or writes a rank-`{R}` tensor here",
    note = "the tiling's rank is part of the `Tiled` tensor's type: tile the tensor with a tiling of the kernel's rank"
)]
pub trait TilesRank<R: Rank> {}

/// A data tiling of a tensor of rank `Self::Rank`.
///
/// Implement it for irregular tilings by returning [`DimSpec::Bounds`] tables (and
/// `TilesRank<YourRank>`, one empty impl).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a data tiling",
    label = "expected a data tiling such as `Rows<64>`, `Grid<64, 128>` or `Chunks<256>`",
    note = "irregular tilings implement `DataTiling` with `DimSpec::Bounds` tables"
)]
pub trait DataTiling: TilesRank<Self::Rank> + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// Rank of the tensors it tiles.
    type Rank: Rank;
    /// Evaluated when a `Tiled` with this tiling is created: constant tilings that
    /// cannot be mapped (tile size 0) fail to compile here.
    const CHECK: () = ();
    /// How dimension `d` of a tensor whose extent there is `size` is cut.
    fn dim(&self, d: usize, size: usize) -> DimSpec;
    /// Name for messages, e.g. `Rows<64>`.
    fn describe(&self) -> String;
}

/// Rows of `R` rows each (rank 2; every data tile spans all columns). The paper's default
/// for most intermediates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rows<const R: u32>;

impl<const R: u32> TilesRank<R2> for Rows<R> {}
impl<const R: u32> DataTiling for Rows<R> {
    type Rank = R2;
    const CHECK: () = assert!(R > 0, "a data tile of `Rows<R>` needs R >= 1 rows");
    fn dim(&self, d: usize, _: usize) -> DimSpec {
        if d == 0 { DimSpec::Tile(R) } else { DimSpec::Whole }
    }
    fn describe(&self) -> String {
        format!("Rows<{R}>")
    }
}

/// `R × C` blocks (rank 2), so consumers can start on partial columns too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grid<const R: u32, const C: u32>;

impl<const R: u32, const C: u32> TilesRank<R2> for Grid<R, C> {}
impl<const R: u32, const C: u32> DataTiling for Grid<R, C> {
    type Rank = R2;
    const CHECK: () = assert!(R > 0 && C > 0, "a data tile of `Grid<R, C>` needs R >= 1 and C >= 1");
    fn dim(&self, d: usize, _: usize) -> DimSpec {
        DimSpec::Tile(if d == 0 { R } else { C })
    }
    fn describe(&self) -> String {
        format!("Grid<{R}, {C}>")
    }
}

/// Chunks of `N` elements of a rank-1 tensor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chunks<const N: u32>;

impl<const N: u32> TilesRank<R1> for Chunks<N> {}
impl<const N: u32> DataTiling for Chunks<N> {
    type Rank = R1;
    const CHECK: () = assert!(N > 0, "a data tile of `Chunks<N>` needs N >= 1 elements");
    fn dim(&self, _: usize, _: usize) -> DimSpec {
        DimSpec::Tile(N)
    }
    fn describe(&self) -> String {
        format!("Chunks<{N}>")
    }
}

/// [`Rows`] with the tile height chosen at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DynRows(pub u32);

impl TilesRank<R2> for DynRows {}
impl DataTiling for DynRows {
    type Rank = R2;
    fn dim(&self, d: usize, _: usize) -> DimSpec {
        if d == 0 { DimSpec::Tile(self.0) } else { DimSpec::Whole }
    }
    fn describe(&self) -> String {
        format!("DynRows({})", self.0)
    }
}

/// [`Grid`] with tile sizes chosen at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DynGrid(pub u32, pub u32);

impl TilesRank<R2> for DynGrid {}
impl DataTiling for DynGrid {
    type Rank = R2;
    fn dim(&self, d: usize, _: usize) -> DimSpec {
        DimSpec::Tile(if d == 0 { self.0 } else { self.1 })
    }
    fn describe(&self) -> String {
        format!("DynGrid({}, {})", self.0, self.1)
    }
}

/// [`Chunks`] with the chunk size chosen at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DynChunks(pub u32);

impl TilesRank<R1> for DynChunks {}
impl DataTiling for DynChunks {
    type Rank = R1;
    fn dim(&self, _: usize, _: usize) -> DimSpec {
        DimSpec::Tile(self.0)
    }
    fn describe(&self) -> String {
        format!("DynChunks({})", self.0)
    }
}

/// An irregular tiling given per dimension (e.g. variable-length sequences as row
/// tiles), backed by boundary tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Irregular<R: Rank> {
    dims: Vec<DimSpec>,
    _rank: std::marker::PhantomData<R>,
}

impl<R: Rank> Irregular<R> {
    /// One [`DimSpec`] per dimension (must be `R::N` of them).
    pub fn new(dims: Vec<DimSpec>) -> Result<Self> {
        if dims.len() != R::N {
            return Err(Error::tiling(
                TilingErrorKind::InvalidTiling,
                format!(
                    "an irregular rank-{} tiling needs {} dimension specs, got {}",
                    R::N,
                    R::N,
                    dims.len()
                ),
            ));
        }
        Ok(Irregular {
            dims,
            _rank: std::marker::PhantomData,
        })
    }
}

impl Irregular<R2> {
    /// Row tiles with the given boundaries (`0 = b0 < b1 < … = rows`), all columns.
    pub fn rows(bounds: Vec<u32>) -> Self {
        Irregular {
            dims: vec![DimSpec::Bounds(bounds), DimSpec::Whole],
            _rank: std::marker::PhantomData,
        }
    }
}

impl<R: Rank> TilesRank<R> for Irregular<R> {}
impl<R: Rank> DataTiling for Irregular<R> {
    type Rank = R;
    fn dim(&self, d: usize, _: usize) -> DimSpec {
        self.dims.get(d).cloned().unwrap_or(DimSpec::Whole)
    }
    fn describe(&self) -> String {
        format!("Irregular<R{}>", R::N)
    }
}

/// Resolves a tiling against a shape into per-dimension host descriptions, checking that
/// tile sizes are positive and boundary tables are ascending from 0 to the size.
pub(crate) fn resolve<D: DataTiling>(tiling: &D, shape: &[usize]) -> Result<Vec<HostDim>> {
    if shape.len() != D::Rank::N {
        return Err(Error::Shape {
            kernel: None,
            tensor: None,
            expected: None,
            found: Some(shape.to_vec()),
            message: format!(
                "data tiling {} is for rank-{} tensors, but the tensor has shape {shape:?}",
                tiling.describe(),
                D::Rank::N
            ),
        });
    }
    let mut dims = Vec::with_capacity(shape.len());
    for (d, &size) in shape.iter().enumerate() {
        let size32 =
            u32::try_from(size).map_err(|_| Error::shape(format!("dimension {d} of {shape:?} exceeds u32")))?;
        let dim = match tiling.dim(d, size) {
            DimSpec::Whole => HostDim {
                size: size32,
                tile: size32.max(1),
                bounds: vec![],
            },
            DimSpec::Tile(0) => {
                return Err(Error::tiling(
                    TilingErrorKind::InvalidTiling,
                    format!("{}: data tile size 0 in dimension {d}", tiling.describe()),
                ));
            }
            DimSpec::Tile(t) => HostDim {
                size: size32,
                tile: t,
                bounds: vec![],
            },
            DimSpec::Bounds(b) => {
                let ok = b.first() == Some(&0) && b.last() == Some(&size32) && b.windows(2).all(|w| w[0] < w[1]);
                if !ok {
                    return Err(Error::tiling(
                        TilingErrorKind::InvalidTiling,
                        format!(
                            "{}: dimension {d} boundaries {b:?} must rise strictly from 0 to the size {size}",
                            tiling.describe()
                        ),
                    ));
                }
                HostDim {
                    size: size32,
                    tile: 0,
                    bounds: b,
                }
            }
        };
        dims.push(dim);
    }
    if dims.iter().map(|d| d.count() as u64).product::<u64>() > u32::MAX as u64 {
        return Err(Error::tiling(
            TilingErrorKind::InvalidTiling,
            format!("{} cuts {shape:?} into too many data tiles", tiling.describe()),
        ));
    }
    Ok(dims)
}

/// The paper's `calc_extent` for one dimension: the data tiles that kernel tile `coord`
/// (of `ktile` elements; 0 = whole dimension) intersects, as `(map, extent)`.
pub fn calc_extent(dtile: &DimSpec, size: u32, ktile: u32, coord: u32) -> (u32, u32) {
    let host = spec_to_host(dtile, size);
    let d = host.as_dim();
    let (s, e) = megaops_device::sync::tile_region(coord, ktile, size);
    // SAFETY: `d.bounds` points into `host`, alive for this call.
    unsafe { dev::covered(&d, s, e) }
}

/// The paper's `calc_target` for one dimension: how many producer kernel tiles of
/// `ktile` elements (0 = whole dimension) intersect data tile `j`.
pub fn calc_target(dtile: &DimSpec, size: u32, ktile: u32, j: u32) -> u32 {
    let host = spec_to_host(dtile, size);
    let d = host.as_dim();
    if j >= d.count {
        return 0;
    }
    // SAFETY: `d.bounds` points into `host`; j < count.
    unsafe { dev::producer_tiles_in(&d, j, ktile) }
}

fn spec_to_host(spec: &DimSpec, size: u32) -> HostDim {
    match spec {
        DimSpec::Whole => HostDim {
            size,
            tile: size.max(1),
            bounds: vec![],
        },
        DimSpec::Tile(t) => HostDim {
            size,
            tile: (*t).max(1),
            bounds: vec![],
        },
        DimSpec::Bounds(b) => HostDim {
            size,
            tile: 0,
            bounds: b.clone(),
        },
    }
}

/// Device-layout dims with bounds pointing at `tables[d]` (device addresses).
pub(crate) fn device_dims(dims: &[HostDim], tables: &[u64]) -> [DimTiling; MAX_RANK] {
    let mut out = [DimTiling::plain(0, 1); MAX_RANK];
    for (d, h) in dims.iter().enumerate() {
        out[d] = DimTiling {
            size: h.size,
            tile: h.tile,
            count: h.count(),
            bounds: if h.tile == 0 {
                tables.get(d).copied().unwrap_or(0) as *const u32
            } else {
                std::ptr::null()
            },
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_plain_and_irregular_tilings() {
        let d = resolve(&Rows::<64>, &[300, 96]).unwrap();
        assert_eq!((d[0].count(), d[1].count()), (5, 1));
        let d = resolve(&Grid::<64, 32>, &[64, 100]).unwrap();
        assert_eq!((d[0].count(), d[1].count()), (1, 4));
        let d = resolve(&Irregular::rows(vec![0, 5, 9, 20]), &[20, 8]).unwrap();
        assert_eq!(d[0].count(), 3);
        assert!(resolve(&Irregular::rows(vec![0, 5, 5, 20]), &[20, 8]).is_err());
        assert!(resolve(&Irregular::rows(vec![0, 5, 19]), &[20, 8]).is_err());
        assert!(resolve(&DynRows(0), &[20, 8]).is_err());
        let e = resolve(&Rows::<64>, &[300]).unwrap_err().to_string();
        assert!(e.contains("Rows<64> is for rank-2 tensors"), "{e}");
    }

    #[test]
    fn calc_helpers_match_the_paper_example() {
        // Fig. 3: 128-row kernel tiles over 64-row data tiles: tile 1 maps to data tiles 2..4.
        assert_eq!(calc_extent(&DimSpec::Tile(64), 512, 128, 1), (2, 2));
        // Each 64-row data tile is written by one 128-row kernel tile per column tile.
        assert_eq!(calc_target(&DimSpec::Tile(64), 512, 128, 3), 1);
        // Indivisible: 100-row data tiles, 64-row kernel tiles.
        assert_eq!(calc_extent(&DimSpec::Tile(100), 300, 64, 1), (0, 2));
        assert_eq!(calc_target(&DimSpec::Tile(100), 300, 64, 1), 3);
        assert_eq!(calc_target(&DimSpec::Bounds(vec![0, 10, 300]), 300, 64, 1), 5);
        assert_eq!(calc_target(&DimSpec::Tile(100), 300, 64, 3), 0);
    }
}
