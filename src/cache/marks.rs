//! Marks of change: what a verdict read can be kept by. Each object, each (kind, namespace) and
//! the phases of all watches together carry a mark, a value drawn from one counter that is
//! never drawn twice. A mark is moved when a change *begins* (before the store applies an
//! event, before a watch's phase changes) and again when it *ends*. So:
//!
//! - a mark taken before a judgement's reads and equal at a later look means nothing it names
//!   began to change since: the reads answered then what they would answer now;
//! - a mark taken while a change was under way (between its two moves) equals no later one:
//!   what was judged then may have read the old state or the new, and is never served;
//! - while a change is under way, nothing that reads what it changes holds, whatever its
//!   marks: between the store's write and the second move, a verdict stamped after the first
//!   move but read before the write would otherwise still match (a seqlock's odd count).
//!
//! An object the marks do not hold (listed, never changed since; or deleted) carries the
//! *absent* mark of its kind in its namespace, moved by every deletion there: a judgement of an
//! object that does not exist is not kept across a deletion that could have been of that very
//! object, and a deletion elsewhere leaves it be.

use crate::hashing::FastMap;
use crate::locks::lock;
use crate::resource::GroupResource;
use std::sync::Mutex;

/// Something a verdict was read from: one object, or every object of a kind in a namespace
/// (pods and EndpointSlices, whose names a Service check does not know in advance).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Dep {
    Object {
        kind: GroupResource,
        namespace: String,
        name: String,
    },
    Namespace {
        kind: GroupResource,
        namespace: String,
    },
}

impl Dep {
    pub(crate) fn object(kind: GroupResource, namespace: &str, name: &str) -> Dep {
        Dep::Object {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub(crate) fn namespace(kind: GroupResource, namespace: &str) -> Dep {
        Dep::Namespace {
            kind,
            namespace: namespace.into(),
        }
    }
}

#[derive(Default)]
pub(crate) struct Marks {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The last value drawn.
    drawn: u64,
    /// Moved by any watch's phase (listing, synced, relisting, stopped), a list's start and
    /// end, a watch started, stopped, evicted or handed over: all reads at once.
    phase: u64,
    /// By kind, then namespace: moved by any deletion there (and any object a relist dropped);
    /// the mark of every object of it not in `objects` (0 where nothing was ever deleted).
    absent: FastMap<GroupResource, FastMap<String, u64>>,
    /// By `Dep::Object`.
    objects: FastMap<Dep, u64>,
    /// By `Dep::Namespace`: moved by every change of an object of that kind in that namespace.
    namespaces: FastMap<Dep, u64>,
    /// Objects and namespaces whose change has begun and not ended, with how many (two watches
    /// may feed one kind: Services as compact views and whole).
    changing: FastMap<Dep, u32>,
    /// Phase changes begun and not ended.
    phase_changing: u32,
}

impl Inner {
    fn draw(&mut self) -> u64 {
        self.drawn += 1;
        self.drawn
    }

    /// Moves the marks of `kind` `namespace/name` and of its namespace (`gone`: it was deleted).
    fn moved(&mut self, kind: &GroupResource, namespace: &str, name: &str, gone: bool) {
        let mark = self.draw();
        let object = Dep::object(kind.clone(), namespace, name);
        if gone {
            self.objects.remove(&object);
            self.set_absent(kind, namespace, mark);
        } else {
            self.objects.insert(object, mark);
        }
        self.namespaces
            .insert(Dep::namespace(kind.clone(), namespace), mark);
    }

    fn set_absent(&mut self, kind: &GroupResource, namespace: &str, mark: u64) {
        let of_kind = self.absent.entry(kind.clone()).or_default();
        match of_kind.get_mut(namespace) {
            Some(m) => *m = mark,
            None => {
                of_kind.insert(namespace.to_string(), mark);
            }
        }
    }

    fn begin(&mut self, dep: Dep) {
        *self.changing.entry(dep).or_default() += 1;
    }

    fn end(&mut self, dep: Dep) {
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.changing.entry(dep) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }

    fn of(&self, dep: &Dep) -> u64 {
        match dep {
            Dep::Object {
                kind, namespace, ..
            } => self.objects.get(dep).copied().unwrap_or_else(|| {
                self.absent
                    .get(kind)
                    .and_then(|of_kind| of_kind.get(namespace.as_str()))
                    .copied()
                    .unwrap_or(0)
            }),
            Dep::Namespace { .. } => self.namespaces.get(dep).copied().unwrap_or(0),
        }
    }
}

/// The marks held still for a while ([`Marks::look`]).
pub(crate) struct Look<'a>(std::sync::MutexGuard<'a, Inner>);

impl Look<'_> {
    /// [`Marks::holds`], as of this look.
    pub(crate) fn holds(&self, reads: &[Dep], stamp: &Stamp) -> bool {
        let inner = &self.0;
        // Nothing changing is the rule between events: no lookup per read for it then.
        inner.phase == stamp.phase
            && inner.phase_changing == 0
            && (inner.changing.is_empty() || reads.iter().all(|d| !inner.changing.contains_key(d)))
            && reads.len() == stamp.reads.len()
            && reads
                .iter()
                .zip(&stamp.reads)
                .all(|(d, m)| inner.of(d) == *m)
    }
}

