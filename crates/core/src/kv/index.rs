//! The key → position index, in native memory: keys live back to back in one arena
//! (`[u32 len][bytes]`), the hash table holds 32-byte entries pointing into it. Overhead
//! per key beyond the key itself: 4 (length) + 32 (entry) / load factor + 1 control byte,
//! about 42 bytes — no Python object per key.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// Where a key's latest record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub seg: u32,
    /// Value length; `TOMBSTONE` for a delete seen during recovery.
    pub val_len: u32,
    /// Offset of the record (its header) in the segment.
    pub off: u64,
    pub seq: u64,
}

pub const TOMBSTONE: u32 = u32::MAX;

impl Loc {
    pub fn is_tombstone(&self) -> bool {
        self.val_len == TOMBSTONE
    }
}

/// 24 bytes: the key's position in the arena (in 4-byte units: arenas up to 16 GiB) and
/// the location with a 32-bit offset (segments are at most 2 GiB).
#[derive(Clone, Copy)]
struct Entry {
    key_at4: u32,
    seg: u32,
    val_len: u32,
    off: u32,
    seq: u64,
}

impl Entry {
    fn new(at: usize, loc: Loc) -> Entry {
        let mut e = Entry {
            key_at4: (at / 4) as u32,
            seg: 0,
            val_len: 0,
            off: 0,
            seq: 0,
        };
        e.set_loc(loc);
        e
    }
    fn at(&self) -> u64 {
        self.key_at4 as u64 * 4
    }
    fn loc(&self) -> Loc {
        Loc {
            seg: self.seg,
            val_len: self.val_len,
            off: self.off as u64,
            seq: self.seq,
        }
    }
    fn set_loc(&mut self, l: Loc) {
        self.seg = l.seg;
        self.val_len = l.val_len;
        self.off = l.off as u32;
        self.seq = l.seq;
    }
}

/// Largest arena the 32-bit (4-byte unit) key positions can address.
pub const MAX_ARENA: usize = (u32::MAX as usize) * 4;

pub struct Index {
    table: HashTable<Entry>,
    arena: Vec<u8>,
    dead: usize,
    hasher: DefaultHashBuilder,
    tombstones: usize,
}

impl Default for Index {
    fn default() -> Self {
        Self::new()
    }
}

impl Index {
    pub fn new() -> Self {
        Index {
            table: HashTable::new(),
            arena: Vec::new(),
            dead: 0,
            hasher: DefaultHashBuilder::default(),
            tombstones: 0,
        }
    }

    /// Room for `keys` entries and `arena` bytes of keys without rehashing.
    pub fn reserve(&mut self, keys: usize, arena: usize) {
        let hasher = &self.hasher;
        let ar = &self.arena;
        self.table
            .reserve(keys, |e| hasher.hash_one(Self::key_at(ar, e.at())));
        self.arena.reserve(arena);
    }

    fn key_at(arena: &[u8], at: u64) -> &[u8] {
        let at = at as usize;
        let n = u32::from_le_bytes(arena[at..at + 4].try_into().expect("4")) as usize;
        &arena[at + 4..at + 4 + n]
    }

    /// Live keys (tombstones excluded).
    pub fn len(&self) -> usize {
        self.table.len() - self.tombstones
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, key: &[u8]) -> Option<Loc> {
        let h = self.hasher.hash_one(key);
        let arena = &self.arena;
        self.table
            .find(h, |e| Self::key_at(arena, e.at()) == key)
            .map(|e| e.loc())
            .filter(|l| !l.is_tombstone())
    }

    /// Insert or replace. With `only_newer`, an existing entry with a higher sequence
    /// number wins (recovery replays segments in any order). Returns the replaced location.
    pub fn put(&mut self, key: &[u8], loc: Loc, only_newer: bool) -> Option<Loc> {
        use hashbrown::hash_table::Entry as E;
        let h = self.hasher.hash_one(key);
        let hasher = &self.hasher;
        let arena = &self.arena;
        // one probe: find the key or the slot to put it in
        match self.table.entry(
            h,
            |e| Self::key_at(arena, e.at()) == key,
            |e| hasher.hash_one(Self::key_at(arena, e.at())),
        ) {
            E::Occupied(mut o) => {
                let e = o.get_mut();
                if only_newer && e.seq > loc.seq {
                    return None;
                }
                let old = e.loc();
                if old.is_tombstone() && !loc.is_tombstone() {
                    self.tombstones -= 1;
                } else if !old.is_tombstone() && loc.is_tombstone() {
                    self.tombstones += 1;
                }
                e.set_loc(loc);
                Some(old)
            }
            E::Vacant(v) => {
                let at = Self::push_key(&mut self.arena, key);
                if loc.is_tombstone() {
                    self.tombstones += 1;
                }
                v.insert(Entry::new(at, loc));
                None
            }
        }
    }

