//! The hasher of the maps looked up thousands of times per view: the marks of change, the kept
//! verdicts, live lint's kept objects, a sync's results by resource. Their keys are names from
//! the cluster and from Applications' `status.resources` (group, kind, namespace, name), which
//! whoever may write a manifest chooses. SipHash (std's default) resists a chooser who wants
//! them to collide, at a cost per lookup that a view pays for every resource (perf: the memo's
//! and lint's lookups were a seventh of a 2,000-resource view's CPU after one change).
//!
//! foldhash is fast but not keyed by secret material of its own: its `RandomState` mixes
//! addresses, a clock and a counter (foldhash 0.2 `seed.rs`), which a process's layout and
//! start time may narrow down. So its seeds here come from std's `RandomState`, whose keys are
//! drawn from the operating system's random source once per thread: names cannot be chosen to
//! collide without learning those keys, which no answer or timing of one lookup shows. A
//! collision costs a probe of the map, never a wrong answer (keys are compared whole).

use foldhash::SharedSeed;
use foldhash::fast::SeedableRandomState;
use std::hash::BuildHasher;
use std::sync::OnceLock;

/// A map keyed by names from the cluster (see the module's doc).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, Seeded>;

/// foldhash, seeded from the operating system's random source: per process (the shared seed)
/// and per map.
#[derive(Clone, Debug)]
pub(crate) struct Seeded(SeedableRandomState);

/// A number no one outside the process can predict (SipHash of 0 under std's random keys).
fn secret() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(0u64)
}

impl Default for Seeded {
    fn default() -> Seeded {
        static SHARED: OnceLock<SharedSeed> = OnceLock::new();
        let shared = SHARED.get_or_init(|| SharedSeed::from_u64(secret()));
        Seeded(SeedableRandomState::with_seed(secret(), shared))
    }
}

impl BuildHasher for Seeded {
    type Hasher = foldhash::fast::FoldHasher<'static>;

    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two maps hash the same name differently: each map's seed is its own.
    #[test]
    fn each_map_is_seeded_apart() {
        let (a, b) = (Seeded::default(), Seeded::default());
        let name = ("apps", "Deployment", "shop", "api");
        assert_ne!(a.hash_one(name), b.hash_one(name));
        assert_eq!(a.hash_one(name), a.clone().hash_one(name));
    }
}
