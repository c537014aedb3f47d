//! Verdicts kept until what they read changes. A view of a big Application asks for every
//! resource's verdict at every poll; after one object changed, only the asks that read it need
//! judging again. Each verdict is kept with the marks of its reads ([`crate::cache::Marks`]),
//! taken *before* it read anything, and served again only while
//! - every read's mark holds (no event on the object or, for a namespace read, on any object of
//!   the kind there; no watch changed phase, relisted, stopped or handed over; see `marks`),
//! - the cache is vouched for (a silent API server turns no mark, but its stores are not served),
//! - Argo CD's health scripts are the ones it was judged with,
//! - and it is younger than [`KEEP_AT_MOST`].
//!
//! Only what rests on reads alone is kept (`Evaluated::keepable`): never a verdict from a read
//! that failed or was blind, from probes or a script that read the clock (time alone changes
//! those), a persistent failure (its grace period runs with time, and must be observed to be
//! remembered), nor Unknown (a script stopped by its time bound says so, and may not next
//! time).

use super::Judgement;
use crate::ask::Ask;
use crate::cache::{Cache, MarkStamp};
use crate::deps::Dep;
use crate::hashing::FastMap;
use crate::health::Verdict;
use crate::locks::lock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// More verdicts than this and those past their time are dropped, then all if that is not
/// enough: keys are what callers ask about. Ten Applications of 2,000 resources fit.
const MAX_KEPT: usize = 20_000;

/// A kept verdict is judged again after this at the latest. Below the 120 s after which a
/// failure not observed again is forgotten, and a read now and then keeps on-demand watches
/// from being stopped as idle (see also [`Cache::watch_idle`]).
pub(super) const KEEP_AT_MOST: Duration = Duration::from_secs(60);

struct Kept {
    judgement: Judgement,
    grounds: Arc<Grounds>,
}

/// What a kept verdict rests on: the marks of its reads, taken before it read, the generation
/// of the scripts it was judged with, and when it is judged again at the latest. Shared with
/// whoever keeps something built from the verdict (a view's rows), so that they can tell
/// whether it still holds without the ask, and by the same rule as the memo.
#[derive(Debug)]
pub(crate) struct Grounds {
    reads: Vec<Dep>,
    marks: MarkStamp,
    scripts: u64,
    until: Instant,
}

impl Grounds {
    /// Whether the verdict still holds at `now`, by `marks` looked at once for many.
    pub(super) fn hold(
        &self,
        marks: &crate::cache::MarkLook<'_>,
        vouched: bool,
        scripts: u64,
        now: Instant,
    ) -> bool {
        vouched
            && now < self.until
            && self.scripts == scripts
            && marks.holds(&self.reads, &self.marks)
    }

    /// The generation of the scripts the verdict was judged with ([`crate::evaluate::Evaluator::scripts`]).
    pub(crate) fn scripts(&self) -> u64 {
        self.scripts
    }

    /// Whether judging read `dep` (so that its mark moving lets the verdict go).
    pub(crate) fn read(&self, dep: &Dep) -> bool {
        self.reads.contains(dep)
    }
}

/// The marks of an ask's reads, taken before it reads anything.
pub(super) struct Taken {
    reads: Vec<Dep>,
    marks: MarkStamp,
    scripts: u64,
    at: Instant,
}

#[derive(Default)]
pub(super) struct Memo {
    kept: Mutex<FastMap<Ask, Kept>>,
}

impl Memo {
    /// The verdict kept for `ask`, if it holds at `now` with scripts of generation `scripts`.
    pub(super) fn get(
        &self,
        ask: &Ask,
        cache: &Cache,
        scripts: u64,
        now: Instant,
    ) -> Option<Judgement> {
        let kept = lock(&self.kept);
        let k = kept.get(ask)?;
        let holds = k
            .grounds
            .hold(&cache.marks().look(), cache.vouched(), scripts, now);
        holds.then(|| k.judgement.clone())
    }

    /// [`Memo::get`] of each of `asks`, all as of one moment: the memo and the marks are
    /// locked once for all of them (a view asks for thousands).
    pub(super) fn get_all<'a>(
        &self,
        asks: impl IntoIterator<Item = &'a Ask>,
        cache: &Cache,
        scripts: u64,
        now: Instant,
    ) -> Vec<Option<(Judgement, Arc<Grounds>)>> {
        let kept = lock(&self.kept);
        let vouched = cache.vouched();
        let marks = cache.marks().look();
        asks.into_iter()
            .map(|ask| {
                let k = kept.get(ask)?;
                let holds = k.grounds.hold(&marks, vouched, scripts, now);
                holds.then(|| (k.judgement.clone(), k.grounds.clone()))
            })
            .collect()
    }

    /// The grounds of the verdict kept for `ask`, if it is `verdict` and holds forever unless
    /// what it read changes: a verdict served another way (the verdict cache's, coalesced) is
    /// then the one these grounds vouch for, since a kept verdict is a function of its reads.
    pub(super) fn grounds_of(
        &self,
        ask: &Ask,
        verdict: &Verdict,
        cache: &Cache,
        scripts: u64,
        now: Instant,
    ) -> Option<Arc<Grounds>> {
        let kept = lock(&self.kept);
        let k = kept.get(ask)?;
        let holds = k.judgement.verdict == *verdict
            && k.judgement.valid_until.is_none()
            && k.grounds
                .hold(&cache.marks().look(), cache.vouched(), scripts, now);
        holds.then(|| k.grounds.clone())
    }

    /// The marks of what judging `ask` reads, now: to be taken before it reads.
    pub(super) fn take(ask: &Ask, cache: &Cache, scripts: u64) -> Taken {
        let reads = super::reads(ask);
        Taken {
            marks: cache.marks().stamp(&reads),
            reads,
            scripts,
            at: Instant::now(),
        }
    }

    /// Keep `judgement` of `ask`, read after `taken`, for `at_most`.
    pub(super) fn keep(&self, ask: &Ask, taken: Taken, judgement: &Judgement, at_most: Duration) {
        let mut kept = lock(&self.kept);
        if kept.len() >= MAX_KEPT && !kept.contains_key(ask) {
            kept.retain(|_, k| k.grounds.until > taken.at);
            if kept.len() >= MAX_KEPT {
                kept.clear();
            }
        }
        kept.insert(
            ask.clone(),
            Kept {
                judgement: judgement.clone(),
                grounds: Arc::new(Grounds {
                    reads: taken.reads,
                    marks: taken.marks,
                    scripts: taken.scripts,
                    until: taken.at + at_most,
                }),
            },
        );
    }

    /// `ask` was judged to something not kept: what was kept of it is of no more use.
    pub(super) fn forget(&self, ask: &Ask) {
        lock(&self.kept).remove(ask);
    }
}
