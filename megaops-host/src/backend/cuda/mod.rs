//! CUDA backend: a cudarc context with event tracking off, a module cache that loads
//! every function eagerly, the allocator ([`pool`]), streams, events and graphs
//! ([`stream`]) and SM partitions on green contexts ([`partition`]). Every raw driver
//! call of the runtime is in this folder.

mod partition;
mod pool;
mod stream;

use crate::backend::{BackendKind, BackendResult, DeviceBackend, DeviceLimits, StreamBackend};
use crate::error::{CudaContext as _, Error, Result};
use crate::module::PtxModule;
use crate::mutex::lock;
use cudarc::driver::{CudaContext, sys};
use pool::Pool;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex};

/// Shared memory a block may use without opting in.
const DEFAULT_SMEM_LIMIT: u32 = 48 * 1024;

/// One CUDA device.
pub(crate) struct CudaDevice {
    ctx: Arc<CudaContext>,
    name: String,
    cc: (i32, i32),
    limits: DeviceLimits,
    modules: Mutex<HashMap<usize, Arc<LoadedModule>>>,
    pool: Pool,
}

/// A loaded module. Every function in it is loaded at module-load time (`cuFuncLoad`):
/// with CUDA's lazy loading, the first launch of a kernel may otherwise wait for running
/// kernels — fatal when a producer's first launch waits behind its spinning consumer.
/// That is why modules are loaded here with the driver calls and not with cudarc's
/// `load_module` / `load_function`, which load functions lazily and cannot enumerate them.
struct LoadedModule {
    module: sys::CUmodule,
    arch: &'static str,
    /// The module's launches may be programmatic (see
    /// [`CudaDevice::programmatic_launches`]), decided once at load.
    programmatic: bool,
    functions: Mutex<HashMap<&'static str, LoadedFunction>>,
}

// SAFETY: CUmodule/CUfunction handles are thread-safe driver handles; the maps are
// behind a mutex.
unsafe impl Send for LoadedModule {}
unsafe impl Sync for LoadedModule {}

#[derive(Clone, Copy)]
struct LoadedFunction {
    func: sys::CUfunction,
    smem_limit: u32,
}

/// A kernel entry ready to launch.
#[derive(Clone, Copy)]
pub(crate) struct Function(pub sys::CUfunction);

/// `CU_STREAM_LEGACY` of `cuda.h`: the context's legacy default stream, on which the
/// synchronous copies (`cuMemcpyHtoD`) run.
const LEGACY_STREAM: sys::CUstream = 0x1 as sys::CUstream;

// SAFETY: CUfunction handles are thread-safe driver handles.
unsafe impl Send for Function {}

