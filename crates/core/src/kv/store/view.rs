//! Snapshot views: the store as it was at one moment, read while it goes on changing
//! (RocksDB's `GetSnapshot`, plyvel's `db.snapshot()`, an LMDB read transaction).
//!
//! Taking one costs nothing up front: it is an id in the store's state. The index keeps
//! only the newest location of each key, so from then on every write that changes a key
//! notes, in each live view that does not have the key yet, where the key's record was
//! before (or that it was absent) — the first change after the view was taken, so the
//! location at that moment. A view reads a key from what it noted, else from the index
//! (a key nobody changed since is where the index says, or where a compaction moved the
//! same record). The segments holding what it noted stay open while it lives, so a
//! compaction that retires them frees their disk space once the view is closed. Memory:
//! a noted 16-byte key costs ~100 bytes (the map's entry, its share of the map's empty
//! slots, the key's own allocation); a view held while the whole store is
//! rewritten holds every key once.

use super::{in_range, Listed, Loc, Segment, State, Store, TOMBSTONE};
use foldhash::fast::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Arc;

/// What one view noted: each key changed since it was taken, as it was then.
#[derive(Default)]
pub(super) struct View {
    /// (a key absent then: a tombstone location — 16 bytes, not an Option's 24)
    before: HashMap<Box<[u8]>, Loc, RandomState>,
    /// the segments those locations are in
    pins: BTreeMap<u32, Arc<Segment>>,
}

fn closed_view() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "this snapshot is closed (take a new one with db.snapshot())",
    )
}

/// The live views, by id: a vector in id order (ids only grow, so a new one goes at the
/// end), found by binary search. It keeps its room: taking and letting go of a view
/// allocates nothing (a map's node was a malloc and a free each).
#[derive(Default)]
pub(super) struct Views(Vec<(u64, View)>);

impl Views {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn insert(&mut self, id: u64, v: View) {
        debug_assert!(self.0.last().is_none_or(|(x, _)| *x < id));
        self.0.push((id, v));
    }
    fn find(&self, id: &u64) -> Option<usize> {
        self.0.binary_search_by_key(id, |(x, _)| *x).ok()
    }
    fn remove(&mut self, id: &u64) -> Option<View> {
        let i = self.find(id)?;
        Some(self.0.remove(i).1)
    }
    fn get(&self, id: &u64) -> Option<&View> {
        self.find(id).map(|i| &self.0[i].1)
    }
    fn contains_key(&self, id: &u64) -> bool {
        self.get(id).is_some()
    }
    fn values(&self) -> impl Iterator<Item = &View> {
        self.0.iter().map(|(_, v)| v)
    }
    fn values_mut(&mut self) -> impl Iterator<Item = &mut View> {
        self.0.iter_mut().map(|(_, v)| v)
    }
}

/// What a view notes for a key that was absent.
const ABSENT: Loc = Loc {
    seg: 0,
    val_len: TOMBSTONE,
    off: 0,
};

impl View {
    /// Append the keys this view noted that it holds (present when it was taken), start
    /// with `prefix`, lie in [start, stop) and come after `after`, with where their
    /// records were (unordered).
    fn noted_in_range(
        &self,
        prefix: &[u8],
        start: Option<&[u8]>,
        stop: Option<&[u8]>,
        after: Option<&[u8]>,
        out: &mut Vec<Listed>,
    ) -> io::Result<()> {
        for (k, &l) in &self.before {
            let past = after.is_none_or(|a| &k[..] > a);
            if l.is_tombstone() || !in_range(k, prefix, start, stop) || !past {
                continue;
            }
            let seg = self.pins.get(&l.seg).ok_or_else(|| unpinned(l))?;
            out.push((k.to_vec(), l, seg.clone()));
        }
        Ok(())
    }
}

/// A noted location whose segment the view does not hold: never expected.
fn unpinned(l: Loc) -> io::Error {
    io::Error::other(format!(
        "snapshot: the segment of a record it reads ({}) is not held (a bug)",
        super::seg_name(l.seg)
    ))
}

