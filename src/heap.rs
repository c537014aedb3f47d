//! Memory freed after a burst of requests given back to the system. A view of a big Application
//! is built in megabytes that are freed once it is answered; glibc keeps what was freed inside
//! its heaps for the next allocation, so the process's RSS stays at the high-water mark of its
//! busiest moment. Measured after the big-applications bench (release build, two arenas,
//! `gdb -p PID -batch -ex 'call (void)malloc_stats()' -ex 'call (int)malloc_trim(0)'`): 43.5 MiB
//! in use, 63.4 MiB held by malloc, 83.9 MiB RSS; `malloc_trim(0)` took RSS to 68.4 MiB.
//!
//! A thread trims once the requests pause for [`QUIET`], and only when the memory resident but
//! not in use by malloc has grown by [`GROWN`] since the last trim. Never while a burst goes on
//! (pages given back would be faulted in again by the next answer); and not after each poll of
//! an open Waves tab (every 5 s): trimming at every pause after work had each such poll fault
//! in again what the trim before it gave back. What a poll frees is taken again by the next;
//! what a burst of views freed (old answers, rows replaced) is not, and is worth giving back.
//!
//! Resident, not free: malloc's count of free bytes (`mallinfo2().fordblks`) keeps counting
//! what `malloc_trim` gave back (the chunks stay on its free lists, their pages returned), so
//! it does not fall after a trim, nor rise when those pages are faulted in again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Requests paused this long and the memory they freed may be given back.
pub(crate) const QUIET: Duration = Duration::from_secs(1);

/// Memory resident but not in use must have grown this much since the last trim for a pause
/// to trim again. A poll that finds its answer kept frees a few kilobytes (the answer is sent
/// from the kept bytes, not copied); a view built again after a change frees its old answer
/// and rows, a megabyte or more for a big Application: given back, as before. Measured with a
/// threshold of 4 MiB instead (a change and a poll every 5 s, 20 cycles): hardly a trim, and
/// RSS crept from 65.0 to 75.6 MiB where trimming at every pause ended at 70.0–72.1 MiB.
pub(crate) const GROWN: usize = 1 << 20;

/// A request was answered since the trimming thread last looked.
static WORKED: AtomicBool = AtomicBool::new(false);

/// Marks that a request was answered: memory it freed is given back after the next pause.
pub(crate) fn worked() {
    WORKED.store(true, Ordering::Relaxed);
}

/// What the trimming thread knows between two looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Trimming {
    /// Work was seen since the last pause looked at.
    pub owed: bool,
    /// Bytes resident but not in use right after the last trim (0 before any).
    pub floor: usize,
}

/// What the thread does at one look, every [`QUIET`]: `worked` since the last look, and
/// `free()` the bytes resident but not in use now (asked only at a pause after work: it walks
/// malloc's free lists). Returns whether to trim now and what to remember; after a trim the
/// caller sets `floor` to what is free then. A pure rule, so that the timing is tested without
/// a clock or an allocator.
pub(crate) fn look(worked: bool, was: Trimming, free: impl FnOnce() -> usize) -> (bool, Trimming) {
    if worked {
        // Still busy: wait for the pause.
        return (false, Trimming { owed: true, ..was });
    }
    if !was.owed {
        return (false, was);
    }
    // A pause after work: give back what grew since the last trim, if it is much.
    let free = free();
    let settled = Trimming {
        owed: false,
        // Less free than after the last trim: what is free now is the new floor.
        floor: was.floor.min(free),
    };
    (free >= was.floor.saturating_add(GROWN), settled)
}

/// glibc's `mallinfo2` (2.33 and later), looked up when the process runs: linked by name, the
/// binary would not start on an older glibc (Debian 11, Ubuntu 20.04, RHEL 8), `wavegate lint`
/// included, for a statistic only the trimming thread reads.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn mallinfo2() -> Option<libc::mallinfo2> {
    type Mallinfo2 = unsafe extern "C" fn() -> libc::mallinfo2;
    static FOUND: std::sync::OnceLock<Option<Mallinfo2>> = std::sync::OnceLock::new();
    let found = FOUND.get_or_init(|| {
        // SAFETY: dlsym with glibc's RTLD_DEFAULT (a null handle) looks a name up in the
        // process's libraries; the name is NUL-terminated.
        let symbol = unsafe { libc::dlsym(std::ptr::null_mut(), c"mallinfo2".as_ptr()) };
        // SAFETY: the symbol glibc exports under that name is that function.
        (!symbol.is_null())
            .then(|| unsafe { std::mem::transmute::<*mut libc::c_void, Mallinfo2>(symbol) })
    });
    // SAFETY: mallinfo2 only reads malloc's statistics, taking each arena's lock.
    found.map(|f| unsafe { f() })
}