    /// Remove a key; returns its location if it was live.
    pub fn remove(&mut self, key: &[u8]) -> Option<Loc> {
        let h = self.hasher.hash_one(key);
        let arena = &self.arena;
        match self
            .table
            .find_entry(h, |e| Self::key_at(arena, e.at()) == key)
        {
            Ok(occ) => {
                let (e, _) = occ.remove();
                self.dead += 4 + key.len();
                if e.loc().is_tombstone() {
                    self.tombstones -= 1;
                    None
                } else {
                    Some(e.loc())
                }
            }
            Err(_) => None,
        }
    }

    /// Drop tombstones (after recovery) and compact the key arena if it is mostly garbage.
    pub fn purge_tombstones(&mut self) {
        if self.tombstones > 0 {
            let arena = &self.arena;
            let mut dead = 0;
            self.table.retain(|e| {
                if e.loc().is_tombstone() {
                    dead += 4 + Self::key_at(arena, e.at()).len();
                    false
                } else {
                    true
                }
            });
            self.dead += dead;
            self.tombstones = 0;
        }
        if self.dead > self.arena.len() / 2 && self.dead > 1 << 20 {
            self.rebuild_arena();
        }
    }

    /// Append `[u32 len][key]` at a 4-byte boundary; returns its position.
    fn push_key(arena: &mut Vec<u8>, key: &[u8]) -> usize {
        while !arena.len().is_multiple_of(4) {
            arena.push(0);
        }
        let at = arena.len();
        arena.extend_from_slice(&(key.len() as u32).to_le_bytes());
        arena.extend_from_slice(key);
        at
    }

    /// Whether the arena can take `more` bytes of keys (16 GiB of keys at most).
    pub fn has_room(&self, more: usize) -> bool {
        self.arena.len() + more + 8 < MAX_ARENA
    }

    fn rebuild_arena(&mut self) {
        let mut arena = Vec::with_capacity(self.arena.len() - self.dead);
        for e in self.table.iter_mut() {
            let k = Self::key_at(&self.arena, e.at());
            let at = Self::push_key(&mut arena, k);
            e.key_at4 = (at / 4) as u32;
        }
        self.arena = arena;
        self.dead = 0;
    }

    /// Give back memory reserved beyond what the index holds (after recovery).
    pub fn shrink(&mut self) {
        self.arena.shrink_to_fit();
    }

    /// Every live key and its location (arbitrary order).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Loc)> {
        let arena = &self.arena;
        self.table
            .iter()
            .filter(|e| !e.loc().is_tombstone())
            .map(move |e| (Self::key_at(arena, e.at()), e.loc()))
    }

    /// Bytes of native memory the index uses (table + arena).
    pub fn memory(&self) -> usize {
        self.table.capacity() * (std::mem::size_of::<Entry>() + 1) + self.arena.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(seq: u64) -> Loc {
        Loc {
            seg: 1,
            val_len: 3,
            off: seq * 10,
            seq,
        }
    }

    #[test]
    fn put_get_remove() {
        let mut ix = Index::new();
        assert!(ix.put(b"a", loc(1), false).is_none());
        assert_eq!(ix.get(b"a"), Some(loc(1)));
        assert_eq!(ix.put(b"a", loc(2), false), Some(loc(1)));
        assert!(ix.put(b"a", loc(1), true).is_none()); // older: ignored
        assert_eq!(ix.get(b"a"), Some(loc(2)));
        assert_eq!(ix.len(), 1);
        assert_eq!(ix.remove(b"a"), Some(loc(2)));
        assert_eq!(ix.get(b"a"), None);
        assert!(ix.is_empty());
    }

    #[test]
    fn tombstones_hide_and_purge() {
        let mut ix = Index::new();
        ix.put(b"k", loc(5), true);
        let t = Loc {
            val_len: TOMBSTONE,
            ..loc(6)
        };
        ix.put(b"k", t, true);
        ix.put(b"k", loc(4), true); // an older put replayed later stays dead
        assert_eq!(ix.get(b"k"), None);
        assert_eq!(ix.len(), 0);
        ix.purge_tombstones();
        assert_eq!(ix.iter().count(), 0);
    }

    #[test]
    fn many_keys() {
        let mut ix = Index::new();
        for i in 0..100_000u64 {
            ix.put(&i.to_le_bytes(), loc(i), false);
        }
        assert_eq!(ix.len(), 100_000);
        for i in (0..100_000u64).step_by(7) {
            assert_eq!(ix.get(&i.to_le_bytes()).unwrap().seq, i);
        }
        let per_key = ix.memory() as f64 / 100_000.0 - 8.0;
        assert!(per_key < 64.0, "{per_key} bytes of overhead per key");
    }
}
