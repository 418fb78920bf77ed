//! [`Tiled`]: a tensor, its data tiling (in the type) and its data-tile semaphores.

use crate::device::Device;
use crate::dtype::DType;
use crate::dump::LiveTiled;
use crate::error::{Error, Result, TilingErrorKind};
use crate::mutex::lock;
use crate::notes::{HostDim, TensorNote};
use crate::order::{SharedUses, TiledUse};
use crate::tensor::Tensor;
use crate::tiling::{DataTiling, device_dims, resolve};
use megaops_device::sync::tiling::signals_received;
use megaops_device::sync::{EPOCH_STRIDE, MAX_RANK, TileSync};
use std::sync::{Arc, Mutex};

/// The producer side of the protocol as the tensor remembers it: the kernel tile per
/// dimension (0 = whole) and the split factor, so consumers' targets and error reports
/// are derived, never typed by hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerTiling {
    /// Producer kernel tile size per dimension (0 = the whole dimension).
    pub ktile: [u32; MAX_RANK],
    /// Producer kernel tiles per output tile (split-K), ≥ 1.
    pub split: u32,
    /// Kernel that produced it.
    pub kernel: &'static str,
    /// Its launch id.
    pub launch_id: u32,
}

/// Where a `Tiled` tensor is in its produce/consume cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for a producer; reading it is an error.
    Armed,
    /// A producer was launched: consumers wait on the semaphores.
    Produced(ProducerTiling),
    /// The data is already complete (built from existing data): consumers do not wait.
    Complete,
    /// Produced by the launches of a graph recorded by
    /// [`AsyncStream::capture`](crate::AsyncStream::capture) that has not been replayed
    /// yet: the data does not exist, so eager reads are refused. Launches inside another
    /// capture may read it (they run when that graph is replayed). The first
    /// [`Graph::launch`](crate::Graph::launch) makes it [`Phase::Complete`].
    Captured,
}

/// A tensor between two kernels, split into data tiles that each carry an `i32`
/// semaphore (an ordinary device tensor the user owns and may read). The data tiling `D`
/// is part of the type: a consumer declared for another tiling does not compile.
///
/// Cycle: [`Tiled::new`] gives an *armed* tensor; launching a producer on it makes it
/// *produced* (consumers launched afterwards wait for each data tile they read);
/// [`Tiled::rearm`] starts the next cycle once the previous contents are no longer
/// needed. Semaphores are never reset: each cycle (epoch) adds [`EPOCH_STRIDE`] to every
/// semaphore, so re-arming is free and works inside CUDA graphs.
///
/// **Launch targets.** Producer and consumers overlap when they are launched on one
/// target (one [`AsyncStream`](crate::AsyncStream), or one plain
/// [`Stream`](crate::Stream)). A tensor remembers the targets that used it: a launch on
/// *another* target waits (stream-level, by an event) for the tensor's last producer and,
/// if it writes the tensor, for the consumers of the previous cycle. That keeps a consumer
/// from taking every SM before a producer queued elsewhere can start (a deadlock), and a
/// re-producer from overwriting rows a consumer elsewhere has not read yet; the price is
/// that work on different targets does not overlap.
///
/// **Graphs.** Outputs of a graph recorded by
/// [`AsyncStream::capture`](crate::AsyncStream::capture) are [`Phase::Captured`] until the
/// graph's first replay: eager launches may not read them.
pub struct Tiled<T: DType, D: DataTiling> {
    data: Tensor<T>,
    sema: Tensor<i32>,
    tables: Vec<Option<Tensor<u32>>>,
    tiling: D,
    dims: Vec<HostDim>,
    id: u32,
    name: String,
    state: Arc<Mutex<TiledState>>,
    uses: SharedUses,
    /// This tensor in the device's registry of live `Tiled` tensors (the only strong
    /// reference: the entry dies with the tensor).
    _live: Arc<LiveTiled>,
}

/// The protocol state of a `Tiled` tensor, shared with launch targets that must restore
/// it (graph capture).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TiledState {
    pub epoch: u32,
    pub phase: Phase,
}

