//! NVTX ranges for Nsight Systems and Nsight Compute: one per kernel launch (named by
//! the PTX entry it runs, which says operator and config) and whatever ranges the caller
//! opens (the model engine opens one per layer). On only when enabled ([`set_enabled`],
//! or `MEGAOPS_NVTX=1` in the environment) and a profiler is attached; otherwise every
//! call is a test of one flag. Ranges opened while a CUDA graph is captured cover the
//! captured launches (`nsys --cuda-graph-trace=node` shows them at each replay).
//!
//! This is a client of the NVTX v3 injection protocol, the one NVIDIA's header-only
//! NVTX library speaks (CUDA 13 ships no `libnvToolsExt`): a profiler that records NVTX
//! sets `NVTX_INJECTION64_PATH` to its injection library; the client loads it and calls
//! its `InitializeInjectionNvtx2` with a function that hands out the client's export
//! tables; the tool then writes its implementations into the function-pointer slots of
//! the modules it supports. Ranges use the core module's `RangePushA` / `RangePop`.

use std::ffi::{CString, c_char, c_int, c_uint, c_void};
use std::ptr::null_mut;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

/// 0: not decided yet, 1: off, 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Whether a profiler's NVTX injection library is attached (loaded and initialised once,
/// from `NVTX_INJECTION64_PATH`) and records ranges.
pub fn available() -> bool {
    *TOOL.get_or_init(|| load_from_env().is_some_and(attach))
}

/// Turns the ranges on or off for the whole process; on only takes effect if
/// [`available`]. Returns whether ranges are now recorded.
pub fn set_enabled(on: bool) -> bool {
    let on = on && available();
    STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    on
}

/// Whether ranges are recorded: [`set_enabled`]'s last choice, else `MEGAOPS_NVTX=1` in
/// the environment (and a profiler attached).
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        0 => set_enabled(std::env::var("MEGAOPS_NVTX").is_ok_and(|v| v == "1")),
        s => s == 2,
    }
}

/// An open NVTX range; it ends when dropped. Inert when ranges are off.
#[must_use = "the range ends when this value is dropped"]
#[derive(Debug)]
pub struct Range {
    open: bool,
}

/// Opens a range named `name()` if ranges are on (the name is only built then).
pub fn range<S: AsRef<str>>(name: impl FnOnce() -> S) -> Range {
    if !enabled() {
        return Range { open: false };
    }
    // NVTX messages are C strings: an interior NUL would end them early.
    let Ok(text) = CString::new(name().as_ref().replace('\0', " ")) else {
        return Range { open: false };
    };
    let push = CORE[CORE_RANGE_PUSH_A].load(Ordering::Acquire);
    if push.is_null() {
        return Range { open: false };
    }
    // SAFETY: a non-null core slot holds the tool's `nvtxRangePushA` implementation
    // (`int (const char*)`, see `attach`); `text` outlives the call.
    unsafe {
        let push = std::mem::transmute::<*mut c_void, RangePushA>(push);
        push(text.as_ptr());
    }
    Range { open: true }
}

impl Drop for Range {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let pop = CORE[CORE_RANGE_POP].load(Ordering::Acquire);
        if !pop.is_null() {
            // SAFETY: a non-null core slot holds the tool's `nvtxRangePop` (`int (void)`).
            unsafe {
                let pop = std::mem::transmute::<*mut c_void, RangePop>(pop);
                pop();
            }
        }
    }
}

// ---- The injection protocol (layouts of NVTX v3's `nvtxTypes.h`) ----

/// `NvtxGetExportTableFunc_t`: export table by id.
type GetExportTable = unsafe extern "C" fn(table_id: u32) -> *const c_void;
/// `NvtxInitializeInjectionNvtxFunc_t`: the tool's entry point; non-zero on success.
type InitializeInjection = unsafe extern "C" fn(get_export_table: GetExportTable) -> c_int;
/// `nvtxRangePushA`.
type RangePushA = unsafe extern "C" fn(message: *const c_char) -> c_int;
/// `nvtxRangePop`.
type RangePop = unsafe extern "C" fn() -> c_int;
/// `GetModuleFunctionTable(module, &table, &size)`: the slots of a callback module.
type GetModuleFunctionTable =
    unsafe extern "C" fn(module: u32, out_table: *mut *const SlotRef, out_size: *mut c_uint) -> c_int;

/// The NVTX API version this client speaks (`NVTX_VERSION`).
const NVTX_VERSION: u32 = 3;
/// `NVTX_ETID_CALLBACKS` and `NVTX_ETID_VERSIONINFO`.
const ETID_CALLBACKS: u32 = 1;
const ETID_VERSIONINFO: u32 = 3;
/// Core-module callback ids (`NvtxCallbackIdCore`).
const CORE_RANGE_PUSH_A: usize = 9;
const CORE_RANGE_POP: usize = 11;

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct CallbacksTable {
    struct_size: usize,
    get_module_function_table: GetModuleFunctionTable,
}

