//! The hasher of the maps looked up thousands of times per view: the marks of change, the kept
//! verdicts, live lint's kept objects, a sync's results by resource. Their keys are names from
//! the cluster and from Applications' `status.resources` (group, kind, namespace, name), which
//! whoever may write a manifest chooses. SipHash (std's default) resists a chooser who wants
//! them to collide, at a cost per lookup that a view pays for every resource (perf: the memo's
//! and lint's lookups were a seventh of a 2,000-resource view's CPU after one change).
//! foldhash's `fast::RandomState` is seeded at random per process and per map, so names cannot
//! be chosen to collide without learning the seed, which no answer or timing of one lookup
//! shows; a collision costs a probe of the map, never a wrong answer (keys are compared whole).

/// A map keyed by names from the cluster (see the module's doc).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
