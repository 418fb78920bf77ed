//! CUDA backend: a cudarc context with event tracking off, a module cache, a caching
//! allocator over plain `cuMemAlloc` memory, and raw kernel launches.

use crate::error::{CudaContext as _, Error, Result};
use crate::module::PtxModule;
use cudarc::driver::{CudaContext, CudaStream, result, sys};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex};

/// Shared memory a block may use without opting in.
const DEFAULT_SMEM_LIMIT: u32 = 48 * 1024;

/// One CUDA device.
pub(crate) struct CudaDevice {
    pub ctx: Arc<CudaContext>,
    pub name: String,
    pub cc: (i32, i32),
    pub sm_count: u32,
    pub smem_per_sm: u32,
    pub smem_per_block_optin: u32,
    pub l2_bytes: u32,
    modules: Mutex<HashMap<usize, Arc<LoadedModule>>>,
    pool: Mutex<Pool>,
}

/// A loaded module. Every function in it is loaded at module-load time (`cuFuncLoad`):
/// with CUDA's lazy loading, the first launch of a kernel may otherwise wait for running
/// kernels — fatal when a producer's first launch waits behind its spinning consumer.
/// That is why modules are loaded here with the driver calls and not with cudarc's
/// `load_module` / `load_function`, which load functions lazily and cannot enumerate them.
struct LoadedModule {
    module: sys::CUmodule,
    arch: &'static str,
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

// SAFETY: CUfunction handles are thread-safe driver handles.
unsafe impl Send for Function {}

/// Freed allocations by rounded size, reused before asking the driver (`cuMemFree`
/// synchronises the device, which would serialise overlapped work).
#[derive(Default)]
struct Pool {
    free: HashMap<usize, Vec<sys::CUdeviceptr>>,
    reserved: usize,
}

/// Rounds an allocation size to the pool's size classes.
pub(crate) fn round_size(bytes: usize) -> usize {
    let bytes = bytes.max(1);
    if bytes <= 1 << 20 {
        bytes.div_ceil(512) * 512
    } else {
        bytes.div_ceil(2 << 20) * (2 << 20)
    }
}

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
            sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            smem_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)? as u32,
            smem_per_block_optin: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
            l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u32,
            ctx,
            modules: Mutex::new(HashMap::new()),
            pool: Mutex::new(Pool::default()),
        })
    }

    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .ctx(|| "binding the CUDA context to this thread".into())
    }

    /// Allocates `bytes` of device memory (plain `cuMemAlloc`, so stream memory
    /// operations work on it), reusing freed blocks of the same size class.
    pub fn alloc(&self, bytes: usize) -> Result<(sys::CUdeviceptr, usize)> {
        let size = round_size(bytes);
        if let Some(ptr) = lock(&self.pool).free.get_mut(&size).and_then(Vec::pop) {
            return Ok((ptr, size));
        }
        self.bind()?;
        // SAFETY: the context is bound; the size is non-zero.
        let ptr = match unsafe { result::malloc_sync(size) } {
            Ok(p) => p,
            Err(_) => {
                // Out of memory: give the cached blocks back and try once more.
                self.trim()?;
                // SAFETY: as above.
                unsafe { result::malloc_sync(size) }.ctx(|| format!("allocating {size} bytes of device memory"))?
            }
        };
        lock(&self.pool).reserved += size;
        Ok((ptr, size))
    }

    /// Returns a block to the pool. The caller guarantees no queued work uses it.
    pub fn release(&self, ptr: sys::CUdeviceptr, size: usize) {
        lock(&self.pool).free.entry(size).or_default().push(ptr);
    }

    /// Frees every cached block.
    pub fn trim(&self) -> Result<()> {
        let blocks: Vec<(usize, Vec<sys::CUdeviceptr>)> = lock(&self.pool).free.drain().collect();
        self.bind()?;
        for (size, ptrs) in blocks {
            for p in ptrs {
                // SAFETY: pooled blocks are unused and were allocated by malloc_sync.
                unsafe { result::free_sync(p) }.ctx(|| "freeing device memory".into())?;
                lock(&self.pool).reserved -= size;
            }
        }
        Ok(())
    }

    /// Bytes currently held by the allocator (in use or cached).
    pub fn reserved_bytes(&self) -> usize {
        lock(&self.pool).reserved
    }

    /// Loads a module now (and all its functions), outside any overlapped run.
    pub fn preload(&self, module: &'static PtxModule) -> Result<()> {
        self.module(module).map(|_| ())
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
                    CString::new(entry).map_err(|_| Error::Invalid(format!("kernel name `{entry}` contains NUL")))?;
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
        let image =
            CString::new(src).map_err(|_| Error::Invalid(format!("the PTX of `{}` contains NUL", module.name)))?;
        self.bind()?;
        let mut m: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: image is a NUL-terminated PTX text; the context is bound.
        unsafe { sys::cuModuleLoadData(&mut m, image.as_ptr() as *const std::ffi::c_void) }
            .result()
            .ctx(|| format!("loading the {arch} PTX of `{}`", module.name))?;
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
            functions: Mutex::new(HashMap::new()),
        });
        lock(&self.modules).insert(module.key(), loaded.clone());
        Ok(loaded)
    }

    /// A new non-blocking stream.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx.new_stream().ctx(|| "creating a stream".into())
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let _ = self.ctx.synchronize();
        let _ = self.trim();
        for m in lock(&self.modules).values() {
            // SAFETY: the device is idle and nothing uses the module any more.
            let _ = unsafe { sys::cuModuleUnload(m.module) };
        }
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the runtime's
/// maps stay consistent across a panic: every update is a single insert/remove).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes() {
        assert_eq!(round_size(0), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(round_size(1 << 20), 1 << 20);
        assert_eq!(round_size((1 << 20) + 1), 2 << 20);
        assert_eq!(round_size(5 << 20), 6 << 20);
    }
}
