//! The keys in order, for range scans (`Store::scan`: plyvel's `iterator(start=, stop=,
//! prefix=)`, RocksDB's `Seek`). The index is a hash table (Bitcask's keydir), which
//! knows no order: before this, every scan filtered all the keys and sorted the matches
//! — 185 ms for 100 keys of a million, against LevelDB's 0.07 ms.
//!
//! The first bounded scan sorts the keys once into an [`Order`]; the index then logs
//! the keys it inserts (`Index::added`, a flat log: [`log_push`]), and each later scan
//! takes that log in, finds its first key by binary search and walks from there:
//! O(log n + m) for m keys, plus the keys logged since the last scan. Deleted keys are
//! not tracked: a scan looks every key it walks up in the index anyway (for where its
//! record is), and skips those that are gone; when the order holds twice as many keys
//! as the index, it is sorted afresh.
//!
//! Memory: the keys' bytes once more plus 8 bytes a key (the sorted run), and keys taken
//! in since the run was last merged at ~60 bytes each (at most an eighth of the run's).
//!
//! A store that has an order writes it out when it closes (`ORDER`, [`Order::save`]), so
//! that the next process's first scan reads it (~15 ms for a million keys) instead of
//! sorting (~250 ms). The file names the store state it holds the keys of — the index's
//! hash seed, the sequence number of the last record, and the number of keys — and is
//! used only by an open that recovers exactly that state ([`saved_matches`]); from there
//! the index logs its inserts as if a scan had sorted the keys at open. Layout
//! (little-endian): `"XVO1"`, u32 version, u64 seed, u64 seq, u64 keys (the index's),
//! u64 n (keys in the order), u64 key bytes, u32 crc32c of what follows, u32 0; then
//! n + 1 u64 offsets and the keys back to back.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::iter::Peekable;
use std::path::Path;

/// The file a closing store writes its order to.
pub const FILE: &str = "ORDER";
/// The file it is written to first (renamed over `FILE` once whole).
pub const TMP: &str = "ORDER.tmp";
const MAGIC: &[u8; 4] = b"XVO1";
const VERSION: u32 = 1;
const HEAD: usize = 4 + 4 + 8 * 5 + 4 + 4;

/// What an `ORDER` file says it holds the keys of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Saved {
    pub seed: u64,
    pub seq: u64,
    pub keys: u64,
}

fn head_of(b: &[u8]) -> Option<(Saved, u64, u64, u32)> {
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
    if b.len() < HEAD || &b[..4] != MAGIC || b[4..8] != VERSION.to_le_bytes() {
        return None;
    }
    let saved = Saved {
        seed: u64_at(8),
        seq: u64_at(16),
        keys: u64_at(24),
    };
    let crc = u32::from_le_bytes(b[48..52].try_into().expect("4"));
    Some((saved, u64_at(32), u64_at(40), crc))
}

/// Whether `dir`'s `ORDER` file holds the keys of the state `now` (its header read).
pub fn saved_matches(dir: &Path, now: Saved) -> bool {
    let mut head = [0u8; HEAD];
    let read = std::fs::File::open(dir.join(FILE))
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head));
    read.is_ok() && head_of(&head).is_some_and(|(s, _, _, _)| s == now)
}

/// Keys in ascending order, each once, back to back.
#[derive(Default)]
struct Run {
    buf: Vec<u8>,
    /// where each key starts in `buf`, then `buf.len()` (one more than the keys)
    at: Vec<usize>,
}

