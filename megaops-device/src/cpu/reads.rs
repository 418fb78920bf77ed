//! The out-of-tile read check ([`super::VgpuConfig::check_reads`]): a kernel thread that
//! reads a synchronised input outside the data tiles it waited for stops the run with
//! [`super::CpuError::OutOfTileRead`].
//!
//! On a GPU such a read races with the producer (a stencil that reads the next rows of
//! its input sees them half written, or not at all) and nothing notices. Here every GPU
//! thread keeps, per synchronised input of its current kernel tile, the input's address
//! range and the boxes of data tiles its waits covered:
//! - `#[megaops::kernel]`'s CPU-backend body calls [`super::hooks::watch_input`] for each
//!   input at the start of each kernel tile (no data tile waited for yet);
//! - `wait_input` adds the box of data tiles it waited for ([`record_waited`]);
//! - reads check their address ([`super::hooks::check_read`]): the CPU-backend body
//!   routes every dereference, `read()`/`ptr::read(..)` whose operand mentions an input
//!   through [`ReadProbe`], and the device library's vector loads and `cp.async` copies
//!   check their source.
//!
//! A read through a pointer the body derived from an input and then dereferenced under
//! another name (`let row = x.add(r * n); *row.add(j)`) is checked only when it goes
//! through the device library's loads.

use std::fmt;
use std::mem::{ManuallyDrop, size_of};

use super::report::Xyz;
use crate::Dim3;
use crate::sync::tiling::{TileBox, data_tile_of};
use crate::sync::{MAX_RANK, TileSync};

/// One synchronised input a thread reads in its current kernel tile.
pub(crate) struct Watch {
    /// Byte range of the input's elements.
    start: usize,
    end: usize,
    /// Bytes per element.
    elem: usize,
    sync: TileSync,
    launch_id: u32,
    tile: u32,
    /// Boxes of data tiles the thread's waits covered.
    waited: Vec<TileBox>,
}

/// A read of a synchronised input outside the data tiles the reading thread waited for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileRead {
    /// Kernel name.
    pub kernel: String,
    /// Block index of the reading thread.
    pub block: Dim3,
    /// Its thread index.
    pub thread: Dim3,
    /// Host-assigned launch number of the kernel.
    pub launch_id: u32,
    /// Linear (remapped) kernel tile the thread was working on.
    pub tile: u32,
    /// Host-assigned id of the input tensor.
    pub tensor_id: u32,
    /// Coordinates of the element read, outermost dimension first.
    pub element: Vec<u32>,
    /// Coordinates of the data tile that holds it.
    pub data_tile: Vec<u32>,
    /// Data tiles of the input per dimension.
    pub tiles_per_dim: Vec<u32>,
    /// The boxes of data tiles the thread's waits covered in this kernel tile (empty: it
    /// had not waited for this input yet).
    pub waited: Vec<TileBox>,
}

impl fmt::Display for TileRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kernel `{}`, block {}, thread {}: out-of-tile read of tensor#{} element {} in data tile {}; its kernel \
             tile (launch {}, tile {}) waited for {}",
            self.kernel,
            Xyz(self.block),
            Xyz(self.thread),
            self.tensor_id,
            coords(&self.element),
            coords(&self.data_tile),
            self.launch_id,
            self.tile,
            waited_text(&self.waited, self.element.len())
        )
    }
}

/// `(8, 0)`.
pub fn coords(c: &[u32]) -> String {
    let parts: Vec<String> = c.iter().map(u32::to_string).collect();
    format!("({})", parts.join(", "))
}

/// The data tiles of `boxes` (rank `rank`) as `(0..=1, 0)`, or "no data tile of it".
pub fn waited_text(boxes: &[TileBox], rank: usize) -> String {
    if boxes.is_empty() || boxes.iter().all(TileBox::is_empty) {
        return "no data tile of it".to_string();
    }
    let parts: Vec<String> = boxes
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| {
            let dims: Vec<String> = (0..rank.min(MAX_RANK))
                .map(|d| match b.count[d] {
                    1 => b.first[d].to_string(),
                    n => format!("{}..={}", b.first[d], b.first[d] + n - 1),
                })
                .collect();
            format!("data tiles ({})", dims.join(", "))
        })
        .collect();
    format!("{} only", parts.join(" and "))
}