/// The marks of a judgement's reads, taken before it read anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp {
    phase: u64,
    /// One per read, in the order they were named.
    reads: Vec<u64>,
}

impl Marks {
    /// The marks of `reads` now.
    pub(crate) fn stamp(&self, reads: &[Dep]) -> Stamp {
        let inner = lock(&self.inner);
        Stamp {
            phase: inner.phase,
            reads: reads.iter().map(|d| inner.of(d)).collect(),
        }
    }

    /// Whether nothing `reads` names began to change since `stamp` was taken of them, and
    /// nothing it names is changing now.
    #[cfg(test)]
    pub(crate) fn holds(&self, reads: &[Dep], stamp: &Stamp) -> bool {
        self.look().holds(reads, stamp)
    }

    /// The marks as they are now, for many [`Look::holds`] under one lock: a view's thousands
    /// of kept verdicts looked at together, not each taking the lock (no change can begin
    /// meanwhile, so they are all looked at as of one moment).
    pub(crate) fn look(&self) -> Look<'_> {
        Look(lock(&self.inner))
    }

    /// A watch's phase, or which watch serves which reads, is about to change: nothing holds
    /// until [`Marks::phase_ends`].
    pub(crate) fn phase_begins(&self) {
        let mut inner = lock(&self.inner);
        inner.phase = inner.draw();
        inner.phase_changing += 1;
    }

    /// The change [`Marks::phase_begins`] announced is made.
    pub(crate) fn phase_ends(&self) {
        let mut inner = lock(&self.inner);
        inner.phase = inner.draw();
        inner.phase_changing = inner.phase_changing.saturating_sub(1);
    }

    /// An event about `kind` `namespace/name` is about to be applied to a store: nothing that
    /// reads it holds until [`Marks::object_ends`].
    pub(super) fn object_begins(&self, kind: &GroupResource, namespace: &str, name: &str) {
        let mut inner = lock(&self.inner);
        inner.moved(kind, namespace, name, false);
        inner.begin(Dep::object(kind.clone(), namespace, name));
        inner.begin(Dep::namespace(kind.clone(), namespace));
    }

    /// The event [`Marks::object_begins`] announced is applied (`gone`: it deleted the object).
    pub(super) fn object_ends(
        &self,
        kind: &GroupResource,
        namespace: &str,
        name: &str,
        gone: bool,
    ) {
        let mut inner = lock(&self.inner);
        inner.moved(kind, namespace, name, gone);
        inner.end(Dep::object(kind.clone(), namespace, name));
        inner.end(Dep::namespace(kind.clone(), namespace));
    }

    /// A relist (or a watch stopped at a bound) dropped these objects without an event of
    /// their own: their marks are let go, as a deletion's are. Called between two
    /// [`Marks::phase_begins`] and [`Marks::phase_ends`], which is what invalidates whatever
    /// read them.
    pub(super) fn objects_dropped<'a>(
        &self,
        kind: &GroupResource,
        dropped: impl IntoIterator<Item = &'a (String, String)>,
    ) {
        let mut inner = lock(&self.inner);
        for (namespace, name) in dropped {
            inner
                .objects
                .remove(&Dep::object(kind.clone(), namespace, name));
            let mark = inner.draw();
            inner.set_absent(kind, namespace, mark);
        }
    }

    /// How many objects carry a mark of their own.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        lock(&self.inner).objects.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "shop";

    fn web() -> Dep {
        Dep::object(GroupResource::SERVICES, NS, "web")
    }

    fn pods() -> Dep {
        Dep::namespace(GroupResource::PODS, NS)
    }

    /// An event on `kind` `NS/name`, both moves, as the watch task makes them.
    fn event(marks: &Marks, kind: &GroupResource, name: &str, gone: bool) {
        marks.object_begins(kind, NS, name);
        marks.object_ends(kind, NS, name, gone);
    }

    #[test]
    fn a_stamp_holds_until_what_it_names_changes_and_only_then() {
        let marks = Marks::default();
        let reads = [web(), pods()];
        let stamp = marks.stamp(&reads);
        assert!(marks.holds(&reads, &stamp));
        // Another Service, a Deployment: not read.
        event(&marks, &GroupResource::SERVICES, "api", false);
        event(
            &marks,
            &GroupResource::new("apps", "deployments"),
            "web",
            false,
        );
        assert!(marks.holds(&reads, &stamp), "moved by what it did not read");
        // Any pod of the namespace.
        event(&marks, &GroupResource::PODS, "web-7", false);
        assert!(!marks.holds(&reads, &stamp));
        let stamp = marks.stamp(&reads);
        event(&marks, &GroupResource::SERVICES, "web", false);
        assert!(!marks.holds(&reads, &stamp));
    }

    #[test]
    fn a_stamp_taken_while_a_change_is_under_way_never_holds() {
        let marks = Marks::default();
        let (reads, kind) = ([web()], &GroupResource::SERVICES);
        marks.object_begins(kind, NS, "web");
        // Stamped after the change began, read before the store's write: the old state.
        let during = marks.stamp(&reads);
        // The store is written; a look before the second move must not serve it (review:
        // with marks alone it matched here).
        assert!(
            !marks.holds(&reads, &during),
            "served the old state after the write"
        );
        marks.object_ends(kind, NS, "web", false);
        assert!(
            !marks.holds(&reads, &during),
            "held across the store's write"
        );
        // A look between the two moves refuses a stamp taken before the change began.
        let before = marks.stamp(&reads);
        marks.object_begins(kind, NS, "web");
        assert!(
            !marks.holds(&reads, &before),
            "served while the store was written"
        );
        // Nor does a change of another pod of the namespace let a namespace read hold.
        let pods = [pods()];
        let stamp = marks.stamp(&pods);
        marks.object_begins(&GroupResource::PODS, NS, "web-1");
        assert!(!marks.holds(&pods, &stamp));
        marks.object_ends(&GroupResource::PODS, NS, "web-1", false);
        let after = marks.stamp(&pods);
        assert!(
            marks.holds(&pods, &after),
            "an ended change still counted as under way"
        );
    }

    /// A phase change under way holds nothing back for good, and nothing meanwhile.
    #[test]
    fn nothing_holds_while_a_phase_changes() {
        let marks = Marks::default();
        let reads = [web()];
        marks.phase_begins();
        let during = marks.stamp(&reads);
        assert!(!marks.holds(&reads, &during));
        marks.phase_ends();
        assert!(!marks.holds(&reads, &during));
        let after = marks.stamp(&reads);
        assert!(marks.holds(&reads, &after));
        // Two watches' changes overlapping: held back until both ended.
        marks.phase_begins();
        marks.phase_begins();
        marks.phase_ends();
        let between = marks.stamp(&reads);
        assert!(!marks.holds(&reads, &between));
        marks.phase_ends();
        assert!(!marks.holds(&reads, &between));
    }

    #[test]
    fn an_absent_object_is_not_kept_across_any_deletion_and_a_deleted_one_lets_go() {
        let marks = Marks::default();
        let missing = [Dep::object(GroupResource::SERVICES, NS, "gone")];
        let stamp = marks.stamp(&missing);
        // Created, then deleted again: absent before and after, but not the same absence (a
        // grace period, an identity may have been judged meanwhile).
        event(&marks, &GroupResource::SERVICES, "gone", false);
        assert!(!marks.holds(&missing, &stamp));
        event(&marks, &GroupResource::SERVICES, "gone", true);
        assert!(!marks.holds(&missing, &stamp));
        assert_eq!(marks.held(), 0, "a deleted object's mark is kept");
        let stamp = marks.stamp(&missing);
        event(&marks, &GroupResource::SERVICES, "other", true);
        assert!(!marks.holds(&missing, &stamp));
        // A deletion of another kind, or in another namespace, cannot have been of it.
        let stamp = marks.stamp(&missing);
        event(&marks, &GroupResource::PODS, "gone", true);
        marks.object_begins(&GroupResource::SERVICES, "elsewhere", "gone");
        marks.object_ends(&GroupResource::SERVICES, "elsewhere", "gone", true);
        marks.objects_dropped(
            &GroupResource::SERVICES,
            &[("elsewhere".to_string(), "other".to_string())],
        );
        assert!(
            marks.holds(&missing, &stamp),
            "a deletion elsewhere let it go"
        );
        // A listed object never changed (no mark of its own) is absent-marked too.
        let listed = [Dep::object(GroupResource::SERVICES, NS, "listed")];
        let stamp = marks.stamp(&listed);
        marks.objects_dropped(
            &GroupResource::SERVICES,
            &[(NS.to_string(), "listed".to_string())],
        );
        assert!(!marks.holds(&listed, &stamp), "dropped by a relist, kept");
    }

    #[test]
    fn a_phase_change_or_a_relist_moves_every_stamp() {
        let marks = Marks::default();
        let reads = [web(), pods()];
        event(&marks, &GroupResource::SERVICES, "web", false);
        let stamp = marks.stamp(&reads);
        marks.phase_begins();
        marks.phase_ends();
        assert!(!marks.holds(&reads, &stamp));
        let stamp = marks.stamp(&reads);
        marks.objects_dropped(
            &GroupResource::SERVICES,
            &[(NS.to_string(), "web".to_string())],
        );
        assert!(
            !marks.holds(&reads, &stamp),
            "a dropped object kept its mark"
        );
        assert_eq!(marks.held(), 0);
        // Nothing dropped: nothing moves.
        let stamp = marks.stamp(&reads);
        marks.objects_dropped(&GroupResource::SERVICES, &[]);
        assert!(marks.holds(&reads, &stamp));
    }
}
