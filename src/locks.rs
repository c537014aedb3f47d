//! One way to take a lock (a `Mutex`, or an `RwLock` to read or to write). The maps and queues wavegate guards with a `Mutex` are changed by
//! single inserts, removals and pushes, so a thread that panicked while holding one cannot have
//! left it half-updated: a poisoned lock is taken as it is. Skipping the work instead (the
//! `if let Ok(..) = m.lock()` idiom) would lose it silently — a dependency never registered
//! means a gate that is never woken.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock`] for reading an `RwLock`.
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock`] for writing an `RwLock`.
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_is_still_taken() {
        let m = Arc::new(Mutex::new(vec![1]));
        let poisoner = m.clone();
        let _ = std::thread::spawn(move || {
            let _held = poisoner.lock().unwrap();
            panic!("poison the lock");
        })
        .join();
        assert!(m.is_poisoned());
        lock(&m).push(2);
        assert_eq!(*lock(&m), vec![1, 2]);
    }
}
