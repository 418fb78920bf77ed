//! [`Device`]: a CUDA GPU or the CPU backend, behind one API.

use crate::async_stream::BeginRule;
use crate::backend::cpu::CpuDevice;
use crate::backend::cuda::CudaDevice;
use crate::backend::{BackendKind, DeviceBackend, DeviceLimits, Failure};
use crate::buffer::Buffer;
use crate::dump::{LiveTiled, SemaphoreDump};
use crate::error::{Error, Result, SyncFailure};
use crate::mutex::lock;
use crate::notes::LaunchNotes;
use megaops_device::cpu::{CpuError, SemaphoreWait, VgpuConfig};
use megaops_device::sync::ErrorLog;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// A device kernels run on: an NVIDIA GPU, or the CPU backend's virtual GPU. Cheap to
/// clone (shared handle).
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    backend: Arc<dyn DeviceBackend>,
    limits: DeviceLimits,
    /// Device error log that timed-out waits write to.
    error_log: Mutex<Option<Arc<Buffer>>>,
    next_launch: AtomicU32,
    next_tensor: AtomicU32,
    timeout_ns: AtomicU64,
    poll_spin_ns: AtomicU32,
    /// The [`BeginRule`] of new AsyncStreams ([`BeginRule::index`]).
    begin_rule: AtomicU8,
    /// Whether new AsyncStreams run one-chunk subkernels on the launch's own stream.
    one_chunk_on_lane: std::sync::atomic::AtomicBool,
    pub(crate) notes: Mutex<LaunchNotes>,
    /// Registered ticket counters: (allocation, byte offset, bytes).
    tickets: Mutex<Vec<(Weak<Buffer>, usize, usize)>>,
    /// The tile-trace log, once `start_trace` made one.
    trace: Mutex<Option<crate::trace::TraceBuffer>>,
    /// Every `Tiled` tensor made on this device, for [`Device::dump_semaphores`] (dead
    /// entries are pruned when a tensor registers).
    tiled: Mutex<Vec<Weak<LiveTiled>>>,
}

/// Default time a tile wait spins before it reports a timeout.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Default time a tile wait re-reads its semaphores without sleeping before it backs off
/// with `nanosleep` ([`Device::set_poll_spin`]).
pub const DEFAULT_POLL_SPIN: Duration = Duration::ZERO;

/// Longest [`Device::set_poll_spin`] accepts (the kernel parameter is a `u32` of ns).
pub const MAX_POLL_SPIN: Duration = Duration::from_secs(4);

/// Refuses a poll spin longer than [`MAX_POLL_SPIN`] (what [`Device::set_poll_spin`]
/// checks, for callers that validate before they have a device).
pub fn check_poll_spin(spin: Duration) -> Result<()> {
    if spin > MAX_POLL_SPIN {
        return Err(Error::Invalid(format!(
            "a poll spin of {spin:?} is longer than the {MAX_POLL_SPIN:?} a launch can carry"
        )));
    }
    Ok(())
}

impl Device {
    fn from_backend(backend: Arc<dyn DeviceBackend>) -> Result<Device> {
        let log = Arc::new(Buffer::new(&backend, std::mem::size_of::<ErrorLog>())?);
        let dev = Device {
            inner: Arc::new(DeviceInner {
                limits: backend.limits(),
                backend,
                error_log: Mutex::new(None),
                next_launch: AtomicU32::new(1),
                next_tensor: AtomicU32::new(1),
                timeout_ns: AtomicU64::new(DEFAULT_WAIT_TIMEOUT.as_nanos() as u64),
                poll_spin_ns: AtomicU32::new(DEFAULT_POLL_SPIN.as_nanos() as u32),
                begin_rule: AtomicU8::new(BeginRule::default().index()),
                one_chunk_on_lane: std::sync::atomic::AtomicBool::new(true),
                notes: Mutex::new(LaunchNotes::default()),
                tickets: Mutex::new(Vec::new()),
                trace: Mutex::new(None),
                tiled: Mutex::new(Vec::new()),
            }),
        };
        dev.memset_zero(&log)?;
        *lock(&dev.inner.error_log) = Some(log);
        Ok(dev)
    }

