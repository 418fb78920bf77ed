//! Entry points from device primitives (host build) into the running virtual GPU.
//!
//! Each function acts on the *calling* GPU thread, i.e. the coroutine the virtual GPU is
//! currently running. Calling one outside a kernel running on the CPU backend panics with
//! a message that says so.

use crate::Dim3;
use crate::sync::WaitSite;

/// `%tid` of the calling thread.
pub fn thread_idx() -> Dim3 {
    unimplemented!("cpu backend hook thread_idx")
}

/// `%ctaid` of the calling thread's CTA.
pub fn block_idx() -> Dim3 {
    unimplemented!("cpu backend hook block_idx")
}

/// `%ntid`: the block size of the running kernel.
pub fn block_dim() -> Dim3 {
    unimplemented!("cpu backend hook block_dim")
}

/// `%nctaid`: the grid size of the running kernel.
pub fn grid_dim() -> Dim3 {
    unimplemented!("cpu backend hook grid_dim")
}

/// `bar.sync id[, threads]`: waits until `threads` threads of the CTA (all non-exited
/// threads when `None`) have arrived at barrier `id` (0..16).
pub fn barrier(id: u32, threads: Option<u32>) {
    let _ = (id, threads);
    unimplemented!("cpu backend hook barrier")
}

/// What `bar.red` computes over the predicates of all non-exited threads of the CTA,
/// which all wait as at `bar.sync 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierReduce {
    /// Number of threads whose predicate was true (`bar.red.popc`).
    pub count: u32,
    /// All predicates true (`bar.red.and`).
    pub all: bool,
    /// Some predicate true (`bar.red.or`).
    pub any: bool,
}

/// `bar.red.{popc,and,or}` on barrier 0.
pub fn barrier_reduce(pred: bool) -> BarrierReduce {
    let _ = pred;
    unimplemented!("cpu backend hook barrier_reduce")
}

/// The warp-collective building block: every lane named in `mask` (which must include
/// the caller) contributes `value`; once all of them have arrived, each gets the values
/// of all 32 lanes, indexed by lane. Entries of lanes outside `mask` hold the caller's
/// own `value`. `T` is at most 64 bytes. Shuffles, votes, `match`, `ldmatrix` and
/// `mma.sync` are built on this.
pub fn warp_exchange<T: Copy + 'static>(mask: u32, value: T) -> [T; 32] {
    let _ = (mask, value);
    unimplemented!("cpu backend hook warp_exchange")
}

/// Base address and size in bytes of the calling CTA's dynamic shared memory (16-byte
/// aligned; size as given at launch).
pub fn dynamic_shared() -> (*mut u8, usize) {
    unimplemented!("cpu backend hook dynamic_shared")
}

/// The calling CTA's instance of the static shared variable identified by `key` (the
/// address of a per-variable static), allocated zeroed on first use with `size` bytes and
/// `align` alignment.
pub fn static_shared(key: *const u8, size: usize, align: usize) -> *mut u8 {
    let _ = (key, size, align);
    unimplemented!("cpu backend hook static_shared")
}

/// A scheduling point: lets other threads run (used by spins, `nanosleep`, atomic loads).
pub fn yield_now() {
    unimplemented!("cpu backend hook yield_now")
}

/// `%globaltimer`: nanoseconds of the virtual GPU's clock.
pub fn global_timer_ns() -> u64 {
    unimplemented!("cpu backend hook global_timer_ns")
}

/// `%clock64`: a per-SM cycle counter of the virtual GPU.
pub fn clock64() -> u64 {
    unimplemented!("cpu backend hook clock64")
}

/// Blocks the calling thread until the semaphore reaches its target, i.e.
/// `(*site.sem).wrapping_sub(site.target) as i32 >= 0`. Returns `true` then, and `false`
/// when the virtual GPU gives the wait up (a deadlock was detected and is being reported).
/// While blocked, the thread is reported in a [`super::DeadlockReport`] with its site.
pub fn wait_until(site: &WaitSite) -> bool {
    let _ = site;
    unimplemented!("cpu backend hook wait_until")
}

/// `trap`: aborts the running kernel with `message`, reported as a kernel failure.
pub fn trap(message: &str) -> ! {
    panic!("kernel trap: {message}")
}