impl Run {
    /// A run of `keys`, which must be ascending and distinct.
    fn from_sorted<'a>(keys: impl Iterator<Item = &'a [u8]>, n: usize, bytes: usize) -> Run {
        let mut r = Run {
            buf: Vec::with_capacity(bytes),
            at: Vec::with_capacity(n + 1),
        };
        for k in keys {
            debug_assert!(
                r.len() == 0 || r.key(r.len() - 1) < k,
                "ascending, distinct"
            );
            r.at.push(r.buf.len());
            r.buf.extend_from_slice(k);
        }
        r.at.push(r.buf.len());
        r
    }

    fn len(&self) -> usize {
        self.at.len().saturating_sub(1)
    }

    fn key(&self, i: usize) -> &[u8] {
        &self.buf[self.at[i]..self.at[i + 1]]
    }

    /// The first key not below `k`.
    fn lower_bound(&self, k: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key(mid) < k {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn contains(&self, k: &[u8]) -> bool {
        let i = self.lower_bound(k);
        i < self.len() && self.key(i) == k
    }

    fn from(&self, i: usize) -> impl Iterator<Item = &[u8]> {
        (i..self.len()).map(move |j| self.key(j))
    }

    fn memory(&self) -> usize {
        self.buf.capacity() + self.at.capacity() * std::mem::size_of::<usize>()
    }
}

/// Append `key` to a key log (`[u32 length][key]`, back to back).
pub fn log_push(log: &mut Vec<u8>, key: &[u8]) {
    log.extend_from_slice(&(key.len() as u32).to_le_bytes());
    log.extend_from_slice(key);
}

/// The keys of a key log, in the order they were logged.
pub fn log_keys(log: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = log;
    std::iter::from_fn(move || {
        let n = u32::from_le_bytes(rest.get(..4)?.try_into().expect("4")) as usize;
        let key = &rest[4..4 + n];
        rest = &rest[4 + n..];
        Some(key)
    })
}

/// Keys taken in since the run was merged, below which they are not merged yet.
const RECENT_MIN: usize = 1 << 16;

/// The keys of a store in ascending order: a sorted run, and the keys taken in since it
/// was built or last merged. May hold keys the index no longer has (see the module).
#[derive(Default)]
pub struct Order {
    run: Run,
    recent: BTreeSet<Box<[u8]>>,
    /// the recent keys' bytes
    recent_bytes: usize,
}

impl Order {
    /// The keys of a key log (any order, repeats allowed), sorted.
    pub fn from_log(log: &[u8]) -> Order {
        let mut keys: Vec<&[u8]> = log_keys(log).collect();
        keys.sort_unstable();
        keys.dedup();
        let bytes = keys.iter().map(|k| k.len()).sum();
        Order {
            run: Run::from_sorted(keys.iter().copied(), keys.len(), bytes),
            ..Order::default()
        }
    }

    /// The order `dir`'s `ORDER` file holds, if it holds the keys of `now` and is whole
    /// (its CRC holds).
    pub fn load(dir: &Path, now: Saved) -> Option<Order> {
        let b = std::fs::read(dir.join(FILE)).ok()?;
        let (saved, n, bytes, crc) = head_of(&b)?;
        let (n, bytes) = (usize::try_from(n).ok()?, usize::try_from(bytes).ok()?);
        let offs_len = n.checked_add(1)?.checked_mul(8)?;
        if saved != now || b.len() != HEAD.checked_add(offs_len)?.checked_add(bytes)? {
            return None;
        }
        if crc32c::crc32c(&b[HEAD..]) != crc {
            return None;
        }
        let at: Vec<usize> = b[HEAD..HEAD + offs_len]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")) as usize)
            .collect();
        let buf = b[HEAD + offs_len..].to_vec();
        // offsets ascending from 0 to the end of the keys (the keys' order is not
        // re-checked: the CRC says the file is what a close wrote)
        let sane = at.first() == Some(&0)
            && at.last() == Some(&buf.len())
            && at.windows(2).all(|w| w[0] <= w[1]);
        sane.then(|| Order {
            run: Run { buf, at },
            ..Order::default()
        })
    }

    /// Write this order to `dir`'s `ORDER` file, as the keys of the state `now` (every
    /// key the index has must be in it), through a temporary file renamed over it: a
    /// crash leaves the old file, the new one, or one whose CRC fails — never used.
    pub fn save(&mut self, dir: &Path, now: Saved) -> io::Result<()> {
        self.merge();
        let mut head = Vec::with_capacity(HEAD);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        for v in [now.seed, now.seq, now.keys] {
            head.extend_from_slice(&v.to_le_bytes());
        }
        head.extend_from_slice(&(self.run.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.run.buf.len() as u64).to_le_bytes());
        let offs: Vec<u8> = self
            .run
            .at
            .iter()
            .flat_map(|&a| (a as u64).to_le_bytes())
            .collect();
        let crc = crc32c::crc32c_append(crc32c::crc32c(&offs), &self.run.buf);
        head.extend_from_slice(&crc.to_le_bytes());
        head.extend_from_slice(&0u32.to_le_bytes());
        let tmp = dir.join(TMP);
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&head)?;
        f.write_all(&offs)?;
        f.write_all(&self.run.buf)?;
        drop(f);
        std::fs::rename(&tmp, dir.join(FILE))
    }

    /// Take in the keys of a key log (the index's inserts since the last one).
    pub fn absorb(&mut self, log: &[u8]) {
        for k in log_keys(log) {
            if !self.run.contains(k) && self.recent.insert(k.into()) {
                self.recent_bytes += k.len();
            }
        }
        if self.recent.len() > RECENT_MIN.max(self.run.len() / 8) {
            self.merge();
        }
    }

    /// Merge the recent keys into the run.
    fn merge(&mut self) {
        if self.recent.is_empty() {
            return;
        }
        let recent = std::mem::take(&mut self.recent);
        let n = self.run.len() + recent.len();
        let bytes = self.run.buf.len() + std::mem::take(&mut self.recent_bytes);
        let old = std::mem::take(&mut self.run);
        let both = union(vec![
            Box::new(old.from(0)),
            Box::new(recent.iter().map(|k| &k[..])),
        ]);
        self.run = Run::from_sorted(both, n, bytes);
    }

    /// Keys held: the index's, and any it removed since they were taken in.
    pub fn len(&self) -> usize {
        self.run.len() + self.recent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every key from the first not below `lower`, ascending, each once: the order's,
    /// and `extra` (ascending keys not taken in yet: the log's since the last scan).
    pub fn walk<'a>(
        &'a self,
        lower: &[u8],
        extra: &'a [&'a [u8]],
    ) -> impl Iterator<Item = &'a [u8]> + 'a {
        let lo: Box<[u8]> = lower.into();
        let start = extra.partition_point(|k| *k < lower);
        union(vec![
            Box::new(self.run.from(self.run.lower_bound(lower))),
            Box::new(self.recent.range(lo..).map(|k| &k[..])),
            Box::new(extra[start..].iter().copied()),
        ])
    }

    /// Bytes of memory held (a recent key's allocation and its share of the tree's
    /// nodes counted as 48 bytes beyond the key).
    pub fn memory(&self) -> usize {
        self.run.memory() + self.recent_bytes + self.recent.len() * 48
    }
}