impl Store {
    /// Every live view that has not noted `key` yet notes `before`, its location before
    /// the change being made (None: absent).
    pub(super) fn note_views(st: &mut State, key: &[u8], before: Option<Loc>) {
        let before = before.filter(|l| !l.is_tombstone());
        let State { views, segs, .. } = st;
        for v in views.values_mut() {
            if v.before.contains_key(key) {
                continue;
            }
            if let Some(l) = before {
                if let Some(s) = segs.get(&l.seg) {
                    v.pins.entry(l.seg).or_insert_with(|| s.clone());
                }
            }
            v.before.insert(key.into(), before.unwrap_or(ABSENT));
        }
    }

    /// Take a view of the store as it is now; its id.
    pub fn view_open(&self) -> io::Result<u64> {
        self.index_trusted()?;
        let mut st = self.state.write().expect("state");
        let id = st.next_view;
        st.next_view += 1;
        st.views.insert(id, View::default());
        Ok(id)
    }

    /// Let view `id` go (what it pinned with it): the views still open, or None if it
    /// was not open.
    pub fn view_close(&self, id: u64) -> Option<usize> {
        let gone = {
            let mut st = self.state.write().expect("state");
            let v = st.views.remove(&id);
            v.map(|v| (v, st.views.len()))
        };
        gone.map(|(_, left)| left) // (what it held is freed outside the lock)
    }

    /// Whether view `id` is open.
    pub fn view_is_open(&self, id: u64) -> bool {
        self.state.read().expect("state").views.contains_key(&id)
    }

    /// How many views are open.
    pub fn views(&self) -> usize {
        self.state.read().expect("state").views.len()
    }

    /// Where `key`'s record was when view `id` was taken, with its segment (None: the
    /// key was absent), and the active segment now.
    fn view_find(&self, id: u64, key: &[u8]) -> io::Result<Option<(Loc, Arc<Segment>, u32)>> {
        let st = self.state.read().expect("state");
        let v = st.views.get(&id).ok_or_else(closed_view)?;
        let found = match v.before.get(key) {
            Some(l) if l.is_tombstone() => None,
            Some(l) => Some((*l, v.pins.get(&l.seg).cloned())),
            None => st.index.get(key).map(|l| (l, st.segs.get(&l.seg).cloned())),
        };
        match found {
            None => Ok(None),
            Some((l, Some(seg))) => Ok(Some((l, seg, st.active))),
            Some((l, None)) => Err(unpinned(l)),
        }
    }