/// Bytes resident in the process's anonymous memory but not in use by malloc: what a trim could
/// give back, and a little more that no trim can (thread stacks, pieces of pages).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn free_bytes() -> usize {
    // Without it: as much as may be free, so that a pause after work still trims (as before).
    let Some(info) = mallinfo2() else {
        return usize::MAX;
    };
    let in_use = info.uordblks + info.hblkhd;
    // statm: pages resident, then those of them shared (file-backed): the rest is anonymous.
    let anonymous = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| {
            let mut pages = statm.split_whitespace().skip(1).map(str::parse::<usize>);
            let (Some(Ok(resident)), Some(Ok(shared))) = (pages.next(), pages.next()) else {
                return None;
            };
            // SAFETY: sysconf only reads a constant of the system.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
            Some(resident.saturating_sub(shared) * page)
        });
    // Unreadable: as much as may be free, so that a pause after work still trims.
    anonymous.map_or(usize::MAX, |a| a.saturating_sub(in_use))
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
                    let mut was = Trimming::default();
                    loop {
                        std::thread::sleep(QUIET);
                        let trim;
                        (trim, was) = look(WORKED.swap(false, Ordering::Relaxed), was, free_bytes);
                        if trim {
                            // SAFETY: malloc_trim only returns free pages of malloc's own heaps
                            // to the kernel; it takes each arena's lock like malloc does.
                            unsafe {
                                libc::malloc_trim(0);
                            }
                            // What stays resident once trimmed (pieces smaller than a page,
                            // stacks) is the floor growth is counted from.
                            was.floor = free_bytes();
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

    /// Looked up at run time, mallinfo2 is found where glibc has it (2.33 and later, as on the
    /// machines the tests run on) and reads malloc's statistics.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn mallinfo2_is_found_at_run_time() {
        let kept = vec![0u8; 1 << 20];
        let info = mallinfo2().expect("glibc 2.33 or later exports mallinfo2");
        assert!(
            info.uordblks + info.hblkhd >= kept.len(),
            "{}",
            info.uordblks
        );
        assert!(free_bytes() < usize::MAX);
    }

    const MIB: usize = 1 << 20;

    /// Runs `looks` (worked, free at that look) through the rule, trimming to `after` bytes
    /// free when it says so; the looks that trimmed.
    fn trims(looks: &[(bool, usize)], after: usize) -> Vec<bool> {
        let mut was = Trimming::default();
        looks
            .iter()
            .map(|&(worked, free)| {
                let trim;
                (trim, was) = look(worked, was, || free);
                if trim {
                    was.floor = after;
                }
                trim
            })
            .collect()
    }

    /// A burst that freed much is trimmed after it, once: not during it, not again while idle.
    #[test]
    fn a_burst_is_trimmed_once_after_it_pauses() {
        let looks = [
            (true, 0),
            (true, 0),
            (true, 0),
            (false, 30 * MIB),
            (false, 30 * MIB),
            (false, 30 * MIB),
            (true, 0),
            (false, 30 * MIB),
        ];
        // The second burst freed as much again as the first: trimmed too.
        assert_eq!(
            trims(&looks, 2 * MIB),
            [false, false, false, true, false, false, false, true]
        );
    }

    /// An open Waves tab polls every 5 s (a look a second): each poll frees about what the
    /// last one took again, so after the first trim no pause between polls trims.
    #[test]
    fn steady_polls_are_not_trimmed_between_them() {
        let mut looks = vec![(true, 0), (false, 20 * MIB)];
        for _ in 0..10 {
            looks.extend([
                (true, 0),
                (false, 2 * MIB + MIB / 2),
                (false, 2 * MIB + MIB / 2),
                (false, 2 * MIB + MIB / 2),
                (false, 2 * MIB + MIB / 2),
            ]);
        }
        let trimmed = trims(&looks, 2 * MIB);
        assert_eq!(trimmed.iter().filter(|t| **t).count(), 1, "{trimmed:?}");
        assert!(trimmed[1]);
    }

    /// Little freed is never worth a trim, even after a pause; free memory growing past the
    /// threshold over several bursts is.
    #[test]
    fn growth_since_the_last_trim_is_what_counts() {
        let looks = [
            (true, 0),
            (false, GROWN - 1),
            (true, 0),
            (false, GROWN + MIB),
            (true, 0),
            (false, GROWN),
            (true, 0),
            (false, 2 * GROWN),
        ];
        // Trimmed to 1 MiB free: the next trim waits for 1 MiB + GROWN.
        assert_eq!(
            trims(&looks, MIB),
            [false, false, false, true, false, false, false, true]
        );
    }

    /// Free memory falling below the floor (taken again by live data) lowers it: growth is
    /// counted from there.
    #[test]
    fn the_floor_follows_free_memory_down() {
        let looks = [
            (true, 0),
            (false, 20 * MIB),
            (true, 0),
            (false, MIB),
            (true, 0),
            (false, MIB + GROWN),
        ];
        // Trimmed to 3 MiB; then 1 MiB is the floor, and 1 MiB + GROWN is growth enough.
        assert_eq!(
            trims(&looks, 3 * MIB),
            [false, true, false, false, false, true]
        );
    }
}