impl<T: DType, D: DataTiling> Tiled<T, D> {
    /// A new armed tensor of `shape` (data uninitialised on the GPU) with zeroed
    /// semaphores. `name` appears in error messages.
    pub fn new(device: &Device, shape: &[usize], tiling: D, name: &str) -> Result<Self> {
        // Constant tilings that cannot be mapped fail to compile here, at the caller.
        #[allow(clippy::let_unit_value)]
        let () = D::CHECK;
        let data = Tensor::empty(device, shape)?;
        Self::assemble(data, None, tiling, name, Phase::Armed)
    }

    /// Wraps a tensor whose data is already complete (e.g. uploaded): consumers read it
    /// without waiting until it is re-armed and produced again.
    pub fn complete(data: Tensor<T>, tiling: D, name: &str) -> Result<Self> {
        #[allow(clippy::let_unit_value)]
        let () = D::CHECK;
        Self::assemble(data, None, tiling, name, Phase::Complete)
    }

    /// An armed tensor over existing data and a semaphore tensor the caller owns. The
    /// semaphores must number exactly one per data tile and all hold the same multiple of
    /// [`EPOCH_STRIDE`] (zero for fresh ones); this reads them to check.
    pub fn with_semaphores(data: Tensor<T>, semaphores: Tensor<i32>, tiling: D, name: &str) -> Result<Self> {
        #[allow(clippy::let_unit_value)]
        let () = D::CHECK;
        Self::assemble(data, Some(semaphores), tiling, name, Phase::Armed)
    }

