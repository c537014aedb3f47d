//! Memory freed after a burst of requests given back to the system. A view of a big Application
//! is built in megabytes that are freed once it is answered; glibc keeps what was freed inside
//! its heaps for the next allocation, so the process's RSS stays at the high-water mark of its
//! busiest moment. Measured after the big-applications bench (release build, two arenas,
//! `gdb -p PID -batch -ex 'call (void)malloc_stats()' -ex 'call (int)malloc_trim(0)'`): 43.5 MiB
//! in use, 63.4 MiB held by malloc, 83.9 MiB RSS; `malloc_trim(0)` took RSS to 68.4 MiB.
//!
//! A thread trims once the requests pause for [`QUIET`]: never while a burst goes on (pages given
//! back would be faulted in again by the next answer), at most once per [`QUIET`] under steady
//! polling.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Requests paused this long and the memory they freed is given back.
pub(crate) const QUIET: Duration = Duration::from_secs(1);

/// A request was answered since the trimming thread last looked.
static WORKED: AtomicBool = AtomicBool::new(false);

/// Marks that a request was answered: memory it freed is given back after the next pause.
pub(crate) fn worked() {
    WORKED.store(true, Ordering::Relaxed);
}

/// What the thread does at one look, every [`QUIET`]: `worked` since the last look, and whether
/// a trim is owed (work seen before, no trim since). Returns whether to trim now and whether one
/// is still owed. A pure rule, so that the timing is tested without a clock.
pub(crate) fn look(worked: bool, owed: bool) -> (bool, bool) {
    match (worked, owed) {
        // Still busy: wait for the pause.
        (true, _) => (false, true),
        // A pause after work: now.
        (false, true) => (true, false),
        (false, false) => (false, false),
    }
}

/// Starts the trimming thread (once; `wavegate serve` only). Where malloc is not glibc's, it
/// does nothing.
pub fn start_trimming() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static STARTED: std::sync::Once = std::sync::Once::new();
        STARTED.call_once(|| {
            let spawned = std::thread::Builder::new()
                .name("malloc-trim".into())
                .spawn(|| {
                    let mut owed = false;
                    loop {
                        std::thread::sleep(QUIET);
                        let trim;
                        (trim, owed) = look(WORKED.swap(false, Ordering::Relaxed), owed);
                        if trim {
                            // SAFETY: malloc_trim only returns free pages of malloc's own heaps
                            // to the kernel; it takes each arena's lock like malloc does.
                            unsafe {
                                libc::malloc_trim(0);
                            }
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the malloc-trim thread; freed memory stays with malloc");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of requests is trimmed after it, once: not during it, not again while idle.
    #[test]
    fn a_burst_is_trimmed_once_after_it_pauses() {
        let looks = [true, true, true, false, false, false, true, false];
        let mut owed = false;
        let mut trims = Vec::new();
        for worked in looks {
            let trim;
            (trim, owed) = look(worked, owed);
            trims.push(trim);
        }
        assert_eq!(
            trims,
            [false, false, false, true, false, false, false, true]
        );
    }
}