impl Watch {
    pub(crate) fn new(launch_id: u32, tile: u32, data: *const u8, elem: usize, sync: &TileSync) -> Option<Watch> {
        let rank = (sync.rank as usize).min(MAX_RANK);
        let numel = sync.dims[..rank]
            .iter()
            .try_fold(1usize, |n, d| n.checked_mul(d.size as usize))?;
        let start = data as usize;
        Some(Watch {
            start,
            end: start.checked_add(numel.checked_mul(elem)?)?,
            elem: elem.max(1),
            sync: *sync,
            launch_id,
            tile,
            waited: Vec::new(),
        })
    }

    /// The semaphores identify the tensor.
    pub(crate) fn is_for(&self, sync: &TileSync) -> bool {
        self.sync.sema == sync.sema
    }

    pub(crate) fn add_waited(&mut self, tiles: &TileBox) {
        if !self.waited.contains(tiles) {
            self.waited.push(*tiles);
        }
    }

    /// The first element of `[addr, addr + bytes)` inside this input whose data tile the
    /// thread did not wait for: `(element coordinates, data tile coordinates)`.
    pub(crate) fn unwaited(&self, addr: usize, bytes: usize) -> Option<(Vec<u32>, Vec<u32>)> {
        let last = addr.saturating_add(bytes.max(1) - 1);
        if last < self.start || addr >= self.end {
            return None;
        }
        let first_elem = (addr.max(self.start) - self.start) / self.elem;
        let last_elem = (last.min(self.end - 1) - self.start) / self.elem;
        [first_elem, last_elem].into_iter().find_map(|e| {
            let (element, tile) = self.locate(e);
            let inside = self
                .waited
                .iter()
                .any(|b| (0..element.len()).all(|d| tile[d] >= b.first[d] && tile[d] - b.first[d] < b.count[d]));
            (!inside).then_some((element, tile))
        })
    }

    /// Coordinates of linear element `e` and of its data tile.
    fn locate(&self, mut e: usize) -> (Vec<u32>, Vec<u32>) {
        let rank = (self.sync.rank as usize).min(MAX_RANK);
        let mut element = vec![0u32; rank];
        for d in (0..rank).rev() {
            let size = (self.sync.dims[d].size as usize).max(1);
            element[d] = (e % size) as u32;
            e /= size;
        }
        let tile = (0..rank)
            // SAFETY: the launcher built the tiling (an irregular dimension's bounds are
            // host memory on this backend, alive while the launch runs).
            .map(|d| unsafe { data_tile_of(&self.sync.dims[d], element[d]) })
            .collect();
        (element, tile)
    }

    /// The report of a read of `element` (in data tile `data_tile`).
    pub(crate) fn report(&self, element: Vec<u32>, data_tile: Vec<u32>) -> TileRead {
        let rank = element.len();
        TileRead {
            kernel: String::new(),
            block: Dim3::new(0, 0, 0),
            thread: Dim3::new(0, 0, 0),
            launch_id: self.launch_id,
            tile: self.tile,
            tensor_id: self.sync.tensor_id,
            element,
            data_tile,
            tiles_per_dim: self.sync.dims[..rank].iter().map(|d| d.count).collect(),
            waited: self.waited.clone(),
        }
    }
}

/// Adds the box of data tiles a successful `wait_input` on `sync` covered to the calling
/// thread's watch of that input (no-op outside a kernel or when the input is not watched).
pub(crate) fn record_waited(sync: &TileSync, tiles: &TileBox) {
    if !super::thread::in_kernel() {
        return;
    }
    super::thread::with_current("record_waited", |_, t, _| t.record_waited(sync, tiles));
}

/// A value on its way to a dereference in a CPU-backend kernel body: pointers and
/// references are checked ([`ProbePointer`]), anything else passes unchanged
/// ([`ProbeOther`]). The macro writes `ReadProbe::new(p).probe()` with both traits in
/// scope; method resolution picks `ProbePointer` for pointers and references (by value)
/// and falls back to `ProbeOther` (by `&mut`) for every other type.
#[doc(hidden)]
pub struct ReadProbe<P>(ManuallyDrop<P>);

impl<P> ReadProbe<P> {
    /// Wraps the operand of a dereference.
    pub fn new(p: P) -> Self {
        ReadProbe(ManuallyDrop::new(p))
    }
}

