//! [`lock`]: the one way the runtime takes its mutexes.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the runtime's
/// maps stay consistent across a panic: every update is a single insert/remove).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
