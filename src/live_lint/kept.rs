//! Live lint's objects kept until what they were read from changes. The waves view lints its
//! Application at every poll; the rules themselves run only when what they read changed
//! ([`super::Runs`]), but reading each workload's pod template from the cache, copying it into
//! the object the rules see and fingerprinting it again, for every object at every poll, was a
//! seventh of the CPU of a 2,000-resource view after one change (perf). An object is kept with
//! the mark of its read ([`crate::cache::Marks`]), taken *before* it read, and served again
//! only while that mark holds, its cache is vouched for, and it is younger than
//! [`KEEP_AT_MOST`]; with the wave and hook types Argo CD recorded for it, which the object
//! carries. A read that failed is never kept; what lint reads of no object (a ConfigMap's name,
//! a kind the policy refuses) is kept until any watch's phase changes.

use super::{Hook, Listed, WORKLOADS};
use crate::cache::{Cache, Dep, MarkStamp};
use crate::hashing::FastMap;
use crate::lint::Object;
use crate::lint::references::CNPG;
use crate::locks::lock;
use crate::policy::CheckPolicy;
use crate::resource::{CheckKind, GroupResource, ResourceRef};
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// More objects than this and those past their time are dropped, then all if that is not
/// enough: keys are what Applications list. Ten Applications of 2,000 resources fit.
const MAX_KEPT: usize = 20_000;

/// A kept object is read again after this at the latest: a read now and then keeps an
/// on-demand watch from being stopped as idle (as kept verdicts do, `evaluate::memo`).
const KEEP_AT_MOST: Duration = Duration::from_secs(60);

/// An object as the rules see it, with its fingerprint and size, computed once.
#[derive(Debug)]
pub(crate) struct Sealed {
    pub object: Object,
    /// A keyed hash of everything the rules read of it.
    pub digest: u64,
    /// Bytes the rules read of it: labels, annotations and its body as JSON.
    pub bytes: usize,
}

/// Keyed per process, so a tenant cannot craft two objects with one digest.
fn keys() -> &'static RandomState {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    KEYS.get_or_init(RandomState::new)
}

impl Sealed {
    pub(crate) fn of(object: Object) -> Sealed {
        /// Feeds the JSON of a body to the hasher without keeping it.
        struct Counted<'h, H> {
            hasher: &'h mut H,
            bytes: usize,
        }
        impl<H: Hasher> std::io::Write for Counted<'_, H> {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.hasher.write(buf);
                self.bytes += buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let o = &object;
        let mut hasher = keys().build_hasher();
        (&o.api_version, &o.kind, &o.name, &o.namespace).hash(&mut hasher);
        (&o.labels, &o.annotations).hash(&mut hasher);
        let mut bytes = o
            .labels
            .iter()
            .chain(&o.annotations)
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>();
        let mut body = Counted {
            hasher: &mut hasher,
            bytes: 0,
        };
        // Writing to a hasher cannot fail, and a `Value` always serializes.
        let _ = serde_json::to_writer(&mut body, &o.body);
        bytes += body.bytes;
        Sealed {
            digest: hasher.finish(),
            bytes,
            object,
        }
    }
}

/// One listed resource as lint saw it: why only in part, if so, and the object.
#[derive(Clone)]
pub(crate) struct Part {
    pub partly: Option<String>,
    pub object: Arc<Sealed>,
}