/// `NvtxExportTableVersionInfo`.
#[repr(C)]
struct VersionInfoTable {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: unsafe extern "C" fn(version: u32),
}

static CALLBACKS: CallbacksTable = CallbacksTable {
    struct_size: size_of::<CallbacksTable>(),
    get_module_function_table,
};

static VERSION_INFO: VersionInfoTable = VersionInfoTable {
    struct_size: size_of::<VersionInfoTable>(),
    version: NVTX_VERSION,
    reserved0: 0,
    set_injection_nvtx_version,
};

/// One function-pointer slot a tool may fill (`NvtxFunctionPointer`; same layout).
type Slot = AtomicPtr<c_void>;

/// The slots of each callback module, indexed by callback id (`*_SIZE` entries; id 0 is
/// never used): core, CUDA driver, OpenCL, CUDA runtime, core 2 (domains), sync. Only the
/// core module's range calls are ever called; the others exist so that a tool which
/// attaches to every module finds them.
static CORE: [Slot; 16] = [const { AtomicPtr::new(null_mut()) }; 16];
static CUDA: [Slot; 9] = [const { AtomicPtr::new(null_mut()) }; 9];
static OPENCL: [Slot; 15] = [const { AtomicPtr::new(null_mut()) }; 15];
static CUDART: [Slot; 7] = [const { AtomicPtr::new(null_mut()) }; 7];
static CORE2: [Slot; 16] = [const { AtomicPtr::new(null_mut()) }; 16];
static SYNC: [Slot; 7] = [const { AtomicPtr::new(null_mut()) }; 7];

/// The slots of `NvtxCallbackModule` `module` (1 to 6).
fn module_slots(module: u32) -> Option<&'static [Slot]> {
    Some(match module {
        1 => &CORE,
        2 => &CUDA,
        3 => &OPENCL,
        4 => &CUDART,
        5 => &CORE2,
        6 => &SYNC,
        _ => return None,
    })
}

/// A pointer to a slot, as the tables hand them out (`NvtxFunctionPointer*`).
#[repr(transparent)]
struct SlotRef(*const Slot);

// SAFETY: a `SlotRef` points into one of the static slot arrays above, which live for the
// whole process and are only accessed atomically (by us) or by the tool during `attach`.
unsafe impl Sync for SlotRef {}
unsafe impl Send for SlotRef {}

/// Per module the table of slot pointers a tool receives: null, a pointer to each slot
/// from id 1 to `size - 1`, and a null past the end (as NVTX's own tables end).
fn module_table(module: u32) -> Option<&'static [SlotRef]> {
    static TABLES: OnceLock<Vec<Vec<SlotRef>>> = OnceLock::new();
    let tables = TABLES.get_or_init(|| {
        (1..=6)
            .map(|m| {
                let slots = module_slots(m).unwrap_or(&[]);
                let mut t: Vec<SlotRef> = Vec::with_capacity(slots.len() + 1);
                t.push(SlotRef(std::ptr::null()));
                t.extend(slots.iter().skip(1).map(|s| SlotRef(s as *const Slot)));
                t.push(SlotRef(std::ptr::null()));
                t
            })
            .collect()
    });
    tables.get(module.checked_sub(1)? as usize).map(Vec::as_slice)
}

/// `GetModuleFunctionTable`: the table of `module` and its size (the number of callback
/// ids, including the unused id 0); 0 for a module this client does not know.
unsafe extern "C" fn get_module_function_table(
    module: u32,
    out_table: *mut *const SlotRef,
    out_size: *mut c_uint,
) -> c_int {
    let (Some(slots), Some(table)) = (module_slots(module), module_table(module)) else {
        return 0;
    };
    // SAFETY: the tool passes null or valid places for the results.
    unsafe {
        if !out_size.is_null() {
            *out_size = slots.len() as c_uint;
        }
        if !out_table.is_null() {
            *out_table = table.as_ptr();
        }
    }
    1
}

/// `SetInjectionNvtxVersion`: reserved by NVTX, ignored.
unsafe extern "C" fn set_injection_nvtx_version(_version: u32) {}

/// `nvtxGetExportTable`: the callbacks and version-info tables.
unsafe extern "C" fn get_export_table(table_id: u32) -> *const c_void {
    match table_id {
        ETID_CALLBACKS => (&raw const CALLBACKS).cast(),
        ETID_VERSIONINFO => (&raw const VERSION_INFO).cast(),
        _ => std::ptr::null(),
    }
}

/// Whether a tool is attached (decided once per process).
static TOOL: OnceLock<bool> = OnceLock::new();