impl CudaDevice {
    /// Opens device `ordinal` (primary context, event tracking off: MegaOps orders work
    /// itself, and cudarc's cross-stream waits would deadlock a consumer spinning on a
    /// producer's semaphore).
    pub fn open(ordinal: usize) -> Result<Self> {
        // SAFETY: checking for the driver library before touching it; cudarc panics
        // otherwise.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::NoDevice(
                "the CUDA driver library (libcuda.so) is not installed".into(),
            ));
        }
        let count = CudaContext::device_count().ctx(|| "counting CUDA devices".into())?;
        if count <= 0 {
            return Err(Error::NoDevice("the CUDA driver reports no device".into()));
        }
        if ordinal >= count as usize {
            return Err(Error::NoDevice(format!("device {ordinal} requested, {count} present")));
        }
        if std::env::var_os("CUDA_MODULE_LOADING").is_none() {
            // SAFETY: set before the driver initialises (it reads the variable once, in
            // cuInit); MegaOps creates devices before launching threads that read the
            // environment. Eager loading keeps module loads out of overlapped runs.
            unsafe { std::env::set_var("CUDA_MODULE_LOADING", "EAGER") };
        }
        let ctx = CudaContext::new(ordinal).ctx(|| format!("creating a context on device {ordinal}"))?;
        // SAFETY: disabling tracking only affects buffers allocated afterwards; MegaOps
        // allocates its own memory and never uses cudarc's tracked slices.
        unsafe { ctx.disable_event_tracking() };
        let attr = |a| ctx.attribute(a).ctx(|| format!("reading device attribute {a:?}"));
        use sys::CUdevice_attribute_enum as A;
        let cc = (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        Ok(CudaDevice {
            name: ctx.name().ctx(|| "reading the device name".into())?,
            cc,
            limits: DeviceLimits {
                sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
                smem_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)? as u32,
                max_smem_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
                l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u32,
            },
            ctx,
            modules: Mutex::new(HashMap::new()),
            pool: Pool::default(),
        })
    }

    /// Whether launches of `module`'s entries may be made programmatically (programmatic
    /// stream serialization): the device is of compute capability 9.0 or later and the
    /// PTX loaded for it is of sm_90 or later, so every macro kernel begins with
    /// `griddepcontrol.wait` (see `megaops_device::griddep`).
    pub fn programmatic_launches(&self, module: &'static PtxModule) -> Result<bool> {
        Ok(self.module(module)?.programmatic)
    }

    /// Binds the context to the calling thread.
    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .ctx(|| "binding the CUDA context to this thread".into())
    }

    /// The CUfunction of `entry` in `module`, loading the module on first use and opting
    /// the function in to `dynamic_smem` bytes of dynamic shared memory when above 48 KiB.
    pub fn function(&self, module: &'static PtxModule, entry: &'static str, dynamic_smem: u32) -> Result<Function> {
        let loaded = self.module(module)?;
        let mut functions = lock(&loaded.functions);
        let lf = match functions.get(entry) {
            Some(f) => *f,
            None => {
                let name =
                    CString::new(entry).map_err(|_| Error::Internal(format!("kernel name `{entry}` contains NUL")))?;
                self.bind()?;
                let mut func: sys::CUfunction = std::ptr::null_mut();
                // SAFETY: module is a live module handle; name is NUL-terminated.
                unsafe { sys::cuModuleGetFunction(&mut func, loaded.module, name.as_ptr()) }
                    .result()
                    .ctx(|| {
                        format!(
                            "looking up kernel `{entry}` in the {} PTX of `{}`",
                            loaded.arch, module.name
                        )
                    })?;
                let lf = LoadedFunction {
                    func,
                    smem_limit: DEFAULT_SMEM_LIMIT,
                };
                functions.insert(entry, lf);
                lf
            }
        };
        if dynamic_smem > lf.smem_limit {
            use sys::CUfunction_attribute_enum as F;
            // SAFETY: a live function handle; the attribute value was checked against
            // the device's opt-in limit by the launch.
            unsafe {
                sys::cuFuncSetAttribute(
                    lf.func,
                    F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    dynamic_smem as i32,
                )
            }
            .result()
            .ctx(|| format!("opting `{entry}` in to {dynamic_smem} bytes of dynamic shared memory"))?;
            functions.insert(
                entry,
                LoadedFunction {
                    func: lf.func,
                    smem_limit: dynamic_smem,
                },
            );
        }
        Ok(Function(lf.func))
    }

    fn module(&self, module: &'static PtxModule) -> Result<Arc<LoadedModule>> {
        if let Some(m) = lock(&self.modules).get(&module.key()) {
            return Ok(m.clone());
        }
        let (arch, src) = module.select(self.cc.0, self.cc.1).ok_or_else(|| {
            let have: Vec<&str> = module.ptx.iter().map(|(a, _)| *a).collect();
            Error::Invalid(format!(
                "`{}` has PTX for {have:?}, none of which runs on {} (sm_{}{}); rebuild with MEGAOPS_ARCHS=sm_{}{}",
                module.name, self.name, self.cc.0, self.cc.1, self.cc.0, self.cc.1
            ))
        })?;
        self.bind()?;
        let m = match module.cubin_for(arch, self.cc.0, self.cc.1).filter(|_| !force_jit()) {
            // A cubin the driver refuses (one from a newer toolkit than the driver, say)
            // falls back to the PTX, saying why: the JIT costs seconds per module.
            Some(cubin) => load_image(cubin).or_else(|e| {
                eprintln!(
                    "megaops: the driver refused the {arch} cubin of `{}` ({e}); compiling its PTX instead",
                    module.name
                );
                load_ptx(module, arch, src)
            })?,
            None => load_ptx(module, arch, src)?,
        };
        // Load every function now (see LoadedModule).
        let mut count: std::ffi::c_uint = 0;
        // SAFETY: m is the module just loaded; the array has `count` slots.
        unsafe {
            sys::cuModuleGetFunctionCount(&mut count, m)
                .result()
                .ctx(|| "counting a module's functions".into())?;
            let mut funcs = vec![std::ptr::null_mut(); count as usize];
            sys::cuModuleEnumerateFunctions(funcs.as_mut_ptr(), count, m)
                .result()
                .ctx(|| "listing a module's functions".into())?;
            for f in funcs {
                sys::cuFuncLoad(f)
                    .result()
                    .ctx(|| format!("loading the functions of `{}`", module.name))?;
            }
        }
        let loaded = Arc::new(LoadedModule {
            module: m,
            arch,
            programmatic: self.cc.0 >= 9 && crate::module::arch_capability(arch).is_some_and(|n| n >= 90),
            functions: Mutex::new(HashMap::new()),
        });
        lock(&self.modules).insert(module.key(), loaded.clone());
        Ok(loaded)
    }
}

/// Whether `MEGAOPS_JIT=1` asks for the PTX (compiled by the driver) even where a cubin
/// was embedded.
fn force_jit() -> bool {
    std::env::var("MEGAOPS_JIT").is_ok_and(|v| v.trim() == "1")
}

/// Loads `module`'s PTX for `arch` (the driver compiles it). The context must be bound.
fn load_ptx(module: &PtxModule, arch: &str, src: &str) -> Result<sys::CUmodule> {
    let image = CString::new(src).map_err(|_| Error::Internal(format!("the PTX of `{}` contains NUL", module.name)))?;
    let mut m: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: image is a NUL-terminated PTX text; the caller bound the context.
    unsafe { sys::cuModuleLoadData(&mut m, image.as_ptr() as *const std::ffi::c_void) }
        .result()
        .ctx(|| format!("loading the {arch} PTX of `{}`", module.name))?;
    Ok(m)
}

