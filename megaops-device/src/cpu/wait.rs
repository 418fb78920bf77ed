//! Semaphore waits: threads blocked in `wait_until_deadline` until their semaphore
//! reaches its target, the virtual clock their deadline, or their error log's abort flag
//! is raised. The scheduler re-checks them at every scheduling point (between rounds), so
//! a blocked thread costs one load per round and no coroutine switch.

use std::sync::atomic::{AtomicI32, Ordering};

use super::hooks::WaitEnd;
use crate::sync::{ErrorLog, WaitSite};

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

/// Whether the abort flag of `log` (null: none) is raised.
fn aborted(log: *const ErrorLog) -> bool {
    if log.is_null() {
        return false;
    }
    // SAFETY: a non-null error log of a waiting thread is the device's log, alive for as
    // long as launches that use it run (the caller of `wait_until_deadline` promises it);
    // its flag is only accessed atomically.
    unsafe { AtomicI32::from_ptr(&raw const (*log).abort as *mut i32) }.load(Ordering::Acquire) != 0
}

/// One blocked thread.
struct Waiter<T> {
    who: T,
    site: WaitSite,
    /// Virtual time at which the wait times out (`u64::MAX`: never).
    deadline: u64,
    errors: *const ErrorLog,
}

/// Threads blocked on semaphores, with their sites.
pub(crate) struct Waiters<T> {
    list: Vec<Waiter<T>>,
}

impl<T: Copy> Waiters<T> {
    pub(crate) fn new() -> Self {
        Waiters { list: Vec::new() }
    }

    pub(crate) fn push(&mut self, who: T, site: WaitSite, deadline: u64, errors: *const ErrorLog) {
        self.list.push(Waiter {
            who,
            site,
            deadline,
            errors,
        });
    }

    /// Removes the waiters whose wait ended at virtual time `now`, passing each to `wake`
    /// with how it ended: the semaphore reached its target; the error log's abort flag is
    /// raised (another wait failed); or the deadline passed. Of the waits of one error log
    /// that time out together, the first times out and the others abort, as on the GPU,
    /// where the first timeout raises the flag every other waiter polls.
    pub(crate) fn wake_ready(&mut self, now: u64, mut wake: impl FnMut(T, WaitEnd)) {
        let mut failing: Vec<*const ErrorLog> = Vec::new();
        self.list.retain(|w| {
            let end = if site_reached(&w.site) {
                WaitEnd::Reached
            } else if !w.errors.is_null() && (failing.contains(&w.errors) || aborted(w.errors)) {
                WaitEnd::Aborted
            } else if now >= w.deadline {
                failing.push(w.errors);
                WaitEnd::TimedOut {
                    value: semaphore_value(&w.site),
                    now,
                }
            } else {
                return true;
            };
            wake(w.who, end);
            false
        });
    }

    /// The earliest deadline of a blocked wait, if any has one.
    pub(crate) fn earliest_deadline(&self) -> Option<u64> {
        self.list.iter().map(|w| w.deadline).filter(|&d| d != u64::MAX).min()
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
        w.push(1u32, site(&a, 1), u64::MAX, std::ptr::null());
        w.push(2u32, site(&b, 1), u64::MAX, std::ptr::null());
        a.store(1, Ordering::Release);
        let mut woken = Vec::new();
        w.wake_ready(0, |t, e| woken.push((t, e)));
        assert_eq!(woken, vec![(1, WaitEnd::Reached)]);
        b.store(7, Ordering::Release);
        w.wake_ready(0, |t, e| woken.push((t, e)));
        assert_eq!(woken, vec![(1, WaitEnd::Reached), (2, WaitEnd::Reached)]);
    }

    #[test]
    fn deadlines_time_out_once_per_log_and_the_rest_abort() {
        let (a, b, c) = (AtomicI32::new(0), AtomicI32::new(0), AtomicI32::new(0));
        let mut log = ErrorLog::default();
        let log_ptr: *const ErrorLog = &raw const log;
        let mut w = Waiters::new();
        w.push(1u32, site(&a, 1), 100, log_ptr);
        w.push(2u32, site(&b, 1), 100, log_ptr);
        w.push(3u32, site(&c, 1), 500, log_ptr);
        w.push(4u32, site(&c, 1), 90, std::ptr::null());
        assert_eq!(w.earliest_deadline(), Some(90));
        let mut woken = Vec::new();
        w.wake_ready(50, |t, e| woken.push((t, e)));
        assert!(woken.is_empty());
        w.wake_ready(100, |t, e| woken.push((t, e)));
        assert_eq!(
            woken,
            vec![
                (1, WaitEnd::TimedOut { value: 0, now: 100 }),
                (2, WaitEnd::Aborted),
                (3, WaitEnd::Aborted),
                (4, WaitEnd::TimedOut { value: 0, now: 100 }),
            ]
        );
        // A raised flag aborts the waits of its log.
        log.abort = 1;
        w.push(5u32, site(&a, 1), u64::MAX, &raw const log);
        woken.clear();
        w.wake_ready(0, |t, e| woken.push((t, e)));
        assert_eq!(woken, vec![(5, WaitEnd::Aborted)]);
        assert_eq!(w.earliest_deadline(), None);
    }
}