/// The injection library named by `NVTX_INJECTION64_PATH`, loaded and kept for the rest
/// of the process, and its entry point; `None` without the variable or when the library
/// or its entry point is missing.
fn load_from_env() -> Option<InitializeInjection> {
    let path = std::env::var_os("NVTX_INJECTION64_PATH")?;
    // SAFETY: loading the profiler's injection library runs its initialisers; a library
    // named by this variable is meant to be loaded into the process (NVTX does the same).
    let lib = unsafe { libloading::Library::new(&path) }.ok()?;
    // SAFETY: `InitializeInjectionNvtx2` has the `NvtxInitializeInjectionNvtxFunc_t` type.
    let init = unsafe { lib.get::<InitializeInjection>(b"InitializeInjectionNvtx2\0") }.ok()?;
    let init = *init;
    // The tool's functions stay in use for the rest of the process.
    std::mem::forget(lib);
    Some(init)
}

/// Runs a tool's entry point against this client's export tables; true if it succeeded
/// and filled in both range slots.
fn attach(init: InitializeInjection) -> bool {
    // SAFETY: `init` is a tool's `InitializeInjectionNvtx2`; it may write function
    // pointers of the documented types into the slots `get_module_function_table` hands
    // out, which live for the whole process.
    let ok = unsafe { init(get_export_table) } != 0;
    ok && !CORE[CORE_RANGE_PUSH_A].load(Ordering::Acquire).is_null()
        && !CORE[CORE_RANGE_POP].load(Ordering::Acquire).is_null()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// What the fake tool saw, in order.
    static EVENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

    unsafe extern "C" fn fake_push(message: *const c_char) -> c_int {
        // SAFETY: the client passes a NUL-terminated message.
        let text = unsafe { std::ffi::CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned();
        EVENTS.lock().unwrap().push(format!("push {text}"));
        0
    }

    unsafe extern "C" fn fake_pop() -> c_int {
        EVENTS.lock().unwrap().push("pop".into());
        0
    }

    /// What an NVTX tool does at `InitializeInjectionNvtx2`: reads the version info,
    /// asks for the core module's table and fills in the range calls.
    unsafe extern "C" fn fake_init(get: GetExportTable) -> c_int {
        // SAFETY: the tables have the documented layouts; the slots are writable.
        unsafe {
            let version = get(ETID_VERSIONINFO) as *const VersionInfoTable;
            assert_eq!((*version).struct_size, 24);
            assert_eq!((*version).version, 3);
            let callbacks = get(ETID_CALLBACKS) as *const CallbacksTable;
            assert_eq!((*callbacks).struct_size, 16);
            assert!(get(2).is_null(), "a reserved table id has no table");
            let (mut table, mut size) = (std::ptr::null(), 0);
            assert_eq!(((*callbacks).get_module_function_table)(7, &mut table, &mut size), 0);
            for (module, want) in [(1, 16), (2, 9), (3, 15), (4, 7), (5, 16), (6, 7)] {
                assert_eq!(
                    ((*callbacks).get_module_function_table)(module, &mut table, &mut size),
                    1
                );
                assert_eq!(size, want, "module {module}");
                assert!((*table).0.is_null() && (*table.add(size as usize)).0.is_null());
            }
            ((*callbacks).get_module_function_table)(1, &mut table, &mut size);
            let slot = |id: usize| (*table.add(id)).0 as *mut *mut c_void;
            *slot(CORE_RANGE_PUSH_A) = fake_push as *mut c_void;
            *slot(CORE_RANGE_POP) = fake_pop as *mut c_void;
        }
        1
    }

    /// Without a tool, ranges stay off whatever is asked; once a tool attached through
    /// the protocol, they follow the switch and reach the tool as nested push/pop calls;
    /// an off range never builds its name.
    #[test]
    fn ranges_reach_an_attached_tool_and_follow_the_switch() {
        if std::env::var_os("NVTX_INJECTION64_PATH").is_some() {
            eprintln!("skipped: a real NVTX tool is attached to this test process");
            return;
        }
        let attached = *TOOL.get_or_init(|| false);
        assert!(!attached && !available());
        assert!(!set_enabled(true) && !enabled());
        drop(range(|| "nothing attached"));

        assert!(attach(fake_init), "the fake tool attaches");
        // `TOOL` stays false (decided before the attach): force the switch for the test.
        STATE.store(2, Ordering::Relaxed);
        {
            let _layer = range(|| "layer 0");
            let _kernel = range(|| String::from("gemv__BN16\0x"));
        }
        assert_eq!(
            *EVENTS.lock().unwrap(),
            ["push layer 0", "push gemv__BN16 x", "pop", "pop"]
        );

        assert!(!set_enabled(false) && !enabled());
        let mut built = false;
        drop(range(|| {
            built = true;
            "never built"
        }));
        assert!(!built, "an off range must not build its name");
        assert_eq!(EVENTS.lock().unwrap().len(), 4);
    }
}