/// Loads a cubin (an ELF image), copied first into 8-byte-aligned memory. The context
/// must be bound.
fn load_image(cubin: &[u8]) -> std::result::Result<sys::CUmodule, cudarc::driver::DriverError> {
    let mut aligned = vec![0u64; cubin.len().div_ceil(8)];
    // SAFETY: `aligned` holds at least `cubin.len()` bytes; the two do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(cubin.as_ptr(), aligned.as_mut_ptr() as *mut u8, cubin.len()) };
    let mut m: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `aligned` holds a whole cubin image and outlives the call (the driver copies
    // it); the caller bound the context.
    unsafe { sys::cuModuleLoadData(&mut m, aligned.as_ptr() as *const std::ffi::c_void) }.result()?;
    Ok(m)
}

impl DeviceBackend for CudaDevice {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn limits(&self) -> DeviceLimits {
        self.limits
    }

    fn alloc(&self, bytes: usize) -> Result<(u64, usize)> {
        self.pool.alloc(&self.ctx, bytes, &self.name)
    }

    unsafe fn release(&self, addr: u64, capacity: usize) {
        // SAFETY: the caller's contract is the pool's.
        unsafe { self.pool.release(addr, capacity) }
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<(u64, usize)> {
        self.bind()?;
        let mut ptr: *mut std::ffi::c_void = std::ptr::null_mut();
        let size = bytes.max(1);
        // SAFETY: a valid out-pointer; the context is bound.
        unsafe { sys::cuMemAllocHost_v2(&mut ptr, size) }
            .result()
            .ctx(|| format!("allocating {size} B of page-locked host memory"))?;
        Ok((ptr as u64, size))
    }

    unsafe fn release_pinned(&self, addr: u64, _capacity: usize) {
        let _ = self.bind();
        // SAFETY: from `cuMemAllocHost` above, unused (the caller's contract).
        let _ = unsafe { sys::cuMemFreeHost(addr as *mut std::ffi::c_void) };
    }

    fn reserved_bytes(&self) -> usize {
        self.pool.reserved_bytes()
    }

    unsafe fn write(&self, dst: u64, src: &[u8]) -> BackendResult<()> {
        self.bind()?;
        // SAFETY: the range lies inside a live allocation (the caller's contract).
        unsafe { cudarc::driver::result::memcpy_htod_sync(dst, src) }
            .ctx(|| format!("copying {} bytes to the device", src.len()))?;
        // `cuMemcpyHtoD` from pageable memory returns once the bytes are staged, while the
        // DMA into device memory may still run on the legacy stream, and the streams that
        // launches use are non-blocking (they do not wait for it). Waiting for the legacy
        // stream (not the whole context, where kernels of other streams may be running)
        // makes the copy complete before any later launch reads or writes the range.
        // SAFETY: `CU_STREAM_LEGACY` is a stream handle of every context.
        unsafe { cudarc::driver::result::stream::synchronize(LEGACY_STREAM) }
            .ctx(|| format!("completing a copy of {} bytes to the device", src.len()))?;
        Ok(())
    }

    unsafe fn read(&self, src: u64, dst: &mut [u8]) -> BackendResult<()> {
        self.bind()?;
        // SAFETY: the range lies inside a live allocation (the caller's contract).
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(dst, src) }
            .ctx(|| format!("copying {} bytes from the device", dst.len()))?;
        Ok(())
    }

    fn synchronize(&self) -> BackendResult<()> {
        self.ctx.synchronize().ctx(|| "synchronising the device".into())?;
        Ok(())
    }

    fn preload(&self, module: &'static PtxModule) -> Result<()> {
        self.module(module).map(|_| ())
    }

    fn new_stream(self: Arc<Self>) -> Result<Box<dyn StreamBackend>> {
        let stream = self.ctx.new_stream().ctx(|| "creating a stream".into())?;
        Ok(Box::new(stream::CudaStreamBackend::new(self, stream, None)))
    }

    fn new_priority_stream(self: Arc<Self>) -> Result<Box<dyn StreamBackend>> {
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: two valid out-pointers.
        unsafe { sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) }
            .result()
            .ctx(|| "reading the stream priority range".into())?;
        let stream = self
            .ctx
            .new_stream_with_priority(greatest)
            .ctx(|| "creating a priority stream".into())?;
        Ok(Box::new(stream::CudaStreamBackend::new(self, stream, None)))
    }

    fn partition_stream(self: Arc<Self>, sms: u32) -> Result<(Box<dyn StreamBackend>, u32)> {
        partition::green_stream(self, sms)
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let _ = self.ctx.synchronize();
        let _ = self.pool.trim(&self.ctx);
        for m in lock(&self.modules).values() {
            // SAFETY: the device is idle and nothing uses the module any more.
            let _ = unsafe { sys::cuModuleUnload(m.module) };
        }
    }
}