type Keys<'a> = Box<dyn Iterator<Item = &'a [u8]> + 'a>;

/// The union of ascending key streams, ascending, each key once.
fn union<'a>(streams: Vec<Keys<'a>>) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut its: Vec<Peekable<Keys<'a>>> = streams.into_iter().map(Iterator::peekable).collect();
    std::iter::from_fn(move || {
        let min = its.iter_mut().filter_map(|i| i.peek().copied()).min()?;
        for i in &mut its {
            if i.peek() == Some(&min) {
                i.next();
            }
        }
        Some(min)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(keys: &[&[u8]]) -> Vec<u8> {
        let mut l = Vec::new();
        for k in keys {
            log_push(&mut l, k);
        }
        l
    }

    fn walked(o: &Order, lower: &[u8], extra: &[&[u8]]) -> Vec<Vec<u8>> {
        o.walk(lower, extra).map(<[u8]>::to_vec).collect()
    }

    #[test]
    fn a_log_sorted_walked_from_any_key() {
        let o = Order::from_log(&log(&[b"b", b"a", b"d", b"b", b"", b"c"]));
        assert_eq!(o.len(), 5, "repeats once");
        let all: Vec<Vec<u8>> = [&b""[..], b"a", b"b", b"c", b"d"]
            .map(<[u8]>::to_vec)
            .into();
        assert_eq!(walked(&o, b"", &[]), all);
        assert_eq!(walked(&o, b"bb", &[]), all[3..]);
        assert_eq!(walked(&o, b"b", &[]), all[2..]);
        assert_eq!(walked(&o, b"e", &[]), Vec::<Vec<u8>>::new());
        // extra keys join in order, those also held once
        assert_eq!(
            walked(&o, b"b", &[b"a0", b"b", b"bz", b"z"]),
            [&b"b"[..], b"bz", b"c", b"d", b"z"].map(<[u8]>::to_vec)
        );
    }

    #[test]
    fn absorbed_keys_walk_with_the_run_and_merge_into_it() {
        let mut o = Order::from_log(&log(&[b"k10", b"k30"]));
        o.absorb(&log(&[b"k20", b"k30", b"k05", b"k20"]));
        assert_eq!(
            (o.run.len(), o.recent.len()),
            (2, 2),
            "k30 was in the run already"
        );
        let want = [&b"k05"[..], b"k10", b"k20", b"k30"].map(<[u8]>::to_vec);
        assert_eq!(walked(&o, b"", &[]), want);
        o.merge();
        assert_eq!((o.run.len(), o.recent.len()), (4, 0));
        assert_eq!(walked(&o, b"", &[]), want);
        assert_eq!(walked(&o, b"k11", &[]), want[2..]);
    }

    #[test]
    fn many_absorbed_keys_merge_on_their_own() {
        // a model against a sorted set, across several merges
        let mut model = BTreeSet::new();
        let mut o = Order::default();
        let mut x = 7u64;
        for round in 0..6 {
            let mut l = Vec::new();
            for _ in 0..40_000 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let k = format!("{:x}", x >> 44).into_bytes();
                log_push(&mut l, &k);
                model.insert(k);
            }
            o.absorb(&l);
            assert_eq!(o.len(), model.len(), "round {round}");
        }
        assert!(o.run.len() > 0, "merged");
        let got: Vec<Vec<u8>> = walked(&o, b"", &[]);
        assert_eq!(got, model.iter().cloned().collect::<Vec<_>>());
        let from: Vec<Vec<u8>> = model.range(b"8".to_vec()..).cloned().collect();
        assert_eq!(walked(&o, b"8", &[]), from);
    }
}