/// The object a listed resource's lint reads, if any ([`super::read`]'s choice, made alike).
fn read_of(policy: &CheckPolicy, r: &ResourceRef) -> Option<Dep> {
    let at = |kind: GroupResource| Some(Dep::object(kind, &r.namespace, &r.name));
    match (r.group.as_str(), r.kind.as_str()) {
        ("", "Secret" | "ConfigMap" | "Pod") => None,
        ("", "Service") => at(GroupResource::SERVICES),
        (CNPG, "Database") => at(CheckKind::CNPG_DATABASE.kind()),
        (CNPG, "DatabaseRole") => at(CheckKind::CNPG_DATABASE_ROLE.kind()),
        (group, kind)
            if group == crate::gate::kind().group
                && kind == <crate::gate::crd::WaveGate as kube::Resource>::kind(&()) =>
        {
            at(crate::gate::kind())
        }
        (group, kind) => {
            let (_, _, plural) = WORKLOADS
                .iter()
                .find(|(g, k, _)| (*g, *k) == (group, kind))?;
            let resource = CheckKind::Generic {
                group: group.to_string(),
                plural: plural.to_string(),
            };
            policy.allows_kind(&resource).ok()?;
            at(GroupResource::new(group, plural))
        }
    }
}

/// The marks of what reading a listed resource reads, taken before it reads.
pub(crate) struct Taken {
    read: Option<Dep>,
    marks: MarkStamp,
    at: Instant,
}

impl Taken {
    pub(crate) fn now(cache: &Cache, policy: &CheckPolicy, r: &ResourceRef) -> Taken {
        let read = read_of(policy, r);
        Taken {
            marks: cache.marks().stamp(read.as_slice()),
            read,
            at: Instant::now(),
        }
    }
}

struct Entry {
    /// Its cache, held so that no other cache takes its address (part of the key) while
    /// this entry lives.
    _cache: Weak<Cache>,
    wave: i64,
    hook: Hook,
    read: Option<Dep>,
    marks: MarkStamp,
    until: Instant,
    part: Part,
}

/// Lint's objects kept, by the cache they were read from (its address), then by the resource:
/// looked up by a borrowed resource, thousands per view.
#[derive(Default)]
pub(crate) struct Kept {
    kept: Mutex<FastMap<usize, FastMap<ResourceRef, Entry>>>,
}

impl Kept {
    /// What was kept of each of `listed` read from `cache`, where it still holds; all as of
    /// one moment (the map and the marks locked once).
    pub(crate) fn get_all(&self, cache: &Arc<Cache>, listed: &[Listed]) -> Vec<Option<Part>> {
        let at = Arc::as_ptr(cache) as usize;
        let now = Instant::now();
        let kept = lock(&self.kept);
        let Some(kept) = kept.get(&at).filter(|k| !k.is_empty()) else {
            return vec![None; listed.len()];
        };
        let vouched = cache.vouched();
        let marks = cache.marks().look();
        listed
            .iter()
            .map(|l| {
                let e = kept.get(&l.resource)?;
                let holds = vouched
                    && now < e.until
                    && e.wave == l.wave
                    && e.hook == l.hook
                    && marks.holds(e.read.as_slice(), &e.marks);
                holds.then(|| e.part.clone())
            })
            .collect()
    }

    /// Keep `part`, what `listed` was read as after `taken`; unless its read failed.
    pub(crate) fn keep(&self, cache: &Arc<Cache>, listed: &Listed, taken: Taken, part: &Part) {
        if taken.read.is_some() && part.partly.is_some() {
            return;
        }
        let at_most = KEEP_AT_MOST.min(cache.watch_idle() / 2);
        let mut kept = lock(&self.kept);
        let at = Arc::as_ptr(cache) as usize;
        let all: usize = kept.values().map(FastMap::len).sum();
        let known = kept
            .get(&at)
            .is_some_and(|k| k.contains_key(&listed.resource));
        if all >= MAX_KEPT && !known {
            for of_cache in kept.values_mut() {
                of_cache.retain(|_, e| e.until > taken.at);
            }
            kept.retain(|_, of_cache| !of_cache.is_empty());
            if kept.values().map(FastMap::len).sum::<usize>() >= MAX_KEPT {
                kept.clear();
            }
        }
        kept.entry(at).or_default().insert(
            listed.resource.clone(),
            Entry {
                _cache: Arc::downgrade(cache),
                wave: listed.wave,
                hook: listed.hook.clone(),
                read: taken.read,
                marks: taken.marks,
                until: taken.at + at_most,
                part: part.clone(),
            },
        );
    }
}