    fn assemble(data: Tensor<T>, sema: Option<Tensor<i32>>, tiling: D, name: &str, phase: Phase) -> Result<Self> {
        let device = data.device().clone();
        let dims = resolve(&tiling, data.shape())?;
        let n = dims.iter().map(HostDim::count).product::<u32>() as usize;
        let mut epoch = 0;
        let sema = match sema {
            None => Tensor::zeros(&device, &[n.max(1)])?,
            Some(s) => {
                if s.numel() != n {
                    return Err(tiling_error(
                        TilingErrorKind::SemaphoreCount,
                        None,
                        name,
                        format!(
                            "`{name}`: {} cuts shape {:?} into {n} data tiles, but its semaphore tensor has {} entries",
                            tiling.describe(),
                            data.shape(),
                            s.numel()
                        ),
                    ));
                }
                let values = s.to_vec()?;
                let first = values.first().copied().unwrap_or(0);
                if values.iter().any(|&v| v != first) || first % EPOCH_STRIDE != 0 {
                    return Err(tiling_error(
                        TilingErrorKind::SemaphoreValues,
                        None,
                        name,
                        format!(
                            "`{name}`: semaphores must all hold the same multiple of {EPOCH_STRIDE} (zero when fresh); \
                             found {:?}…",
                            &values[..values.len().min(8)]
                        ),
                    ));
                }
                epoch = (first / EPOCH_STRIDE) as u32;
                s
            }
        };
        let tables = dims
            .iter()
            .map(|d| {
                (d.tile == 0)
                    .then(|| Tensor::from_slice(&device, &[d.bounds.len()], &d.bounds))
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        let state = Arc::new(Mutex::new(TiledState { epoch, phase }));
        let live = Arc::new(LiveTiled {
            name: name.to_string(),
            dtype: T::NAME,
            shape: data.shape().to_vec(),
            tiling: tiling.describe(),
            dims: dims.clone(),
            sema: sema.clone(),
            state: state.clone(),
        });
        device.register_tiled(&live);
        Ok(Tiled {
            data,
            sema,
            tables,
            tiling,
            dims,
            id: device.next_tensor_id(),
            name: name.to_string(),
            state,
            uses: SharedUses::default(),
            _live: live,
        })
    }

    /// The data.
    pub fn tensor(&self) -> &Tensor<T> {
        &self.data
    }

    /// The semaphores, one `i32` per data tile, row-major over the data-tile grid.
    pub fn semaphores(&self) -> &Tensor<i32> {
        &self.sema
    }

    /// The data tiling.
    pub fn tiling(&self) -> &D {
        &self.tiling
    }

    /// Shape of the data.
    pub fn shape(&self) -> &[usize] {
        self.data.shape()
    }

    /// Name used in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Current epoch (number of completed re-arms since the semaphores were zero).
    pub fn epoch(&self) -> u32 {
        lock(&self.state).epoch
    }

    /// Where it is in its cycle.
    pub fn phase(&self) -> Phase {
        lock(&self.state).phase.clone()
    }

    /// Number of data tiles along each dimension.
    pub fn data_tile_counts(&self) -> Vec<u32> {
        self.dims.iter().map(HostDim::count).collect()
    }

    /// Starts the next cycle: the next producer may write it again. Call it when no
    /// consumer of the current contents remains to be launched. (Consumers already
    /// launched are safe: on the same target, streams and semaphores order the next
    /// producer after them; on another target it waits for them.)
    pub fn rearm(&mut self) {
        let mut st = lock(&self.state);
        if let Phase::Produced(_) = st.phase {
            st.epoch = st.epoch.wrapping_add(1);
        }
        st.phase = Phase::Armed;
    }

    /// Test support: records `kernel` as this cycle's producer *without launching
    /// anything*, as if a producer had been launched that never signals. Consumers then
    /// wait on data tiles nobody will fill — the situation the wait timeouts (GPU) and the
    /// deadlock detection (CPU backend) exist to report. `ktile` is the pretend
    /// producer's kernel tile per dimension (0 = whole dimension).
    #[doc(hidden)]
    pub fn plant_missing_producer(&mut self, kernel: &'static str, ktile: &[u32]) {
        let mut k = [0u32; MAX_RANK];
        for (d, &t) in ktile.iter().take(MAX_RANK).enumerate() {
            k[d] = t;
        }
        lock(&self.state).phase = Phase::Produced(ProducerTiling {
            ktile: k,
            split: 1,
            kernel,
            launch_id: 0,
        });
    }

    /// Copies the data to the host (waits for all queued work).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.data.to_vec()
    }

    /// Per data tile: `(signals received, signals expected)` in the current cycle, read
    /// from the semaphores (waits for queued work) — the debugging view of a hang.
    pub fn progress(&self) -> Result<Vec<(u32, u32)>> {
        let values = self.sema.to_vec()?;
        let st = lock(&self.state).clone();
        let Phase::Produced(p) = &st.phase else {
            return Ok(values.iter().map(|_| (0, 0)).collect());
        };
        let counts = self.data_tile_counts();
        // Host view of the tiling (bounds tables point into self.dims).
        let mut with_bounds = device_dims(&self.dims, &[]);
        for (d, h) in with_bounds.iter_mut().zip(&self.dims) {
            *d = h.as_dim();
        }
        let ready = ready_value(st.epoch);
        Ok(values
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let c = crate::notes::tile_coords(i as u32, &counts);
                let mut coords = [0u32; MAX_RANK];
                coords[..c.len()].copy_from_slice(&c);
                // SAFETY: host bounds live in self.dims for this call.
                let target = unsafe {
                    megaops_device::sync::tiling::target_of(
                        &with_bounds,
                        self.dims.len() as u32,
                        &coords,
                        &p.ktile,
                        p.split,
                    )
                };
                (signals_received(v, ready, target), target)
            })
            .collect())
    }

    fn sync_block(&self, target: i32) -> TileSync {
        let tables: Vec<u64> = self.tables.iter().map(|t| t.as_ref().map_or(0, Tensor::addr)).collect();
        TileSync {
            sema: self.sema.addr() as *mut i32,
            tensor_id: self.id,
            target,
            rank: self.dims.len() as u32,
            dims: device_dims(&self.dims, &tables),
        }
    }

    /// The consumer side of a launch: the sync block, the note for messages and, for a
    /// tensor only a captured graph produces, why an eager launch must not read it.
    pub(crate) fn consumer_sync(&self, kernel: &str, param: &str) -> Result<(TileSync, TensorNote, Option<String>)> {
        let st = lock(&self.state).clone();
        match &st.phase {
            Phase::Armed => Err(tiling_error(
                TilingErrorKind::ReadBeforeProduced,
                Some(kernel),
                &self.name,
                format!(
                    "`{kernel}` reads `{}` (parameter `{param}`) before any kernel produced it: launch its producer \
                     first, or build it with `Tiled::complete` if its data is already there",
                    self.name
                ),
            )),
            Phase::Complete => Ok((TileSync::NONE, self.note(st.epoch, None), None)),
            Phase::Captured => {
                let why = format!(
                    "`{kernel}` reads `{}` (parameter `{param}`), whose producer was captured into a graph that has \
                     not been replayed yet: its data does not exist before `Graph::launch` replays that graph \
                     (a launch inside another `AsyncStream::capture` may read it)",
                    self.name
                );
                Ok((TileSync::NONE, self.note(st.epoch, None), Some(why)))
            }
            Phase::Produced(p) => Ok((
                self.sync_block(ready_value(st.epoch)),
                self.note(st.epoch, Some(p)),
                None,
            )),
        }
    }

    pub(crate) fn producer_sync(&self, kernel: &str, param: &str) -> Result<TileSync> {
        match &lock(&self.state).phase {
            Phase::Armed => Ok(self.sync_block(0)),
            Phase::Produced(p) => Err(tiling_error(
                TilingErrorKind::AlreadyProduced,
                Some(kernel),
                &self.name,
                format!(
                    "`{kernel}` writes `{}` (parameter `{param}`), which `{}` (launch {}) already produced in this \
                     cycle: call `rearm()` on it once its consumers are launched",
                    self.name, p.kernel, p.launch_id
                ),
            )),
            Phase::Complete => Err(tiling_error(
                TilingErrorKind::HoldsCompleteData,
                Some(kernel),
                &self.name,
                format!(
                    "`{kernel}` writes `{}` (parameter `{param}`), which holds complete data: call `rearm()` on it \
                     first",
                    self.name
                ),
            )),
            Phase::Captured => Err(tiling_error(
                TilingErrorKind::ProducedByGraph,
                Some(kernel),
                &self.name,
                format!(
                    "`{kernel}` writes `{}` (parameter `{param}`), which a captured graph produces: call `rearm()` on \
                     it first (a later replay of that graph overwrites it again)",
                    self.name
                ),
            )),
        }
    }

    /// How a launch uses this tensor, for ordering across launch targets.
    pub(crate) fn tiled_use(&self, write: bool) -> TiledUse {
        TiledUse {
            uses: self.uses.clone(),
            write,
        }
    }

    pub(crate) fn state(&self) -> &Arc<Mutex<TiledState>> {
        &self.state
    }

    pub(crate) fn note(&self, epoch: u32, producer: Option<&ProducerTiling>) -> TensorNote {
        TensorNote {
            name: self.name.clone(),
            dims: self.dims.clone(),
            ready: ready_value(epoch),
            producer: producer.map(|p| (p.ktile, p.split)),
            producer_launch: producer.map(|p| (p.kernel, p.launch_id)),
        }
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    pub(crate) fn buffers(&self) -> Vec<std::sync::Arc<crate::buffer::Buffer>> {
        let mut v = vec![self.data.buffer().clone(), self.sema.buffer().clone()];
        v.extend(self.tables.iter().flatten().map(|t| t.buffer().clone()));
        v
    }

    pub(crate) fn semaphore_count(&self) -> usize {
        self.sema.numel()
    }
}

impl<T: DType, D: DataTiling> std::fmt::Debug for Tiled<T, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.state).clone();
        write!(
            f,
            "Tiled<{}, {}>`{}`{:?} ({:?}, epoch {})",
            T::NAME,
            self.tiling.describe(),
            self.name,
            self.shape(),
            st.phase,
            st.epoch
        )
    }
}

/// Semaphore value (serial-compared) at which a data tile of epoch `epoch` is ready.
pub(crate) fn ready_value(epoch: u32) -> i32 {
    (epoch.wrapping_add(1) as i32).wrapping_mul(EPOCH_STRIDE)
}

/// An [`Error::Tiling`] of `kind` about tensor `tensor`, found by `kernel`'s launch.
fn tiling_error(kind: TilingErrorKind, kernel: Option<&str>, tensor: &str, message: String) -> Error {
    Error::Tiling {
        kind,
        kernel: kernel.map(str::to_string),
        tensor: Some(tensor.to_string()),
        message,
    }
}