    /// `key`'s value as view `id` sees it, handed to `f` where it lies. `cached_only`:
    /// `Err(WouldBlock)` rather than wait for the disk (see [`Store::get_cached`]).
    pub fn view_get_with<R>(
        &self,
        id: u64,
        key: &[u8],
        cached_only: bool,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<Option<R>> {
        match self.view_find(id, key)? {
            None => Ok(None),
            Some((loc, seg, active)) => self.read_at(key, loc, &seg, active, cached_only, f),
        }
    }

    /// The values of `keys` as view `id` sees them (None: absent), read as
    /// [`Store::multi_get`] reads.
    pub fn view_multi_get(&self, id: u64, keys: &[&[u8]]) -> io::Result<Vec<Option<Vec<u8>>>> {
        self.flush_for_scan()?;
        let mut found = Vec::with_capacity(keys.len());
        for k in keys {
            found.push(self.view_find(id, k)?.map(|(l, seg, _)| (l, seg)));
        }
        self.read_found(keys, found)
    }

    /// Whether `key` was in the store when view `id` was taken.
    pub fn view_contains(&self, id: u64, key: &[u8]) -> io::Result<bool> {
        Ok(self.view_find(id, key)?.is_some())
    }

    /// How many keys the store held when view `id` was taken.
    pub fn view_len(&self, id: u64) -> io::Result<usize> {
        let st = self.state.read().expect("state");
        let v = st.views.get(&id).ok_or_else(closed_view)?;
        let mut n = st.index.len() as i64;
        for (k, before) in &v.before {
            n += !before.is_tombstone() as i64 - st.index.get(k).is_some() as i64;
        }
        Ok(n.max(0) as usize)
    }

    /// The keys view `id` holds that start with `prefix` and lie in [start, stop),
    /// sorted, with where their records are: [`Store::scan`] as of the view.
    pub fn view_scan(
        &self,
        id: u64,
        prefix: &[u8],
        start: Option<&[u8]>,
        stop: Option<&[u8]>,
    ) -> io::Result<Vec<Listed>> {
        self.flush_for_scan()?;
        let bounded = !prefix.is_empty() || start.is_some() || stop.is_some();
        let mut order = self.order.lock().expect("order");
        let o = match order.is_some() || bounded {
            true => Some(self.order_caught_up(&mut order)),
            false => None,
        };
        let st = self.state.read().expect("state");
        let v = st.views.get(&id).ok_or_else(closed_view)?;
        // the keys as they are now, but those changed since the view was taken; then
        // those as they were
        let mut ls: Vec<Listed> = Vec::new();
        let mut now = |k: &[u8], l: Loc| {
            if !v.before.contains_key(k) {
                ls.push((k.to_vec(), l, st.segs[&l.seg].clone()));
            }
            true
        };
        match o {
            Some(o) => Self::walk_range(&st, o, prefix, start, stop, now),
            None => st.index.iter().for_each(|(k, l)| {
                now(k, l);
            }),
        }
        let sorted = ls.len();
        v.noted_in_range(prefix, start, stop, None, &mut ls)?;
        if o.is_some() && sorted == ls.len() {
            return Ok(ls);
        }
        ls.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(ls)
    }

    /// A page of a forward scan as view `id` sees the store: at most `max` of its keys
    /// that start with `prefix`, lie in [start, stop) and come after `after` (the last
    /// key of the page before), ascending, with where their records are — what a lazy
    /// iterator reads a page at a time (the view keeps it at the moment it was taken).
    pub fn view_page(
        &self,
        id: u64,
        prefix: &[u8],
        start: Option<&[u8]>,
        stop: Option<&[u8]>,
        after: Option<&[u8]>,
        max: usize,
    ) -> io::Result<Vec<Listed>> {
        self.flush_for_scan()?;
        let mut order = self.order.lock().expect("order");
        let o = self.order_caught_up(&mut order);
        let st = self.state.read().expect("state");
        let v = st.views.get(&id).ok_or_else(closed_view)?;
        let from = match (start, after) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let past = |k: &[u8]| after.is_none_or(|a| k > a);
        // the keys as they are now, but those changed since the view was taken ...
        let mut now: Vec<Listed> = Vec::new();
        if max > 0 {
            Self::walk_range(&st, o, prefix, from, stop, |k, l| {
                if past(k) && !v.before.contains_key(k) {
                    now.push((k.to_vec(), l, st.segs[&l.seg].clone()));
                }
                now.len() < max
            });
        }
        // ... and those as they were (a key deleted since may no longer be in the order)
        let mut then: Vec<Listed> = Vec::new();
        v.noted_in_range(prefix, start, stop, after, &mut then)?;
        if then.is_empty() {
            return Ok(now);
        }
        then.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        // both sorted, each with its smallest keys: the page is the smallest `max`
        let mut page = Vec::with_capacity(max.min(now.len() + then.len()));
        let (mut a, mut b) = (now.into_iter().peekable(), then.into_iter().peekable());
        while page.len() < max {
            let take_a = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => x.0 < y.0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            page.extend(if take_a { a.next() } else { b.next() });
        }
        Ok(page)
    }

    /// (views open, keys they noted) for `stats()`.
    pub(super) fn view_counts(st: &State) -> (usize, usize) {
        let noted = st.views.values().map(|v| v.before.len()).sum();
        (st.views.len(), noted)
    }
}