/// Checks a read through a pointer or reference ([`super::hooks::check_read`]).
#[doc(hidden)]
pub trait ProbePointer<P> {
    /// The pointer, after checking the read of the `T` it points to.
    fn probe(self) -> P;
}

/// Lets every other operand pass unchanged.
#[doc(hidden)]
pub trait ProbeOther<P> {
    /// The operand.
    fn probe(self) -> P;
}

macro_rules! probe_pointer {
    ($($t:ty),*) => {$(
        impl<'a, T> ProbePointer<$t> for ReadProbe<$t> {
            fn probe(self) -> $t {
                let p = ManuallyDrop::into_inner(self.0);
                super::hooks::check_read(&raw const *p as *const u8, size_of::<T>());
                p
            }
        }
    )*};
}

probe_pointer!(&'a T, &'a mut T);

impl<T> ProbePointer<*const T> for ReadProbe<*const T> {
    fn probe(self) -> *const T {
        let p = ManuallyDrop::into_inner(self.0);
        super::hooks::check_read(p.cast(), size_of::<T>());
        p
    }
}

impl<T> ProbePointer<*mut T> for ReadProbe<*mut T> {
    fn probe(self) -> *mut T {
        let p = ManuallyDrop::into_inner(self.0);
        super::hooks::check_read(p.cast_const().cast(), size_of::<T>());
        p
    }
}

impl<P> ProbeOther<P> for &mut ReadProbe<P> {
    fn probe(self) -> P {
        // SAFETY: the probe is a temporary the macro creates for this one call: its value
        // is taken exactly once here and the probe, which never drops it
        // (`ManuallyDrop`), is not used again.
        unsafe { ManuallyDrop::take(&mut self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::DimTiling;

    fn sync(dims: &[DimTiling]) -> TileSync {
        let mut s = TileSync::NONE;
        s.sema = 8 as *mut i32;
        s.tensor_id = 3;
        s.rank = dims.len() as u32;
        s.dims[..dims.len()].copy_from_slice(dims);
        s
    }

    #[test]
    fn reads_outside_the_waited_data_tiles_are_found() {
        // 12 x 8 f32, data tiles of 4 rows: tiles 0..3 along rows, 1 along columns.
        let s = sync(&[DimTiling::plain(12, 4), DimTiling::plain(8, 8)]);
        let mut w = Watch::new(7, 1, 0x1000 as *const u8, 4, &s).expect("fits");
        let row = |r: usize| 0x1000 + r * 8 * 4;
        assert_eq!(
            w.unwaited(row(5), 4),
            Some((vec![5, 0], vec![1, 0])),
            "nothing waited yet"
        );
        w.add_waited(&TileBox {
            first: [1, 0, 0, 0],
            count: [1, 1, 0, 0],
            rank: 2,
        });
        assert_eq!(w.unwaited(row(4), 4), None);
        assert_eq!(w.unwaited(row(7) + 28, 4), None, "last element of tile 1");
        assert_eq!(w.unwaited(row(8), 4), Some((vec![8, 0], vec![2, 0])), "the next rows");
        assert_eq!(
            w.unwaited(row(7) + 28, 8),
            Some((vec![8, 0], vec![2, 0])),
            "a read across the edge"
        );
        assert_eq!(w.unwaited(0x0ff0, 16), None, "outside the tensor");
        assert_eq!(w.unwaited(row(12), 4), None, "past the end");
        let r = w.report(vec![8, 0], vec![2, 0]);
        assert_eq!(waited_text(&r.waited, 2), "data tiles (1, 0) only");
    }

    #[test]
    fn probes_pass_every_operand_through() {
        let v = [1.0f32, 2.0];
        let p = v.as_ptr();
        // Outside a kernel the check is a no-op; the probe returns its operand.
        assert_eq!(ReadProbe::new(p).probe(), p);
        assert_eq!(*ReadProbe::new(&v[1]).probe(), 2.0);
        let s: &[f32] = &v;
        assert_eq!(ReadProbe::new(s).probe().len(), 2);
        let b = Box::new(5u8);
        #[allow(unused_imports)]
        use ProbeOther as _;
        assert_eq!(*ReadProbe::new(b).probe(), 5);
    }
}