    /// CUDA device `ordinal`.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        Device::from_backend(Arc::new(CudaDevice::open(ordinal)?))
    }

    /// The CPU backend with the given virtual-GPU configuration.
    pub fn cpu(config: VgpuConfig) -> Result<Device> {
        Device::from_backend(Arc::new(CpuDevice::new(config)?))
    }

    /// GPU 0 if there is one, otherwise the CPU backend; when it falls back, it says why
    /// on stderr. `MEGAOPS_BACKEND=cpu` forces the CPU backend, `=cuda` forbids the
    /// fallback.
    pub fn auto() -> Result<Device> {
        let (dev, reason) = Device::auto_with_reason()?;
        if let Some(reason) = reason {
            eprintln!("megaops: running on the CPU backend ({reason})");
        }
        Ok(dev)
    }

    /// Like [`Device::auto`], returning the reason for a CPU fallback instead of printing it.
    pub fn auto_with_reason() -> Result<(Device, Option<String>)> {
        match std::env::var("MEGAOPS_BACKEND").ok().as_deref() {
            Some("cpu") => return Ok((Device::cpu(VgpuConfig::default())?, Some("MEGAOPS_BACKEND=cpu".into()))),
            Some("cuda") => return Ok((Device::cuda(0)?, None)),
            _ => {}
        }
        match Device::cuda(0) {
            Ok(d) => Ok((d, None)),
            Err(e) => Ok((Device::cpu(VgpuConfig::default())?, Some(e.to_string()))),
        }
    }

    pub(crate) fn backend(&self) -> &Arc<dyn DeviceBackend> {
        &self.inner.backend
    }

    /// Allocates `bytes` bytes of device memory (zeroed on the CPU backend only).
    pub(crate) fn alloc(&self, bytes: usize) -> Result<Buffer> {
        Buffer::new(&self.inner.backend, bytes)
    }

    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        self.inner.backend.kind()
    }

    /// True on a real GPU.
    pub fn is_cuda(&self) -> bool {
        self.kind() == BackendKind::Cuda
    }

    /// Device name (`"NVIDIA H200"`, or `"CPU backend (8 virtual SMs)"`).
    pub fn name(&self) -> String {
        self.inner.backend.name()
    }

    /// Number of (virtual) streaming multiprocessors.
    pub fn sm_count(&self) -> u32 {
        self.inner.limits.sm_count
    }

    /// Shared memory per SM in bytes.
    pub fn smem_per_sm(&self) -> u32 {
        self.inner.limits.smem_per_sm
    }

    /// Largest dynamic shared memory one block may opt in to.
    pub fn max_smem_per_block(&self) -> u32 {
        self.inner.limits.max_smem_per_block
    }

    /// L2 cache size in bytes (0 on the CPU backend).
    pub fn l2_bytes(&self) -> u32 {
        self.inner.limits.l2_bytes
    }

    /// How long a device-side tile wait spins before it reports a timeout.
    pub fn wait_timeout(&self) -> Duration {
        Duration::from_nanos(self.inner.timeout_ns.load(Ordering::Relaxed))
    }

    /// Sets the tile-wait timeout for launches made from now on.
    pub fn set_wait_timeout(&self, timeout: Duration) {
        self.inner
            .timeout_ns
            .store(timeout.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// How long a device-side tile wait re-reads its semaphores without sleeping before it
    /// backs off with `nanosleep`.
    pub fn poll_spin(&self) -> Duration {
        Duration::from_nanos(self.inner.poll_spin_ns.load(Ordering::Relaxed) as u64)
    }

    /// Sets [`Device::poll_spin`] for launches made from now on (graphs keep the value of
    /// their capture). Refuses more than [`MAX_POLL_SPIN`].
    pub fn set_poll_spin(&self, spin: Duration) -> Result<()> {
        check_poll_spin(spin)?;
        self.inner.poll_spin_ns.store(spin.as_nanos() as u32, Ordering::Relaxed);
        Ok(())
    }

    /// The [`BeginRule`] of AsyncStreams made from now on whose options name none.
    pub fn begin_rule(&self) -> BeginRule {
        BeginRule::from_index(self.inner.begin_rule.load(Ordering::Relaxed))
    }

    /// Sets [`Device::begin_rule`].
    pub fn set_begin_rule(&self, rule: BeginRule) {
        self.inner.begin_rule.store(rule.index(), Ordering::Relaxed);
    }

    /// Whether AsyncStreams made from now on whose options say nothing run a subkernel of
    /// one chunk that signals its own data tiles on the launch's own stream
    /// ([`AsyncOptions::one_chunk_on_lane`](crate::AsyncOptions)); on by default.
    pub fn one_chunk_on_lane(&self) -> bool {
        self.inner.one_chunk_on_lane.load(Ordering::Relaxed)
    }

    /// Sets [`Device::one_chunk_on_lane`].
    pub fn set_one_chunk_on_lane(&self, on: bool) {
        self.inner.one_chunk_on_lane.store(on, Ordering::Relaxed);
    }

    pub(crate) fn next_launch_id(&self) -> u32 {
        self.inner.next_launch.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn next_tensor_id(&self) -> u32 {
        self.inner.next_tensor.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn error_log_addr(&self) -> u64 {
        lock(&self.inner.error_log).as_ref().map_or(0, |b| b.addr())
    }

    pub(crate) fn trace_slot(&self) -> &Mutex<Option<crate::trace::TraceBuffer>> {
        &self.inner.trace
    }

    pub(crate) fn notes(&self) -> std::sync::MutexGuard<'_, LaunchNotes> {
        lock(&self.inner.notes)
    }

    /// Loads a kernel crate's PTX module (every function in it) now. Launches load
    /// modules on first use; preloading keeps that out of overlapped and timed runs.
    pub fn preload(&self, module: &'static crate::PtxModule) -> Result<()> {
        self.inner.backend.preload(module)
    }

    /// Bytes of device memory the allocator holds (in use or cached; 0 on the CPU backend).
    pub fn reserved_bytes(&self) -> usize {
        self.inner.backend.reserved_bytes()
    }

    /// Same device (same handle).
    pub fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Waits for all queued work on every stream, then reports tile waits that timed out
    /// (GPU) or a deadlock (CPU backend) as [`Error::Sync`].
    pub fn synchronize(&self) -> Result<()> {
        self.inner.backend.synchronize().map_err(|f| self.report(f))?;
        self.check_error_log()
    }

    /// Registers the `bytes` bytes at `offset` of `buffer` as ticket counters (see
    /// [`Device::register_tickets`]).
    pub(crate) fn register_ticket_span(&self, buffer: &Arc<Buffer>, offset: usize, bytes: usize) {
        let mut t = lock(&self.inner.tickets);
        t.retain(|(b, _, _)| b.strong_count() > 0);
        t.push((Arc::downgrade(buffer), offset, bytes));
    }

    /// Registers a new `Tiled` tensor for [`Device::dump_semaphores`].
    pub(crate) fn register_tiled(&self, live: &Arc<LiveTiled>) {
        let mut t = lock(&self.inner.tiled);
        t.retain(|w| w.strong_count() > 0);
        t.push(Arc::downgrade(live));
    }

    /// Every live [`Tiled`](crate::Tiled) tensor of this device, in creation order: name,
    /// shape, data tiling, phase, this cycle's producer (kernel, launch, stream) and each
    /// data tile's semaphore against its target, as signals received of signals expected.
    /// Its `Display` is the table that hang and timeout reports end with.
    ///
    /// It reads the semaphores as they are now, without waiting for queued work
    /// (synchronise first for a settled view). A tensor whose semaphores cannot be read
    /// says so in its entry; the dump itself does not fail.
    pub fn dump_semaphores(&self) -> Result<SemaphoreDump> {
        let live: Vec<Arc<LiveTiled>> = lock(&self.inner.tiled).iter().filter_map(Weak::upgrade).collect();
        let notes = self.notes();
        let tensors = live.iter().map(|t| t.dump(self, &notes)).collect();
        Ok(SemaphoreDump { tensors })
    }

    /// A synchronisation failure: the dump of live `Tiled` tensors for its report.
    fn failure(&self, headline: String, waits: Vec<String>) -> Error {
        Error::Sync(SyncFailure {
            headline,
            waits,
            semaphores: self.dump_semaphores().ok(),
        })
    }

    /// After a reported synchronisation failure: waits for all work, then zeroes the
    /// registered ticket counters. Returns a note for the error message if that failed.
    fn rearm_tickets(&self) -> Option<String> {
        let waited = self.inner.backend.synchronize().map_err(|f| match f {
            Failure::Error(e) => e,
            Failure::Stop(e) => Error::Cpu(e.to_string()),
        });
        if let Err(e) = waited {
            return Some(format!("(ticket counters not re-zeroed: {e})"));
        }
        let live: Vec<(Arc<Buffer>, usize, usize)> = lock(&self.inner.tickets)
            .iter()
            .filter_map(|(b, o, n)| b.upgrade().map(|b| (b, *o, *n)))
            .collect();
        for (buf, offset, bytes) in live {
            if let Err(e) = self.copy_to_device(&buf, offset, &vec![0u8; bytes]) {
                return Some(format!("(ticket counters not re-zeroed: {e})"));
            }
        }
        None
    }

    /// A backend failure as the error to report: a CPU-backend stop through
    /// [`Device::cpu_error`], anything else as it is.
    pub(crate) fn report(&self, failure: Failure) -> Error {
        match failure {
            Failure::Error(e) => e,
            Failure::Stop(e) => self.cpu_error(e),
        }
    }

    /// Turns a CPU-backend stop into the same errors the GPU gives: a deadlock or a hang
    /// with the tensor, data tile and expected producer of every blocked wait; an
    /// out-of-tile read with the tensor's name.
    pub(crate) fn cpu_error(&self, e: CpuError) -> Error {
        match e {
            CpuError::Deadlock(report) => {
                let waits = report.waits.clone();
                self.blocked_waits(report.to_string(), &waits)
            }
            CpuError::Hang(report) => {
                let waits = report.waits.clone();
                self.blocked_waits(report.to_string(), &waits)
            }
            CpuError::OutOfTileRead(read) => {
                let mut message = format!("CPU backend: {}", self.notes().describe_read(&read));
                if let Some(note) = self.rearm_tickets() {
                    message = format!("{message} {note}");
                }
                Error::tiling(crate::error::TilingErrorKind::OutOfTileRead, message)
            }
            other => Error::Cpu(other.to_string()),
        }
    }

    /// A CPU-backend stop (`report`, its first line the headline) with its blocked
    /// semaphore waits, as [`Error::Sync`].
    fn blocked_waits(&self, report: String, blocked: &[SemaphoreWait]) -> Error {
        let notes = self.notes();
        let waits = blocked.iter().map(|w| notes.describe_wait(&w.site, w.value)).collect();
        let producers = notes.expected_producers(blocked.iter().map(|w| (w.site.launch_id, w.site.tensor_id)));
        drop(notes);
        // The producers go on the headline's first line, before the state dump.
        let (first, rest) = report.split_once('\n').unwrap_or((report.as_str(), ""));
        let rest = if rest.is_empty() {
            String::new()
        } else {
            format!("\n{rest}")
        };
        let mut headline = format!("CPU backend: {first}{producers}{rest}");
        if let Some(note) = self.rearm_tickets() {
            headline = format!("{headline} {note}");
        }
        self.failure(headline, waits)
    }

    /// Reads the device error log; on a recorded timeout, clears it and returns the error.
    pub(crate) fn check_error_log(&self) -> Result<()> {
        let Some(log_buf) = lock(&self.inner.error_log).clone() else {
            return Ok(());
        };
        let mut log = ErrorLog::default();
        // SAFETY: ErrorLog is a repr(C) block of integers, valid for any bit pattern, and
        // the buffer holds exactly one.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(&mut log as *mut ErrorLog as *mut u8, std::mem::size_of::<ErrorLog>())
        };
        self.copy_to_host(&log_buf, 0, bytes)?;
        if log.abort == 0 && log.count == 0 {
            return Ok(());
        }
        let rearm = self.rearm_tickets();
        self.memset_zero(&log_buf)?;
        let notes = self.notes();
        let n = (log.count as usize).min(log.records.len());
        let waits = log.records[..n].iter().map(|r| notes.describe_timeout(r)).collect();
        let producers = notes.expected_producers(log.records[..n].iter().map(|r| (r.launch_id, r.tensor_id)));
        let limit = notes
            .timeout_of(log.records[..n].iter().map(|r| r.launch_id))
            .unwrap_or_else(|| self.wait_timeout());
        drop(notes);
        let mut headline = format!("{} tile wait(s) timed out (limit {limit:.1?}){producers}", log.count);
        if let Some(note) = rearm {
            headline = format!("{headline} {note}");
        }
        Err(self.failure(headline, waits))
    }

    /// Copies `src` into device memory at `buf + offset` (bytes). Synchronous; callers
    /// synchronise before overwriting memory queued work may use.
    pub(crate) fn copy_to_device(&self, buf: &Buffer, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(buf, offset, src.len())?;
        // SAFETY: the range lies inside the buffer, an allocation of this backend
        // (checked above).
        unsafe { self.inner.backend.write(buf.addr() + offset as u64, src) }.map_err(|f| self.report(f))
    }

    /// Copies device memory at `buf + offset` into `dst`. Synchronous; the caller has
    /// synchronised with the work that writes it.
    pub(crate) fn copy_to_host(&self, buf: &Buffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(buf, offset, dst.len())?;
        // SAFETY: the range lies inside the buffer, an allocation of this backend.
        unsafe { self.inner.backend.read(buf.addr() + offset as u64, dst) }.map_err(|f| self.report(f))
    }

    /// Zeroes a whole buffer. Synchronous.
    pub(crate) fn memset_zero(&self, buf: &Buffer) -> Result<()> {
        self.copy_to_device(buf, 0, &vec![0u8; buf.len()])
    }
}

impl Device {
    /// Checks that `len` bytes at `offset` lie inside `buf`, memory of this device.
    fn check_range(&self, buf: &Buffer, offset: usize, len: usize) -> Result<()> {
        if !buf.is_of(&self.inner.backend) {
            return Err(Error::Internal(format!("a copy to or from {buf:?} of another device")));
        }
        if offset.checked_add(len).is_none_or(|end| end > buf.len()) {
            return Err(Error::Internal(format!(
                "copy of {len} bytes at offset {offset} overruns a {}-byte buffer",
                buf.len()
            )));
        }
        Ok(())
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.name())
    }
}
