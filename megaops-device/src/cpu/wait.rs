//! Semaphore waits: threads blocked in `wait_until` until their semaphore reaches its
//! target. The scheduler re-checks them at every scheduling point (between rounds), so a
//! blocked thread costs one load per round and no coroutine switch.

use std::sync::atomic::{AtomicI32, Ordering};

use crate::sync::WaitSite;

/// Current value of the site's semaphore (an acquire load, as `ld.acquire.gpu`).
pub(crate) fn semaphore_value(site: &WaitSite) -> i32 {
    // SAFETY: `wait_until`'s caller promises that `site.sem` is a valid, aligned `i32`
    // (a device semaphore, host memory on this backend) for as long as the site is
    // waited on or reported; it is only ever accessed atomically or by its owner.
    unsafe { AtomicI32::from_ptr(site.sem as *mut i32) }.load(Ordering::Acquire)
}

/// Whether `value` has reached `target` (serial-number comparison, as the GPU wait).
pub(crate) fn reached(value: i32, target: i32) -> bool {
    value.wrapping_sub(target) >= 0
}

/// Whether the site's semaphore has reached its target.
pub(crate) fn site_reached(site: &WaitSite) -> bool {
    reached(semaphore_value(site), site.target)
}

/// Threads blocked on semaphores, with their sites.
pub(crate) struct Waiters<T> {
    list: Vec<(T, WaitSite)>,
}

impl<T: Copy> Waiters<T> {
    pub(crate) fn new() -> Self {
        Waiters { list: Vec::new() }
    }

    pub(crate) fn push(&mut self, who: T, site: WaitSite) {
        self.list.push((who, site));
    }

    /// Removes the waiters whose semaphore reached its target, passing each to `wake`.
    pub(crate) fn wake_ready(&mut self, mut wake: impl FnMut(T)) {
        self.list.retain(|(who, site)| {
            if site_reached(site) {
                wake(*who);
                false
            } else {
                true
            }
        });
    }

    pub(crate) fn clear(&mut self) {
        self.list.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(sem: &AtomicI32, target: i32) -> WaitSite {
        WaitSite {
            sem: sem.as_ptr(),
            target,
            launch_id: 1,
            tile: 0,
            tensor_id: 2,
            sem_index: 0,
        }
    }

    #[test]
    fn serial_number_comparison() {
        assert!(reached(5, 5));
        assert!(!reached(4, 5));
        assert!(reached(i32::MIN, i32::MAX), "wrapped past the target");
        assert!(!reached(i32::MAX, i32::MIN));
    }

    #[test]
    fn wakes_only_reached_sites() {
        let a = AtomicI32::new(0);
        let b = AtomicI32::new(0);
        let mut w = Waiters::new();
        w.push(1u32, site(&a, 1));
        w.push(2u32, site(&b, 1));
        a.store(1, Ordering::Release);
        let mut woken = Vec::new();
        w.wake_ready(|t| woken.push(t));
        assert_eq!(woken, vec![1]);
        b.store(7, Ordering::Release);
        w.wake_ready(|t| woken.push(t));
        assert_eq!(woken, vec![1, 2]);
    }
}
