//! The store's tests: real stores on real files, in temporary directories.

use super::*;

fn opts() -> Options {
    Options {
        segment_size: 64 << 10,
        ..Default::default()
    }
}

/// A test store in `d` opened with durability "none" and `o`'s other options, and
/// the path of its `INDEX`.
fn unsynced(d: &tempfile::TempDir, o: Options) -> (Options, PathBuf) {
    let o = Options {
        durability: Durability::None,
        ..o
    };
    (o, d.path().join(snapshot::FILE))
}

#[test]
fn garbage_after_reads_data_regions_only() {
    // last_nonzero on its own: whole blocks, remainders, nothing
    let mut b = vec![0u8; 10_000];
    assert_eq!(last_nonzero(&b), None);
    b[3] = 1;
    assert_eq!(last_nonzero(&b), Some(3));
    b[9_999] = 7;
    assert_eq!(last_nonzero(&b), Some(9_999));
    b[9_999] = 0;
    b[8_191] = 2;
    assert_eq!(last_nonzero(&b), Some(8_191));
    // a file: 100 bytes of records, 4 MiB allocated ahead (a hole to SEEK_DATA on
    // ext4/XFS, zeros to a read), then junk written into it further on
    let d = tempfile::tempdir().unwrap();
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(d.path().join("seg"))
        .unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    crate::sys::fileio::pwrite_all(fd, &[9u8; 100], 0).unwrap();
    // SAFETY: fallocate on our open file.
    let allocated = unsafe { libc::fallocate(fd, 0, 100, 4 << 20) } == 0;
    let size = if allocated { 100 + (4 << 20) } else { 100 };
    assert_eq!(garbage_after(fd, 100, size).unwrap(), 0);
    crate::sys::fileio::pwrite_all(fd, b"junk", 200_000).unwrap();
    let size = size.max(200_004);
    assert_eq!(garbage_after(fd, 100, size).unwrap(), 200_004 - 100);
    assert_eq!(garbage_after(fd, 200_004, size).unwrap(), 0);
}

#[test]
fn the_overlay_merges_and_the_table_grows_a_few_keys_per_put() {
    // A store reopened over a mapped INDEX of 20,000 keys takes 3 × OVERLAY_MAX more at
    // random (puts of new and old keys, deletes, gets), against a model: the overlay
    // merges into the table a few entries per put (puts meanwhile go to the table), the
    // mapped table grows onto the heap in steps — every answer, listing and count stays
    // the model's, at every stage and after a close and reopen.
    use super::super::index::OVERLAY_MAX;
    use std::collections::HashMap;
    let d = tempfile::tempdir().unwrap();
    let o = || Options {
        durability: Durability::None,
        segment_size: 8 << 20,
        ..opts()
    };
    let key = |i: u64| format!("key{i:07}").into_bytes();
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    {
        let s = Store::open(d.path(), o()).unwrap();
        for i in 0..20_000u64 {
            let v = format!("v{i}").into_bytes();
            s.put(&key(i), &v).unwrap();
            model.insert(key(i), v);
        }
    }
    let check = |s: &Store, model: &HashMap<Vec<u8>, Vec<u8>>, what: &str| {
        assert_eq!(s.len(), model.len(), "{what}: len");
        let mut keys = s.keys().unwrap();
        keys.sort_unstable();
        let mut want: Vec<Vec<u8>> = model.keys().cloned().collect();
        want.sort_unstable();
        assert!(
            keys == want,
            "{what}: {} keys listed, {} expected",
            keys.len(),
            want.len()
        );
        for (k, v) in model.iter().step_by(13) {
            assert_eq!(s.get(k).unwrap().as_ref(), Some(v), "{what}: get");
        }
    };
    let mut next = crate::kv::table::tests::xorshift(0x2545_F491_4F6C_DD1D);
    {
        let s = Store::open(d.path(), o()).unwrap();
        let mapped = |s: &Store| {
            s.stats()
                .into_iter()
                .any(|(k, v)| k == "index_mapped" && v == 1)
        };
        assert!(mapped(&s), "reopened over the mapped INDEX");
        let (mut stages, mut moved_to_heap, mut tail_made) = (0, false, false);
        for step in 0..3 * OVERLAY_MAX as u64 {
            let r = next() % 100;
            // mostly new keys; a fifth of the time one of the snapshot's
            let k = match next() % 5 {
                0 => key(next() % 20_000),
                _ => key(20_000 + next() % (4 * OVERLAY_MAX as u64)),
            };
            if r < 75 {
                let v = format!("w{step}").into_bytes();
                s.put(&k, &v).unwrap();
                model.insert(k, v);
            } else if r < 90 {
                assert_eq!(s.delete(&k).unwrap(), model.remove(&k).is_some(), "{step}");
            } else {
                assert_eq!(s.get(&k).unwrap(), model.get(&k).cloned(), "{step}");
            }
            // the heap tail the overlay's keys move to is made ahead: wait for it here,
            // so that the detach copies into it (as it does when the thread is quick)
            tail_made = tail_made || s.state.write().unwrap().index.wait_tail_ahead();
            if !mapped(&s) && !moved_to_heap {
                moved_to_heap = true;
                check(&s, &model, "as the table left the mapping");
            }
            if step % (OVERLAY_MAX as u64 / 2) == 1_000 {
                stages += 1;
                check(&s, &model, &format!("step {step}"));
            }
        }
        assert!(moved_to_heap && tail_made && stages >= 5);
        check(&s, &model, "at the end");
    }
    let s = Store::open(d.path(), o()).unwrap();
    check(&s, &model, "reopened");
}

#[test]
fn keys_added_over_a_mapped_snapshot() {
    // The reopened store's table is the mapped INDEX; new keys go to the overlay,
    // known ones are updated in place; deletes, listings, counts and the next
    // snapshot see both, and the overlay merges into the table when it gets large.
    let d = tempfile::tempdir().unwrap();
    let o = || Options {
        durability: Durability::None,
        ..opts()
    };
    let val = |i: u32, gen: u32| format!("v{i}-{gen}").into_bytes();
    {
        let s = Store::open(d.path(), o()).unwrap();
        for i in 0..5000u32 {
            s.put(format!("k{i}").as_bytes(), &val(i, 0)).unwrap();
        }
    }
    let n_new = (super::super::index::OVERLAY_MAX + 3000) as u32;
    for round in 1..=2u32 {
        let s = Store::open(d.path(), o()).unwrap();
        let mapped = s.stats().into_iter().find(|(k, _)| k == "index_mapped");
        assert_eq!(
            mapped.map(|m| m.1),
            Some(1),
            "reopened over the mapped INDEX"
        );
        // updates of snapshot keys, new keys (past the overlay's limit in round 2)
        for i in (0..5000u32).step_by(3) {
            s.put(format!("k{i}").as_bytes(), &val(i, round)).unwrap();
        }
        let new = if round == 1 { 1000 } else { n_new };
        for i in 0..new {
            s.put(format!("n{round}-{i}").as_bytes(), &val(i, round))
                .unwrap();
        }
        assert!(s.delete(format!("k{round}").as_bytes()).unwrap()); // from the table
        assert!(s.delete(format!("n{round}-7").as_bytes()).unwrap()); // overlay
        assert!(!s.delete(format!("n{round}-7").as_bytes()).unwrap());
        let mut want = 5000 - round as usize + (new as usize - 1);
        if round == 2 {
            want += 1000 - 1; // round 1's new keys survived the reopen
        }
        assert_eq!(s.len(), want);
        let keys: std::collections::HashSet<Vec<u8>> = s.keys().unwrap().into_iter().collect();
        assert_eq!(keys.len(), want, "a key listed twice (table + overlay)?");
        assert!(keys.contains(b"k3".as_slice()) && !keys.contains(b"k1".as_slice()));
        // a shadowed key deleted, then put again
        assert!(s.delete(b"k6").unwrap());
        assert_eq!(s.get(b"k6").unwrap(), None);
        assert_eq!(s.len(), want - 1);
        s.put(b"k6", &val(6, 9)).unwrap();
        assert_eq!(s.get(b"k6").unwrap().unwrap(), val(6, 9));
        assert_eq!(s.len(), want);
        assert_eq!(s.get(b"k3").unwrap().unwrap(), val(3, round));
        assert_eq!(s.get(b"k4").unwrap().unwrap(), val(4, 0));
        assert_eq!(
            s.get(format!("n{round}-8").as_bytes()).unwrap().unwrap(),
            val(8, round)
        );
        assert_eq!(s.get(format!("n{round}-7").as_bytes()).unwrap(), None);
        assert_eq!(s.get(format!("k{round}").as_bytes()).unwrap(), None);
    }
    let s = Store::open(d.path(), o()).unwrap();
    assert_eq!(s.get(b"k6").unwrap().unwrap(), val(6, 9));
    assert_eq!(s.get(b"k9").unwrap().unwrap(), val(9, 2));
    assert_eq!(s.get(b"n1-999").unwrap().unwrap(), val(999, 1));
    assert_eq!(
        s.get(format!("n2-{}", n_new - 1).as_bytes())
            .unwrap()
            .unwrap(),
        val(n_new - 1, 2)
    );
    assert_eq!(s.get(b"n1-7").unwrap(), None);
    assert_eq!(s.get(b"k2").unwrap(), None);
    assert_eq!(s.len(), 5000 - 2 + 999 + n_new as usize - 1);
}

#[test]
fn put_get_delete_reopen() {
    let d = tempfile::tempdir().unwrap();
    {
        let s = Store::open(d.path(), opts()).unwrap();
        for i in 0..2000u32 {
            s.put(format!("k{i}").as_bytes(), &i.to_le_bytes().repeat(10))
                .unwrap();
        }
        assert!(s.delete(b"k5").unwrap());
        assert!(!s.delete(b"nope").unwrap());
        s.batch(&[(b"a", Some(b"1")), (b"k6", None)]).unwrap();
        assert_eq!(
            s.get(b"k7").unwrap().unwrap(),
            7u32.to_le_bytes().repeat(10)
        );
        assert_eq!(s.len(), 1999);
    }
    let s = Store::open(d.path(), opts()).unwrap();
    assert_eq!(s.len(), 1999);
    assert_eq!(s.get(b"k5").unwrap(), None);
    assert_eq!(s.get(b"k6").unwrap(), None);
    assert_eq!(s.get(b"a").unwrap().unwrap(), b"1");
    assert!(s.recovery.segments > 1, "rolled segments");
}

#[test]
fn second_writer_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let _a = Store::open(d.path(), opts()).unwrap();
    let e = Store::open(d.path(), opts()).err().unwrap();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    assert!(e.to_string().contains("in this process"), "{e}");
}

#[test]
fn torn_tail_is_truncated_and_incomplete_batch_invisible() {
    let d = tempfile::tempdir().unwrap();
    let seg;
    {
        let s = Store::open(d.path(), opts()).unwrap();
        s.put(b"x", b"1").unwrap();
        seg = d.path().join(seg_name(s.state.read().unwrap().active));
    }
    // an incomplete batch (no COMMIT) and half a record
    let mut tail = Vec::new();
    record::encode(&mut tail, Kind::Put, FLAG_BATCH, 99, b"b1", b"v", 0);
    record::encode(&mut tail, Kind::Put, 0, 100, b"torn", b"value", 0);
    tail.truncate(tail.len() - 3);
    let mut f = fs::OpenOptions::new().append(true).open(&seg).unwrap();
    use std::io::Write;
    f.write_all(&tail).unwrap();
    let s = Store::open(d.path(), opts()).unwrap();
    assert_eq!(s.recovery.torn_bytes, tail.len() as u64);
    assert_eq!(s.get(b"b1").unwrap(), None);
    assert_eq!(s.get(b"torn").unwrap(), None);
    assert_eq!(s.get(b"x").unwrap().unwrap(), b"1");
    s.put(b"after", b"ok").unwrap();
    drop(s);
    let s = Store::open(d.path(), opts()).unwrap();
    assert_eq!(s.get(b"after").unwrap().unwrap(), b"ok");
    assert_eq!(s.recovery.torn_bytes, 0);
}

#[test]
fn corruption_in_old_segment_is_an_error_unless_repair() {
    let d = tempfile::tempdir().unwrap();
    {
        let s = Store::open(d.path(), opts()).unwrap();
        for i in 0..3000u32 {
            s.put(
                format!("k{i}").as_bytes(),
                b"0123456789012345678901234567890",
            )
            .unwrap();
        }
    }
    let first = d.path().join(seg_name(1));
    let mut data = fs::read(&first).unwrap();
    data[100] ^= 0xff;
    fs::write(&first, &data).unwrap();
    {
        // from the index snapshot: opening succeeds, the damaged record is refused
        let s = Store::open(d.path(), opts()).unwrap();
        assert!(s.recovery.from_snapshot);
        let errs: Vec<String> = (0..10u32)
            .filter_map(|i| s.get(format!("k{i}").as_bytes()).err())
            .map(|e| e.to_string())
            .collect();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("00000001.seg") && errs[0].contains("CRC"));
        // a record that passed its check is remembered (not checked again); the
        // damaged one never is: it is refused on every read
        let checked = |k: &[u8]| {
            let st = s.state.read().unwrap();
            let l = st.index.get(k).unwrap();
            st.segs[&l.seg].crc_known_good(l.off)
        };
        let bad = (0..10u32)
            .map(|i| format!("k{i}"))
            .find(|k| s.get(k.as_bytes()).is_err())
            .unwrap();
        assert!(!checked(bad.as_bytes()));
        assert!(s.get(bad.as_bytes()).is_err());
        let good = if bad == "k0" { "k1" } else { "k0" };
        assert!(checked(good.as_bytes()));
        assert!(!checked(b"k2999"), "not read yet");
        assert_eq!(
            s.get(good.as_bytes()).unwrap().unwrap(),
            b"0123456789012345678901234567890"
        );
        assert_eq!(s.check().unwrap().1.len(), 1);
    }
    // without it, the full scan finds the damage at open
    fs::remove_file(d.path().join(snapshot::FILE)).unwrap();
    let e = Store::open(d.path(), opts()).err().unwrap();
    assert!(
        e.to_string().contains("00000001.seg") && e.to_string().contains("offset"),
        "{e}"
    );
    let s = Store::open(
        d.path(),
        Options {
            repair: true,
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(s.recovery.skipped.len(), 1);
    assert!(s.len() >= 2998);
}

#[test]
fn compaction_keeps_live_data_and_hints_reload() {
    let d = tempfile::tempdir().unwrap();
    {
        let s = Store::open(d.path(), opts()).unwrap();
        overwrite_rounds(&s, 5, 500, |r| u32::from(r).to_le_bytes().repeat(20));
        for i in 0..100u32 {
            s.delete(format!("k{i}").as_bytes()).unwrap();
        }
        let (n, freed) = s.compact().unwrap();
        assert!(n > 1 && freed > 0);
        assert_eq!(s.len(), 400);
        s.put(b"k1", b"new").unwrap();
        assert_eq!(
            s.get(b"k499").unwrap().unwrap(),
            4u32.to_le_bytes().repeat(20)
        );
    }
    for from_snapshot in [true, false] {
        if !from_snapshot {
            fs::remove_file(d.path().join(snapshot::FILE)).unwrap();
        }
        let s = Store::open(d.path(), opts()).unwrap();
        assert_eq!(s.recovery.from_snapshot, from_snapshot);
        assert_eq!(s.recovery.from_hints > 0, !from_snapshot);
        assert_eq!(s.len(), 401);
        assert_eq!(s.get(b"k1").unwrap().unwrap(), b"new");
        assert_eq!(s.get(b"k2").unwrap(), None);
        let (n, bad) = s.check().unwrap();
        assert_eq!((n, bad.len()), (401, 0));
    }
}

#[test]
fn a_rebuild_keeps_records_newer_than_a_compactions_copies() {
    // A compaction of some segments gives its outputs ids above the active
    // segment's, which then takes newer records of keys it copied: rebuilt from the
    // segments and hint files alone (no INDEX), those win though their segment comes
    // first — by sequence number (kept aside during the rebuild only).
    let d = tempfile::tempdir().unwrap();
    let o = Options {
        auto_compact: None,
        ..opts()
    };
    let key = |i: u32| format!("k{i:04}").into_bytes();
    let s = Store::open(d.path(), o.clone()).unwrap();
    for i in 0..300u32 {
        s.put(&key(i), &[1; 100]).unwrap();
    }
    for i in 300..1500u32 {
        s.put(&key(i), &[2; 100]).unwrap();
    }
    let first = *s.state.read().unwrap().segs.keys().next().unwrap();
    s.compact_locked(Some(&[first])).unwrap();
    {
        let st = s.state.read().unwrap();
        assert!(
            st.segs.keys().any(|&id| id > st.active),
            "an output above the active"
        );
        assert!(st.index.get(&key(5)).unwrap().seg > st.active);
    }
    for i in 0..10u32 {
        s.put(&key(i), b"newest").unwrap();
    }
    assert!(s.delete(&key(20)).unwrap());
    drop(s);
    fs::remove_file(d.path().join(snapshot::FILE)).unwrap();
    let s = Store::open(d.path(), o).unwrap();
    assert!(!s.recovery.from_snapshot && s.recovery.from_hints > 0);
    for i in 0..10u32 {
        assert_eq!(s.get(&key(i)).unwrap().unwrap(), b"newest", "k{i}");
    }
    assert_eq!(s.get(&key(20)).unwrap(), None);
    assert_eq!(s.get(&key(21)).unwrap().unwrap(), [1; 100]);
    assert_eq!(s.len(), 1499);
}

#[test]
fn compaction_reads_live_records_from_the_segments_and_falls_back_past_damage() {
    let d = tempfile::tempdir().unwrap();
    let val = |i: u32, round: u32| format!("v{round}-{i:030}").into_bytes();
    {
        let s = Store::open(d.path(), opts()).unwrap();
        for round in 0..3u32 {
            for i in 0..1000u32 {
                if (i + round) % 3 != 0 {
                    s.put(format!("k{i}").as_bytes(), &val(i, round)).unwrap();
                }
            }
        }
        for i in (0..1000u32).step_by(7) {
            s.delete(format!("k{i}").as_bytes()).unwrap();
        }
    }
    // damage one record in the middle of the second segment; reopen with repair
    let second = d.path().join(seg_name(2));
    let mut data = fs::read(&second).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0xff;
    fs::write(&second, &data).unwrap();
    fs::remove_file(d.path().join(snapshot::FILE)).unwrap();
    let repair = Options {
        repair: true,
        ..opts()
    };
    let s = Store::open(d.path(), repair.clone()).unwrap();
    assert_eq!(s.recovery.skipped.len(), 1);
    let keys: Vec<Vec<u8>> = (0..1000u32).map(|i| format!("k{i}").into_bytes()).collect();
    let want: Vec<Option<Vec<u8>>> = keys.iter().map(|k| s.get(k).unwrap()).collect();
    assert!(want.iter().filter(|v| v.is_some()).count() > 500);
    // the scan stops at the damage (and only there); what it copied before is live
    {
        let segs = s.state.read().unwrap().segs.clone();
        let mut out = CompactOut::default();
        assert_eq!(s.scan_live(1, &segs[&1], &mut out).unwrap(), None);
        let at = s.scan_live(2, &segs[&2], &mut out).unwrap();
        assert!(matches!(at, Some(o) if o <= mid as u64), "{at:?}");
        let copied: Vec<&(Vec<u8>, Loc, u64)> = out
            .new_segs
            .iter()
            .chain(&out.cur)
            .flat_map(|n| &n.3)
            .collect();
        assert!(!copied.is_empty());
        let st = s.state.read().unwrap();
        for (k, _, seq) in copied {
            let now = st.index.get(k).unwrap();
            let mut head = [0u8; HEADER];
            pread_exact(segs[&now.seg].fd, &mut head, now.off).unwrap();
            let live = record::parse_header(&head).unwrap().seq;
            assert!(now.seg <= 2 && live == *seq, "copied a dead record");
        }
        for (id, fd, _, _) in out.new_segs.iter().chain(&out.cur) {
            // SAFETY: the test's own fds, closed once.
            unsafe { libc::close(*fd) };
            fs::remove_file(d.path().join(format!("{}.tmp", seg_name(*id)))).unwrap();
        }
    }
    // The compaction copies the rest from the index: every value is still there.
    // (Asked for the damaged segment alone, it compacts them all: tombstones past
    // the damage cannot be found to carry them on.)
    let (n, freed) = s.compact_locked(Some(&[2])).unwrap();
    assert!(n >= 3 && freed > 0, "{n} {freed}");
    let got: Vec<Option<Vec<u8>>> = keys.iter().map(|k| s.get(k).unwrap()).collect();
    assert_eq!(got, want);
    assert_eq!(s.check().unwrap().1.len(), 0);
    drop(s);
    let s = Store::open(d.path(), opts()).unwrap();
    assert!(s.recovery.skipped.is_empty());
    let got: Vec<Option<Vec<u8>>> = keys.iter().map(|k| s.get(k).unwrap()).collect();
    assert_eq!(got, want);
    assert!(
        !d.path().join(seg_name(2)).exists(),
        "the damaged segment is retired"
    );
}

/// A copy of store directory `d` without its LOCK (the copy of a killed writer's
/// files: a forgotten store keeps its flock in this process).
/// A store over several 64 KiB segments: the first ones compacted (with hint
/// files), more written after, closed (INDEX written). Keys `k0..k1999`, values
/// `v{i}` padded to 40 bytes; returns the segment ids, oldest first.
fn compacted_store(d: &Path) -> Vec<u32> {
    let val = |i: u32| format!("v{i:039}").into_bytes();
    {
        let s = Store::open(d, opts()).unwrap();
        for i in 0..1000u32 {
            s.put(format!("k{i}").as_bytes(), &val(i)).unwrap();
        }
        s.compact().unwrap();
        for i in 1000..2000u32 {
            s.put(format!("k{i}").as_bytes(), &val(i)).unwrap();
        }
    }
    let mut ids: Vec<u32> = Store::list_dir(d)
        .unwrap()
        .iter()
        .filter_map(|n| n.strip_suffix(".seg").and_then(|s| s.parse().ok()))
        .collect();
    ids.sort_unstable();
    ids
}

/// [`compacted_store`] at `d`, and the first of its segments with a hint file (a
/// compaction output).
fn hinted_store(d: &Path) -> u32 {
    compacted_store(d)
        .into_iter()
        .find(|id| d.join(hint_name(*id)).exists())
        .expect("a compaction output")
}

#[test]
fn varints_round_trip() {
    for v in [0, 1, 127, 128, 300, 1 << 32, u64::MAX - 1, u64::MAX] {
        let mut b = Vec::new();
        put_varint(&mut b, v);
        let mut r = &b[..];
        assert_eq!(varint(&mut r), Some(v));
        assert!(r.is_empty());
        assert_eq!(varint(&mut &b[..b.len() - 1]), None, "cut short");
    }
}

#[test]
fn a_hint_of_random_entries_is_refused_not_a_panic() {
    // checksummed garbage after a version 3 header (or a version 1 one): never a
    // panic or an index of nonsense — the hint is not used and the segment is read
    let d = tempfile::tempdir().unwrap();
    let id = hinted_store(d.path());
    let size = fs::metadata(d.path().join(seg_name(id))).unwrap().len();
    let mut next = crate::kv::table::tests::xorshift(0x9E37_79B9_7F4A_7C15);
    for round in 0..200 {
        let mut b = (if round % 2 == 0 { b"XVH3" } else { b"XVH1" }).to_vec();
        b.extend_from_slice(&size.to_le_bytes());
        b.extend_from_slice(&((round % 7) as u32 * 100).to_le_bytes());
        for _ in 0..(round * 13) % 400 {
            let x = next();
            b.push(match x % 4 {
                0 => 0xff, // (long varints)
                1 => 0,
                _ => (x >> 8) as u8,
            });
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        let mut index = Index::default();
        let mut dead = Wastes::new();
        assert!(Store::load_hint(&b, id, &mut index, &mut dead).is_none() || round % 7 == 0);
    }
    let s = Store::open(d.path(), opts()).unwrap();
    assert_eq!(s.len(), 2000);
}

#[test]
fn hint_files_of_every_version_are_read() {
    // version 3 (what compaction writes now: varints, offsets implied — here, with
    // 2-4 byte keys, under 0.7 of version 1's size) and versions 1 and 2 (older
    // uringkit's, made here from the segment's records): the store opens from them,
    // with every value
    let d = tempfile::tempdir().unwrap();
    let ids = compacted_store(d.path());
    let hinted: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|id| d.path().join(hint_name(*id)).exists())
        .collect();
    assert!(!hinted.is_empty());
    let v3: Vec<Vec<u8>> = hinted
        .iter()
        .map(|id| fs::read(d.path().join(hint_name(*id))).unwrap())
        .collect();
    assert!(v3.iter().all(|h| &h[..4] == b"XVH3"));
    for magic in [b"XVH3", b"XVH1", b"XVH2"] {
        if magic != b"XVH3" {
            for id in &hinted {
                let data = fs::read(d.path().join(seg_name(*id))).unwrap();
                let mut b = magic.to_vec();
                b.extend_from_slice(&(data.len() as u64).to_le_bytes());
                let mut n = 0u32;
                let mut body = Vec::new();
                let mut off = 0;
                while let Ok(h) = record::parse_header(&data[off..]) {
                    let key = &data[off + HEADER..off + HEADER + h.key_len as usize];
                    body.extend_from_slice(&h.key_len.to_le_bytes());
                    body.extend_from_slice(&h.val_len.to_le_bytes());
                    body.extend_from_slice(&(off as u64).to_le_bytes());
                    body.extend_from_slice(&h.seq.to_le_bytes());
                    body.extend_from_slice(key);
                    n += 1;
                    off += h.total();
                }
                b.extend_from_slice(&n.to_le_bytes());
                b.extend_from_slice(&body);
                let crc = crc32c::crc32c(&b);
                b.extend_from_slice(&crc.to_le_bytes());
                if magic == b"XVH1" {
                    let v1 = b.len();
                    let v3 = fs::metadata(d.path().join(hint_name(*id))).unwrap().len();
                    assert!(v3 as usize * 10 < v1 * 7, "v3 {v3} bytes, v1 {v1}");
                }
                fs::write(d.path().join(hint_name(*id)), b).unwrap();
            }
        }
        let _ = fs::remove_file(d.path().join(snapshot::FILE));
        let s = Store::open(d.path(), opts()).unwrap();
        assert_eq!(s.recovery.from_hints as usize, hinted.len(), "{magic:?}");
        assert_eq!(s.len(), 2000);
        for i in 0..2000u32 {
            let v = s.get(format!("k{i}").as_bytes()).unwrap().unwrap();
            assert_eq!(v, format!("v{i:039}").into_bytes());
        }
        assert!(s.check().unwrap().1.is_empty());
    }
    // a version 3 hint whose records do not add up to its segment's length (its
    // checksum made to hold) is not used: the segment is read instead
    for (id, h) in hinted.iter().zip(&v3) {
        fs::write(d.path().join(hint_name(*id)), h).unwrap();
    }
    let mut bad = v3[0].clone();
    assert_eq!(bad[17], 41, "the first entry's value length + 1");
    bad[17] = 42;
    let n = bad.len() - 4;
    let crc = crc32c::crc32c(&bad[..n]);
    bad[n..].copy_from_slice(&crc.to_le_bytes());
    fs::write(d.path().join(hint_name(hinted[0])), bad).unwrap();
    let _ = fs::remove_file(d.path().join(snapshot::FILE));
    let s = Store::open(d.path(), opts()).unwrap();
    assert_eq!(s.recovery.from_hints as usize, hinted.len() - 1);
    assert_eq!(s.len(), 2000);
    assert_eq!(
        s.get(b"k7").unwrap().unwrap(),
        format!("v{:039}", 7).into_bytes()
    );
}

/// Offsets of the records of a segment file (by their headers).
fn record_offsets(path: &Path) -> Vec<u64> {
    let data = fs::read(path).unwrap();
    let (mut off, mut out) = (0usize, Vec::new());
    while let Ok(h) = record::parse_header(&data[off..]) {
        out.push(off as u64);
        off += h.total();
    }
    out
}

/// Flip `bits` of the byte at `at` of the file at `path` (damage, in place).
fn flip(path: &Path, at: u64, bits: u8) {
    let mut data = fs::read(path).unwrap();
    data[at as usize] ^= bits;
    fs::write(path, &data).unwrap();
}

/// Write `n` records into a store at `d` opened with `o` — `key(i)` to 100 bytes of
/// `i as u8` — and close it.
fn write_closed(d: &Path, o: Options, n: u32, key: impl Fn(u32) -> Vec<u8>) {
    let s = Store::open(d, o).unwrap();
    for i in 0..n {
        s.put(&key(i), &[i as u8; 100]).unwrap();
    }
}

/// Put keys `k0`…`k{keys-1}` into `s` `rounds` times over, round `r`'s value
/// `value(r)`: every round but the last leaves only dead records behind.
fn overwrite_rounds(s: &Store, rounds: u8, keys: u32, value: impl Fn(u8) -> Vec<u8>) {
    for round in 0..rounds {
        let v = value(round);
        for i in 0..keys {
            s.put(format!("k{i}").as_bytes(), &v).unwrap();
        }
    }
}

/// Damage the `nth` record of the segment at `path`: flip `bits` of its byte at
/// `within` (from the record's start: `HEADER` and on is its key, then its value).
/// Returns every record's offset.
fn flip_in_record(path: &Path, nth: usize, within: usize, bits: u8) -> Vec<u64> {
    let offs = record_offsets(path);
    flip(path, offs[nth] + within as u64, bits);
    offs
}

/// The message of the error that opening `dir` with `o` gives (it must fail).
fn open_err(dir: &Path, o: Options) -> String {
    Store::open(dir, o)
        .err()
        .expect("the open fails")
        .to_string()
}

/// Options of a store that keeps no index snapshot.
fn no_index() -> Options {
    Options {
        index_snapshot: false,
        ..opts()
    }
}

fn repairing() -> Options {
    Options {
        repair: true,
        ..opts()
    }
}

#[test]
fn a_segment_cut_short_outside_the_store_is_an_error_unless_repair() {
    for (source, drop_index) in [("INDEX", false), ("its hint file", true)] {
        let d = tempfile::tempdir().unwrap();
        let hinted = hinted_store(d.path());
        if drop_index {
            fs::remove_file(d.path().join(snapshot::FILE)).unwrap();
        }
        // cut at a record boundary: the segment alone looks whole
        let path = d.path().join(seg_name(hinted));
        let offs = record_offsets(&path);
        let at = offs[offs.len() / 2];
        let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(at).unwrap();
        drop(f);
        let e = open_err(d.path(), opts());
        assert!(
            e.contains(&seg_name(hinted))
                && e.contains(&format!("cut short at offset {at}"))
                && e.contains(source)
                && e.contains("repair=True"),
            "{e}"
        );
        let lost = {
            let s = Store::open(d.path(), repairing()).unwrap();
            assert_eq!(s.recovery.skipped.len(), 1, "{:?}", s.recovery.skipped);
            assert!(s.recovery.skipped[0].contains("cut short"));
            assert_eq!(s.recovery.from_hints, 0);
            let lost = 2000 - s.len();
            assert!(lost > 0 && s.check().unwrap().1.is_empty());
            assert!(!d.path().join(hint_name(hinted)).exists());
            lost
        };
        // what recorded the old length is gone: the next open is a plain one
        let s = Store::open(d.path(), opts()).unwrap();
        assert!(s.recovery.skipped.is_empty());
        assert_eq!(s.len(), 2000 - lost);
    }
}

#[test]
fn a_segment_removed_outside_the_store_is_an_error_unless_repair() {
    let d = tempfile::tempdir().unwrap();
    let ids = compacted_store(d.path());
    fs::remove_file(d.path().join(seg_name(ids[1]))).unwrap();
    let _ = fs::remove_file(d.path().join(hint_name(ids[1])));
    let e = open_err(d.path(), opts());
    assert!(
        e.contains(&seg_name(ids[1])) && e.contains("missing"),
        "{e}"
    );
    let s = Store::open(d.path(), repairing()).unwrap();
    assert!(s.recovery.skipped[0].contains("missing"));
    assert!(s.len() < 2000);
}

#[test]
fn an_orphan_hint_file_is_removed() {
    // a compaction killed between writing a hint and renaming its segment in
    let d = tempfile::tempdir().unwrap();
    let ids = compacted_store(d.path());
    let next = ids.last().unwrap() + 1;
    fs::write(d.path().join(hint_name(next)), b"XVH1 whatever").unwrap();
    fs::remove_file(d.path().join(snapshot::FILE)).unwrap();
    let s = Store::open(d.path(), opts()).unwrap();
    assert!(!d.path().join(hint_name(next)).exists());
    assert_eq!(s.len(), 2000);
}

#[test]
fn repair_reads_the_records_of_hinted_segments() {
    let d = tempfile::tempdir().unwrap();
    let hinted = hinted_store(d.path());
    let offs = flip_in_record(&d.path().join(seg_name(hinted)), 3, HEADER + 2, 0x55); // its key
    fs::remove_file(d.path().join(snapshot::FILE)).unwrap();
    {
        // the hint file is trusted: the damage is found when the record is read
        let s = Store::open(d.path(), opts()).unwrap();
        assert!(s.recovery.from_hints > 0);
        assert_eq!(s.check().unwrap().1.len(), 1);
    }
    fs::remove_file(d.path().join(snapshot::FILE)).unwrap();
    {
        let s = Store::open(d.path(), repairing()).unwrap();
        assert_eq!(s.recovery.from_hints, 0);
        assert_eq!(s.recovery.skipped.len(), 1, "{:?}", s.recovery.skipped);
        assert!(s.recovery.skipped[0].contains(&format!("offset {}", offs[3])));
        assert_eq!(s.check().unwrap(), (1999, vec![]));
        // the hint that listed the skipped record is gone with it
        assert!(!d.path().join(hint_name(hinted)).exists());
    }
    let s = Store::open(d.path(), opts()).unwrap();
    assert_eq!(s.check().unwrap(), (1999, vec![]));
}

#[test]
fn damage_below_what_index_recorded_is_not_a_torn_tail() {
    // the newest segment: a bad record followed by records INDEX saw synced is
    // damage (an error, or skipped by repair), not a tail cut back with a warning
    let d = tempfile::tempdir().unwrap();
    let ids = compacted_store(d.path());
    let newest = *ids.last().unwrap();
    let offs = flip_in_record(&d.path().join(seg_name(newest)), 5, HEADER + 1, 0x55);
    assert!(offs.len() > 20);
    let e = open_err(d.path(), no_index());
    assert!(
        e.contains(&seg_name(newest)) && e.contains(&format!("offset {}", offs[5])),
        "{e}"
    );
    let s = Store::open(d.path(), repairing()).unwrap();
    assert_eq!(s.recovery.torn_bytes, 0);
    assert_eq!(s.recovery.skipped.len(), 1);
    assert_eq!(s.len(), 1999, "only the damaged record is lost");
}

#[test]
fn damage_a_later_record_says_was_synced_is_not_a_torn_tail() {
    // no INDEX to say how far the newest segment was synced: the durable marks of
    // the records after the damage do
    let d = tempfile::tempdir().unwrap();
    write_closed(d.path(), no_index(), 20, |i| vec![b'k', i as u8]);
    let header_only = fs::metadata(d.path().join(snapshot::FILE)).unwrap().len();
    assert!(
        header_only < 512,
        "INDEX holds the segments only: {header_only}"
    );
    // (gone, as when the writer is killed after it reopened the store: then nothing
    // but the marks says how far the segment was synced)
    snapshot::remove(d.path()).unwrap();
    let offs = flip_in_record(&d.path().join(seg_name(1)), 5, HEADER + 3, 0x10);
    let e = Store::open(d.path(), no_index()).err().unwrap().to_string();
    assert!(
        e.contains(&format!("offset {}", offs[5])) && e.contains("not a torn tail"),
        "{e}"
    );
    let s = Store::open(
        d.path(),
        Options {
            repair: true,
            ..no_index()
        },
    )
    .unwrap();
    assert_eq!(s.recovery.torn_bytes, 0);
    assert_eq!(s.len(), 19, "only the damaged record is lost");
    drop(s);
    // a torn tail is still one: records that were never synced say nothing
    let d = tempfile::tempdir().unwrap();
    let unsynced = Options {
        durability: Durability::None,
        ..no_index()
    };
    let s = Store::open(d.path(), unsynced.clone()).unwrap();
    s.put(b"first", b"1").unwrap();
    s.sync().unwrap();
    for i in 0..10u8 {
        s.put(&[b'u', i], &[i; 100]).unwrap();
    }
    drop(s);
    snapshot::remove(d.path()).unwrap();
    flip_in_record(&d.path().join(seg_name(1)), 3, HEADER + 3, 0x10);
    let s = Store::open(d.path(), unsynced).unwrap();
    assert!(s.recovery.torn_bytes > 0);
    assert_eq!(s.len(), 3, "cut back to the last record before the tear");
}

/// Options of a `durability="none"` store that keeps no index snapshot.
fn unsynced_rolled() -> Options {
    Options {
        durability: Durability::None,
        ..no_index()
    }
}

/// The key of put `i` of [`write_rolled`].
fn rolled_key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

/// 3000 puts of 40-byte values into a new store at `d` (rolling over 4 segments or
/// more), `sync()` after put `sync_at` if given; closed, and its INDEX removed: the
/// next open replays every segment.
fn write_rolled(d: &Path, o: &Options, sync_at: Option<u32>) {
    let s = Store::open(d, o.clone()).unwrap();
    for i in 0..3000u32 {
        s.put(&rolled_key(i), &[i as u8; 40]).unwrap();
        if sync_at == Some(i) {
            s.sync().unwrap();
        }
    }
    assert!(s.state.read().unwrap().segs.len() >= 4);
    drop(s);
    snapshot::remove(d).unwrap();
}

/// `s` holds the first `kept` puts of [`write_rolled`] and none after them (a point in
/// time), every record sound.
fn assert_kept_first(s: &Store, kept: u32, what: &str) {
    assert_eq!(s.len(), kept as usize, "{what}");
    assert!(
        (0..kept).all(|i| s.get(&rolled_key(i)).unwrap().is_some()),
        "{what}"
    );
    assert!(
        (kept..3000).all(|i| s.get(&rolled_key(i)).unwrap().is_none()),
        "{what}"
    );
    assert_eq!(s.check().unwrap().1.len(), 0, "{what}");
}

#[test]
fn a_torn_older_segment_of_an_unsynced_store_cuts_the_log_there() {
    // durability="none": a crash of the machine may tear a segment the log has moved
    // on from (nothing synced it) and keep pages of the ones after it. The open cuts
    // the log at the tear and empties the later segments: the store as it was then.
    let d = tempfile::tempdir().unwrap();
    write_rolled(d.path(), &unsynced_rolled(), None);
    let offs = flip_in_record(&d.path().join(seg_name(2)), 10, HEADER + 3, 0x10);
    let first_of_2 = record_offsets(&d.path().join(seg_name(1))).len() as u32;
    let s = Store::open(d.path(), unsynced_rolled()).unwrap();
    let (cut, emptied) = s.recovery.unsynced_cut.clone().expect("the log was cut");
    assert!(cut.ends_with(&seg_name(2)), "{cut}");
    assert!(emptied >= 2, "{emptied}");
    // everything before the tear, nothing after it: a point in time (segment 2's
    // records before it: its seal record, then 9 puts)
    let kept = first_of_2 + 9;
    assert_kept_first(&s, kept, "torn");
    // the cut was made on disk: the next open finds a whole log
    drop(s);
    let later = seg_name(3);
    assert_eq!(fs::metadata(d.path().join(&later)).unwrap().len(), 0);
    assert_eq!(
        fs::metadata(d.path().join(seg_name(2))).unwrap().len(),
        offs[10]
    );
    snapshot::remove(d.path()).unwrap();
    let s = Store::open(d.path(), unsynced_rolled()).unwrap();
    assert!(s.recovery.unsynced_cut.is_none() && s.recovery.torn_bytes == 0);
    assert_eq!(s.len(), kept as usize);
    drop(s);
    // a later record that says segment 2 was synced: its damage is damage (a sync
    // after segment 2 was sealed synced it whole, and the records after it say so)
    let d = tempfile::tempdir().unwrap();
    write_rolled(d.path(), &unsynced_rolled(), Some(2990));
    flip_in_record(&d.path().join(seg_name(2)), 10, HEADER + 3, 0x10);
    let e = open_err(d.path(), unsynced_rolled());
    assert!(
        e.contains("not a torn tail") && e.contains("says it was synced"),
        "{e}"
    );
}

#[test]
fn an_older_segment_short_of_its_seal_record_ends_the_log_there() {
    // durability="none": a crash of the machine may lose the last pages of a segment
    // the log has moved on from — they read as zeros, or the file comes back shorter —
    // and keep the segments after it. Nothing in the segment itself tells; the seal
    // record starting the next one does (how long it was sealed): the open cuts the log
    // where the records stop and empties the later segments, a point in time.
    let seg2 = |d: &Path| d.join(seg_name(2));
    // the seal record of segment 3 says how long segment 2 was
    let d = tempfile::tempdir().unwrap();
    write_rolled(d.path(), &unsynced_rolled(), None);
    let len2 = fs::metadata(seg2(d.path())).unwrap().len();
    let head = fs::read(d.path().join(seg_name(3))).unwrap();
    assert_eq!(record::parse_seal(&head), Some((2, len2)));
    let first_of_2 = record_offsets(&d.path().join(seg_name(1))).len() as u32;
    let offs = record_offsets(&seg2(d.path()));
    let lose = [
        // the last pages read as zeros (never written back)
        ("zeros", offs.len() - 7),
        // the file's size at a record boundary (the size never made durable)
        ("shorter", offs.len() - 3),
        // all of it (the file came back empty): record 0 is the seal record of its own
        ("empty", 1),
    ];
    for (how, n) in lose {
        let d = tempfile::tempdir().unwrap();
        write_rolled(d.path(), &unsynced_rolled(), None);
        let at = if how == "empty" { 0 } else { offs[n] };
        let f = fs::OpenOptions::new()
            .write(true)
            .open(seg2(d.path()))
            .unwrap();
        match how {
            "zeros" => f
                .write_all_at(&vec![0u8; (len2 - at) as usize], at)
                .unwrap(),
            _ => f.set_len(at).unwrap(),
        }
        drop(f);
        let s = Store::open(d.path(), unsynced_rolled()).unwrap();
        let (cut, _) = s.recovery.unsynced_cut.clone().expect(how);
        assert!(cut.ends_with(&seg_name(2)), "{how}: {cut}");
        // (record 0 of segment 2 is its seal record: record n is its put n - 1)
        let kept = first_of_2 + n as u32 - 1;
        assert_kept_first(&s, kept, how);
        drop(s);
        let later = fs::metadata(d.path().join(seg_name(3))).unwrap().len();
        assert_eq!(later, 0, "{how}: the later segments were emptied");
        snapshot::remove(d.path()).unwrap();
        let s = Store::open(d.path(), unsynced_rolled()).unwrap();
        assert!(
            s.recovery.unsynced_cut.is_none(),
            "{how}: the cut was made on disk"
        );
        assert_eq!(s.len(), kept as usize);
    }
    // the roll's cut of the zeros allocated ahead, undone by a crash: zeros past the
    // sealed length are not a loss
    let d = tempfile::tempdir().unwrap();
    write_rolled(d.path(), &unsynced_rolled(), None);
    let f = fs::OpenOptions::new()
        .write(true)
        .open(seg2(d.path()))
        .unwrap();
    f.set_len(len2 + 8192).unwrap();
    drop(f);
    let s = Store::open(d.path(), unsynced_rolled()).unwrap();
    assert!(s.recovery.unsynced_cut.is_none() && s.recovery.skipped.is_empty());
    assert_eq!(s.len(), 3000);
    drop(s);
    // durability="sync": the roll synced segment 2 first and the seal record says so —
    // its tail gone is damage, named, and repair=True goes on without it
    let synced = Options {
        durability: Durability::Sync,
        ..no_index()
    };
    let d = tempfile::tempdir().unwrap();
    write_rolled(d.path(), &synced, None);
    let f = fs::OpenOptions::new()
        .write(true)
        .open(seg2(d.path()))
        .unwrap();
    f.set_len(offs[offs.len() - 3]).unwrap();
    drop(f);
    let e = open_err(d.path(), synced.clone());
    assert!(
        e.contains(&seg_name(2)) && e.contains("sealed at") && e.contains("repair=True"),
        "{e}"
    );
    let s = Store::open(
        d.path(),
        Options {
            repair: true,
            ..synced
        },
    )
    .unwrap();
    assert!(s.recovery.skipped.iter().any(|m| m.contains("bytes lost")));
    assert_eq!(s.len(), 3000 - 3, "the three puts lost, and only them");
}

#[test]
fn a_store_without_snapshots_still_finds_segments_cut_or_removed() {
    let d = tempfile::tempdir().unwrap();
    write_closed(d.path(), no_index(), 3000, |i| i.to_le_bytes().to_vec());
    let ids: Vec<u32> = Store::list_dir(d.path())
        .unwrap()
        .iter()
        .filter_map(|n| n.strip_suffix(".seg")?.parse().ok())
        .collect();
    assert!(ids.len() > 3);
    // both ways of opening read the list; the index itself comes from the segments
    for o in [no_index(), opts()] {
        let s = Store::open(d.path(), o).unwrap();
        assert!(!s.recovery.from_snapshot);
        assert_eq!(s.len(), 3000);
    }
    let s = Store::open(d.path(), no_index()).unwrap();
    drop(s);
    for remove in [false, true] {
        let c = copy_without_lock(d.path());
        let seg = c.path().join(seg_name(2));
        match remove {
            true => fs::remove_file(&seg).unwrap(),
            false => {
                let f = fs::OpenOptions::new().write(true).open(&seg).unwrap();
                let offs = record_offsets(&seg);
                f.set_len(offs[offs.len() / 2]).unwrap();
            }
        }
        let e = Store::open(c.path(), no_index()).err().unwrap();
        let e = e.to_string();
        assert!(
            e.contains(&seg_name(2)) && e.contains("INDEX recorded"),
            "{e}"
        );
        let s = Store::open(
            c.path(),
            Options {
                repair: true,
                ..no_index()
            },
        )
        .unwrap();
        assert!(s.len() < 3000 && !s.recovery.skipped.is_empty());
    }
}

#[test]
fn a_read_only_open_leaves_the_directory_as_it_is() {
    let d = tempfile::tempdir().unwrap();
    let ids = compacted_store(d.path());
    // as a live writer's compaction leaves it midway: an output being written, a
    // hint written before its segment's rename, a commit marker not yet acted on
    let retired = ids[0];
    fs::write(d.path().join("00000999.seg.tmp"), b"partial").unwrap();
    fs::write(d.path().join(hint_name(998)), b"hint").unwrap();
    fs::write(d.path().join(COMPACT_MARKER), format!("{retired}\n")).unwrap();
    snapshot::remove(d.path()).unwrap(); // (compaction removes it before it starts)
    let listing = |d: &Path| {
        let mut v: Vec<(String, u64)> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| {
                (
                    e.file_name().into_string().unwrap(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = listing(d.path());
    let ro = Options {
        read_only: true,
        ..opts()
    };
    let s = Store::open(d.path(), ro.clone()).unwrap();
    assert!(!s.is_empty() && s.get(b"nope").unwrap().is_none());
    // the retired segment is left out, not deleted
    assert!(!s.state.read().unwrap().segs.contains_key(&retired));
    let e = s.put(b"k", b"v").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    drop(s);
    assert_eq!(listing(d.path()), before);
    // the writer's open does the cleanup
    drop(Store::open(d.path(), opts()).unwrap());
    let after: Vec<String> = listing(d.path()).into_iter().map(|e| e.0).collect();
    assert!(!after.contains(&seg_name(retired)) && !after.contains(&hint_name(998)));
    assert!(!after
        .iter()
        .any(|n| n.ends_with(".tmp") || n == COMPACT_MARKER));
}

#[test]
fn auto_compaction_runs_in_the_background_when_dead_bytes_pass_the_trigger() {
    let d = tempfile::tempdir().unwrap();
    let trigger = AutoCompact {
        ratio: 0.5,
        min_bytes: 100 << 10,
    };
    let o = Options {
        durability: Durability::None,
        auto_compact: Some(trigger),
        ..opts()
    };
    let s = Arc::new(Store::open(d.path(), o.clone()).unwrap());
    Store::start_background(&s);
    let auto = |s: &Store| {
        let st: BTreeMap<String, u64> = s.stats().into_iter().collect();
        (st["auto_compactions"], st["auto_compact_failures"])
    };
    // 300 keys, each rewritten 40 times (~16 KiB of live data, ~650 KiB written)
    overwrite_rounds(&s, 40, 300, |r| vec![r; 50]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while auto(&s).0 == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(auto(&s).1, 0);
    assert!(auto(&s).0 >= 1, "no background compaction");
    // what it retired is gone from the disk
    let st: BTreeMap<String, u64> = s.stats().into_iter().collect();
    // (a compaction retires at least `min_bytes` of dead records)
    let written: u64 = (0..300u32)
        .map(|i| 40 * (HEADER + format!("k{i}").len() + 50) as u64)
        .sum();
    assert!(st["bytes_on_disk"] <= written - (100 << 10), "{st:?}");
    for i in 0..300u32 {
        assert_eq!(
            s.get(format!("k{i}").as_bytes()).unwrap(),
            Some(vec![39; 50])
        );
    }
    // a running compaction is waited for: the store closes (and reopens) whole
    while Arc::strong_count(&s) > 1 {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(s);
    let r = Store::open(d.path(), o).unwrap();
    assert_eq!(r.len(), 300);
    assert!(r.check().unwrap().1.is_empty());
}

/// The statistic `name` of store `s`.
fn stat(s: &Store, name: &str) -> u64 {
    s.stats().into_iter().find(|(k, _)| k == name).unwrap().1
}

/// Non-durable options whose background compaction triggers at half dead and
/// `min_bytes`.
fn auto_opts(min_bytes: u64) -> Options {
    Options {
        durability: Durability::None,
        auto_compact: Some(AutoCompact {
            ratio: 0.5,
            min_bytes,
        }),
        ..opts()
    }
}

/// Segment ids of store `s` (the active one apart).
fn sealed_ids(s: &Store) -> Vec<u32> {
    let st = s.state.read().unwrap();
    st.segs
        .keys()
        .copied()
        .filter(|&i| i != st.active)
        .collect()
}

#[test]
fn a_compaction_of_some_segments_carries_the_tombstones_in_force() {
    let d = tempfile::tempdir().unwrap();
    let key = |p: &str, i: u32| format!("{p}{i}").into_bytes();
    let val = |i: u32| format!("{i:0100}").into_bytes();
    let check = |s: &Store| {
        for i in 0..50 {
            assert_eq!(s.get(&key("c", i)).unwrap(), None, "c{i} came back");
        }
        for i in 50..999 {
            assert_eq!(s.get(&key("c", i)).unwrap(), Some(val(i)));
        }
        assert_eq!(s.get(b"c999").unwrap().unwrap(), b"back");
        for i in 0..20 {
            assert_eq!(s.get(&key("h", i)).unwrap(), Some(vec![39; 100]));
        }
    };
    let tombs = {
        let s = Store::open(d.path(), opts()).unwrap();
        // cold values filling segments 1 and 2, then tombstones for some of segment
        // 1's, one key deleted and written again, and overwrites filling more
        for i in 0..1000 {
            s.put(&key("c", i), &val(i)).unwrap();
        }
        for i in 0..50 {
            s.delete(&key("c", i)).unwrap();
        }
        s.delete(b"c999").unwrap();
        s.put(b"c999", b"back").unwrap();
        for round in 0..40u8 {
            for i in 0..20 {
                s.put(&key("h", i), &[round; 100]).unwrap();
            }
        }
        let sealed = sealed_ids(&s);
        assert!(sealed.len() >= 3 && sealed[0] == 1, "{sealed:?}");
        let only = &sealed[1..];
        let (n, freed) = s.compact_locked(Some(only)).unwrap();
        assert!(n == only.len() && freed > 0, "{n} {freed}");
        assert_eq!(sealed_ids(&s)[0], 1, "segment 1 is left alone");
        assert!(stat(&s, "tombstone_bytes") >= 50 * (HEADER as u64 + 2));
        check(&s);
        stat(&s, "tombstone_bytes")
    };
    // INDEX keeps each segment's tombstone count
    let s = Store::open(d.path(), opts()).unwrap();
    assert!(s.recovery.from_snapshot);
    assert_eq!(stat(&s, "tombstone_bytes"), tombs);
    drop(s);
    // Opened from hint files and records alone, and by repair's scan of every
    // record: the copied tombstones still hide segment 1's old values.
    for repair in [false, true] {
        let _ = fs::remove_file(d.path().join(snapshot::FILE));
        let o = Options { repair, ..opts() };
        let s = Store::open(d.path(), o).unwrap();
        assert!(repair || s.recovery.from_hints > 0);
        check(&s);
    }
    let hints: Vec<Vec<u8>> = Store::list_dir(d.path())
        .unwrap()
        .iter()
        .filter(|n| n.ends_with(".hint"))
        .map(|n| fs::read(d.path().join(n)).unwrap()[..4].to_vec())
        .collect();
    assert!(hints.iter().all(|m| m == b"XVH3"), "version 3 hint files");
    // compacting every segment drops the tombstones
    let s = Store::open(d.path(), opts()).unwrap();
    s.compact().unwrap();
    assert_eq!(stat(&s, "tombstone_bytes"), 0);
    check(&s);
    drop(s);
    fs::remove_file(d.path().join(snapshot::FILE)).unwrap();
    check(&Store::open(d.path(), opts()).unwrap());
}

#[test]
fn random_writes_with_partial_compactions_match_a_model() {
    // Puts and deletes over a key space with a cold half (written once, some of it
    // deleted later) and a hot half, compacting a random choice of sealed segments
    // every so often: the store must agree with a plain map all along, and after
    // reopens that rebuild the index from INDEX, from hints and records, and from
    // records alone.
    let d = tempfile::tempdir().unwrap();
    let mut next = crate::kv::table::tests::xorshift(0x9E37_79B9_7F4A_7C15);
    let mut rnd = |n: u64| next() % n;
    let key = |i: u64| format!("key{i}").into_bytes();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let agree = |s: &Store, model: &BTreeMap<Vec<u8>, Vec<u8>>| {
        assert_eq!(s.len(), model.len());
        for i in 0..2000 {
            assert_eq!(
                s.get(&key(i)).unwrap().as_ref(),
                model.get(&key(i)),
                "key{i}"
            );
        }
    };
    let o = Options {
        durability: Durability::None,
        ..opts()
    };
    {
        let s = Store::open(d.path(), o.clone()).unwrap();
        for i in 0..1000 {
            let v = format!("cold{i:060}").into_bytes();
            s.put(&key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        for step in 0..30_000u64 {
            let i = match rnd(10) {
                0 => rnd(1000),
                _ => 1000 + rnd(1000),
            };
            if rnd(4) == 0 {
                s.delete(&key(i)).unwrap();
                model.remove(&key(i));
            } else {
                let v = format!("{step}-{}", "x".repeat(rnd(80) as usize)).into_bytes();
                s.put(&key(i), &v).unwrap();
                model.insert(key(i), v);
            }
            if step % 2500 == 2499 {
                let sealed = sealed_ids(&s);
                let some: Vec<u32> = sealed.into_iter().filter(|_| rnd(2) == 0).collect();
                s.compact_locked(Some(&some)).unwrap();
                agree(&s, &model);
            }
        }
        agree(&s, &model);
    }
    for (no_index, repair) in [(false, false), (true, false), (true, true)] {
        if no_index {
            let _ = fs::remove_file(d.path().join(snapshot::FILE));
        }
        let o = Options {
            repair,
            ..o.clone()
        };
        agree(&Store::open(d.path(), o).unwrap(), &model);
    }
}

#[test]
fn tombstones_of_a_queue_do_not_pile_up() {
    // Keys written once and deleted soon after: the segments are mostly dead, and
    // each compaction of some of them copies the deletes' tombstones on. Once those
    // pass the trigger against the live bytes, a compaction of every segment drops
    // them.
    let d = tempfile::tempdir().unwrap();
    let o = auto_opts(16 << 10);
    let s = Store::open(d.path(), o).unwrap();
    let stat = |name: &str| stat(&s, name);
    let (mut most, mut whole) = (0, 0);
    for i in 0..40_000u32 {
        s.put(format!("q{i:08}").as_bytes(), &[7; 100]).unwrap();
        if i >= 10 {
            s.delete(format!("q{:08}", i - 10).as_bytes()).unwrap();
        }
        if i % 500 == 0 {
            // (what the background thread would do, here in step with the writes)
            if let Some(plan) = s.compaction_plan() {
                whole += plan.is_none() as u32;
                s.compact_locked(plan.as_deref()).unwrap();
            }
            most = most.max(stat("tombstone_bytes"));
        }
    }
    // (~1.5 MB of tombstones written in all; without the rule, all of them stayed)
    assert!(whole > 0 && stat("compactions") > 5);
    assert!(most < 300 << 10, "tombstones piled up to {most} bytes");
    assert_eq!(s.len(), 10);
}

#[test]
fn auto_compaction_rewrites_the_fragmented_segments_only() {
    let d = tempfile::tempdir().unwrap();
    let o = auto_opts(1);
    let val = |i: u32| format!("{i:0100}").into_bytes();
    let s = Arc::new(Store::open(d.path(), o.clone()).unwrap());
    Store::start_background(&s);
    for i in 0..1000u32 {
        s.put(format!("c{i}").as_bytes(), &val(i)).unwrap();
    }
    let cold = sealed_ids(&s);
    assert_eq!(cold, [1, 2]);
    let cold_bytes: u64 = cold
        .iter()
        .map(|i| fs::metadata(d.path().join(seg_name(*i))).unwrap().len())
        .sum();
    let stat = |name: &str| stat(&s, name);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut round = 0u32;
    while (stat("auto_compactions") < 3 || round < 100) && Instant::now() < deadline {
        for i in 0..20u32 {
            s.put(format!("h{i}").as_bytes(), &round.to_le_bytes().repeat(25))
                .unwrap();
        }
        round += 1;
    }
    assert!(stat("auto_compactions") >= 3);
    // the cold segments are never copied: each compaction took the overwritten ones
    // (and the cold tail of segment 3, and the small outputs of those before)
    let sealed = sealed_ids(&s);
    assert_eq!(sealed[..2], [1, 2], "{sealed:?}");
    assert!(
        stat("compacted_bytes") < cold_bytes,
        "{}",
        stat("compacted_bytes")
    );
    let last = (round - 1).to_le_bytes().repeat(25);
    let verify = |s: &Store| {
        for i in 0..1000u32 {
            assert_eq!(s.get(format!("c{i}").as_bytes()).unwrap(), Some(val(i)));
        }
        for i in 0..20u32 {
            assert_eq!(
                s.get(format!("h{i}").as_bytes()).unwrap(),
                Some(last.clone())
            );
        }
    };
    verify(&s);
    while Arc::strong_count(&s) > 1 {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(s);
    fs::remove_file(d.path().join(snapshot::FILE)).unwrap();
    verify(&Store::open(d.path(), o).unwrap());
}

#[test]
fn concurrent_writes_of_a_key_reopen_as_they_were_served() {
    // Eight threads put (even ones) or delete (odd ones) the same keys at the same
    // time, durably; whichever came last, the next open must agree with what the
    // store served (it replays by sequence number: the log's order must be it).
    // Before sequence numbers were taken under the commit lock, 1 key in 3,000
    // differed in 2 runs of 3.
    let d = tempfile::tempdir().unwrap();
    let o = opts();
    let s = Arc::new(Store::open(d.path(), o.clone()).unwrap());
    let keys: Vec<Vec<u8>> = (0..3000u32).map(|i| format!("k{i}").into_bytes()).collect();
    let keys = Arc::new(keys);
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let (s, keys) = (s.clone(), keys.clone());
            std::thread::spawn(move || {
                for k in keys.iter() {
                    match t % 2 {
                        0 => s.put(k, &[t; 10]).unwrap(),
                        _ => {
                            s.delete(k).unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let served: Vec<_> = keys.iter().map(|k| s.get(k).unwrap()).collect();
    drop(s);
    fs::remove_file(d.path().join(snapshot::FILE)).unwrap();
    let r = Store::open(d.path(), o).unwrap();
    let differ: Vec<&[u8]> = keys
        .iter()
        .zip(&served)
        .filter(|(k, v)| r.get(k).unwrap() != **v)
        .map(|(k, _)| &k[..])
        .collect();
    assert!(differ.is_empty(), "{differ:?}");
}

#[test]
fn no_auto_compaction_below_the_trigger_or_when_turned_off() {
    for (auto, rounds) in [
        (None, 40u8),
        (
            Some(AutoCompact {
                ratio: 0.1,
                min_bytes: 10 << 20, // (more than is ever written)
            }),
            40,
        ),
    ] {
        let d = tempfile::tempdir().unwrap();
        let o = Options {
            durability: Durability::None,
            auto_compact: auto,
            ..opts()
        };
        let s = Arc::new(Store::open(d.path(), o).unwrap());
        Store::start_background(&s);
        overwrite_rounds(&s, rounds, 300, |r| vec![r; 50]);
        std::thread::sleep(Duration::from_millis(100));
        let st: BTreeMap<String, u64> = s.stats().into_iter().collect();
        assert_eq!(st["auto_compactions"], 0, "{auto:?}");
        assert!(st["segments"] > 8, "{auto:?}");
    }
}

#[test]
fn a_read_only_store_refreshes_to_follow_the_writer() {
    let d = tempfile::tempdir().unwrap();
    let w = Store::open(d.path(), opts()).unwrap();
    for i in 0..100u32 {
        w.put(format!("k{i}").as_bytes(), &[i as u8; 300]).unwrap();
    }
    let ro = Options {
        read_only: true,
        ..opts()
    };
    let r = Store::open(d.path(), ro.clone()).unwrap();
    assert_eq!(r.len(), 100);
    // the writer's open cannot refresh
    let Err(e) = w.refresh() else {
        panic!("a writer refreshed")
    };
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    // nothing new: nothing read
    let Refresh::InPlace(n) = r.refresh().unwrap() else {
        panic!("reopened with nothing new")
    };
    assert_eq!(n, Refreshed::default());
    // puts that roll over to new segments (64 KiB each), deletes, a batch
    for i in 100..1000u32 {
        w.put(format!("k{i}").as_bytes(), &[i as u8; 300]).unwrap();
    }
    for i in (0..1000u32).step_by(7) {
        w.delete(format!("k{i}").as_bytes()).unwrap();
    }
    w.batch(&[(b"b1", Some(b"x")), (b"b2", Some(b"y")), (b"k1", None)])
        .unwrap();
    let before = r.state.read().unwrap().active;
    assert_eq!(r.len(), 100); // (as at its open until refreshed)
    let Refresh::InPlace(n) = r.refresh().unwrap() else {
        panic!("reopened without a compaction")
    };
    assert!(n.segments >= 3 && n.records > 1000, "{n:?}");
    assert!(r.state.read().unwrap().active > before);
    assert_eq!(r.len(), w.len());
    for i in 0..1000u32 {
        let want = (i % 7 != 0 && i != 1).then(|| vec![i as u8; 300]);
        assert_eq!(r.get(format!("k{i}").as_bytes()).unwrap(), want, "k{i}");
    }
    assert_eq!(r.get(b"b2").unwrap().as_deref(), Some(&b"y"[..]));
    assert!(r.check().unwrap().1.is_empty());
    // a compaction cannot be followed in place: the store is opened again
    w.compact().unwrap();
    w.put(b"after", b"compaction").unwrap();
    let Refresh::Reopened(r2) = r.refresh().unwrap() else {
        panic!("followed a compaction in place")
    };
    assert_eq!(r2.len(), w.len());
    assert_eq!(
        r2.get(b"after").unwrap().as_deref(),
        Some(&b"compaction"[..])
    );
    // (the old one still reads what it saw: its files stay open)
    assert_eq!(r.get(b"b1").unwrap().as_deref(), Some(&b"x"[..]));
    // a refresh of the new one goes on in place
    w.put(b"later", b"1").unwrap();
    assert!(matches!(r2.refresh().unwrap(), Refresh::InPlace(n) if n.records == 1));
    assert_eq!(r2.get(b"later").unwrap().as_deref(), Some(&b"1"[..]));
}

#[test]
fn a_refresh_takes_in_a_record_or_a_batch_once_it_is_whole() {
    let d = tempfile::tempdir().unwrap();
    let w = Store::open(d.path(), opts()).unwrap();
    w.put(b"a", b"1").unwrap();
    let active = w.state.read().unwrap().active;
    drop(w); // (its close cuts the segment to its records)
    let seg = d.path().join(seg_name(active));
    let append = |b: &[u8]| {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&seg).unwrap();
        f.write_all(b).unwrap();
    };
    let r = Store::open(
        d.path(),
        Options {
            read_only: true,
            ..opts()
        },
    )
    .unwrap();
    // a record being written: half of it is there
    let mut one = Vec::new();
    record::encode(&mut one, Kind::Put, 0, 100, b"b", &[7u8; 500], 0);
    append(&one[..200]);
    let in_place = |r: &Store| match r.refresh().unwrap() {
        Refresh::InPlace(n) => n,
        Refresh::Reopened(_) => panic!("reopened"),
    };
    assert_eq!(in_place(&r).records, 0);
    assert_eq!(r.get(b"b").unwrap(), None);
    append(&one[200..]);
    assert_eq!(in_place(&r).records, 1);
    assert_eq!(r.get(b"b").unwrap(), Some(vec![7u8; 500]));
    // a batch: its members are not seen before its COMMIT
    let mut batch = Vec::new();
    record::encode(&mut batch, Kind::Put, FLAG_BATCH, 101, b"c", b"3", 0);
    record::encode(&mut batch, Kind::Delete, FLAG_BATCH, 101, b"a", b"", 0);
    append(&batch);
    in_place(&r);
    assert_eq!((r.get(b"c").unwrap(), r.len()), (None, 2));
    let mut commit = Vec::new();
    record::encode_commit(&mut commit, 101, 2, 0);
    append(&commit);
    assert_eq!(in_place(&r).records, 3); // (the members are read again)
    assert_eq!(r.get(b"c").unwrap().as_deref(), Some(&b"3"[..]));
    assert_eq!((r.get(b"a").unwrap(), r.len()), (None, 2));
    // damage followed by a record that says it lies in synced bytes: an error
    let end = fs::metadata(&seg).unwrap().len();
    let mut bad = Vec::new();
    record::encode(&mut bad, Kind::Put, 0, 102, b"d", b"4", 0);
    bad[10] ^= 0x40;
    record::encode(
        &mut bad,
        Kind::Put,
        0,
        103,
        b"e",
        b"5",
        record::mark(active, end + 60),
    );
    append(&bad);
    let Err(e) = r.refresh() else {
        panic!("damage taken for a record being written")
    };
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains(&format!("offset {end}")), "{e}");
}

#[test]
fn a_checkpoint_links_what_is_sealed_and_copies_the_rest() {
    let d = tempfile::tempdir().unwrap();
    let ids = compacted_store(d.path());
    let s = Store::open(d.path(), opts()).unwrap();
    s.put(b"fresh", b"1").unwrap();
    let dest = d.path().join("cp");
    let (n, linked, copied) = s.checkpoint(&dest).unwrap();
    assert_eq!(n, s.state.read().unwrap().segs.len());
    assert!(linked > 0 && copied > 0);
    let e = s.checkpoint(&dest).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    s.put(b"later", b"2").unwrap();
    let keys = s.len();
    drop(s);
    let c = Store::open(&dest, opts()).unwrap();
    assert_eq!(c.len(), keys - 1);
    assert_eq!(c.get(b"fresh").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(c.get(b"later").unwrap(), None);
    assert!(c.check().unwrap().1.is_empty());
    // (the sealed segments are the same files: one inode, two names)
    use std::os::unix::fs::MetadataExt;
    let shared = ids
        .iter()
        .filter(|id| fs::metadata(dest.join(seg_name(**id))).is_ok_and(|m| m.nlink() == 2))
        .count();
    assert!(shared > 0);
}

#[test]
fn repair_drops_a_batch_with_a_damaged_member_whole() {
    // two batches back to back; a member of the first, then the COMMIT of the
    // second, damaged: repair keeps what is around them and neither batch in part
    for damaged in [1usize, 7] {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), opts()).unwrap();
        s.put(b"before", b"x").unwrap();
        for b in 0..2u8 {
            let keys: Vec<Vec<u8>> = (0..3u8).map(|i| vec![b'b', b, i]).collect();
            let ops: Vec<(&[u8], Option<&[u8]>)> =
                keys.iter().map(|k| (&k[..], Some(&b"v"[..]))).collect();
            s.batch(&ops).unwrap();
        }
        s.put(b"after", b"y").unwrap();
        drop(s);
        let offs = flip_in_record(&d.path().join(seg_name(1)), damaged, 20, 1);
        // before, 3 + COMMIT, 3 + COMMIT, after
        assert_eq!(offs.len(), 10);
        // (INDEX is not read, but what it recorded is the bound of what was synced)
        let e = open_err(d.path(), no_index());
        assert!(e.contains(&format!("offset {}", offs[damaged])), "{e}");
        let s = Store::open(d.path(), repairing()).unwrap();
        let mut keys = s.keys().unwrap();
        keys.sort();
        let mut kept: Vec<Vec<u8>> = match damaged {
            1 => vec![
                b"after".to_vec(),
                b"before".to_vec(),
                vec![b'b', 1, 0],
                vec![b'b', 1, 1],
                vec![b'b', 1, 2],
            ],
            _ => vec![
                b"after".to_vec(),
                b"before".to_vec(),
                vec![b'b', 0, 0],
                vec![b'b', 0, 1],
                vec![b'b', 0, 2],
            ],
        };
        kept.sort();
        assert_eq!(keys, kept, "damaged record {damaged}");
        let lost = s.recovery.skipped.join("; ");
        assert!(lost.contains("incomplete batch"), "{lost}");
    }
}

fn copy_without_lock(d: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for e in fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "LOCK" {
            fs::copy(e.path(), copy.path().join(e.file_name())).unwrap();
        }
    }
    copy
}

#[test]
fn a_compaction_leaves_an_index_for_the_next_open_after_a_kill() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), opts()).unwrap();
    overwrite_rounds(&s, 3, 1000, |r| vec![r; 60]);
    s.delete(b"k3").unwrap();
    s.compact().unwrap();
    assert!(
        d.path().join(snapshot::FILE).exists(),
        "no INDEX after compact()"
    );
    // written after it: replayed on top of it
    s.put(b"after", b"1").unwrap();
    s.delete(b"k4").unwrap();
    for i in 0..1500u32 {
        s.put(format!("n{i}").as_bytes(), &[9; 60]).unwrap(); // (rolls)
    }
    let keys = s.len();
    std::mem::forget(s); // killed: no close, no INDEX of its own
    let c = copy_without_lock(d.path());
    let r = Store::open(c.path(), opts()).unwrap();
    assert!(r.recovery.from_snapshot, "{:?}", r.recovery);
    assert_eq!(r.recovery.from_hints, 0);
    assert_eq!(r.len(), keys);
    assert_eq!(r.get(b"k5").unwrap(), Some(vec![2; 60]));
    assert_eq!(r.get(b"k3").unwrap(), None);
    assert_eq!(r.get(b"k4").unwrap(), None);
    assert_eq!(r.get(b"after").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(r.get(b"n1499").unwrap(), Some(vec![9; 60]));
    assert!(r.check().unwrap().1.is_empty());
}

#[test]
fn an_overlay_that_outgrows_its_file_goes_back_to_the_heap() {
    let o = || Options {
        durability: Durability::None,
        ..opts()
    };
    let d = tempfile::tempdir().unwrap();
    drop(Store::open(d.path(), o()).unwrap()); // (an INDEX to open from)
                                               // too many keys (merged into the table), then too many bytes of keys
    for (n, klen) in [(OVERLAY_MAX + 10, 8), (3000, 2000)] {
        let s = Store::open(d.path(), o()).unwrap();
        assert!(s.recovery.from_snapshot);
        s.put(b"first", b"1").unwrap();
        assert!(s.state.read().unwrap().index.is_shared());
        assert!(d.path().join(overlay::FILE).exists());
        for i in 0..n {
            let mut k = format!("{klen}-{i}-").into_bytes();
            k.resize(klen, b'k');
            s.put(&k, b"v").unwrap();
        }
        assert!(!s.state.read().unwrap().index.is_shared());
        assert!(!d.path().join(overlay::FILE).exists());
        let want = s.len();
        std::mem::forget(s); // killed: its successor replays from INDEX
        let copy = copy_without_lock(d.path());
        let s = Store::open(copy.path(), o()).unwrap();
        assert!(!s.recovery.from_overlay && s.recovery.records as usize > n);
        assert_eq!(s.len(), want);
        assert_eq!(s.get(b"first").unwrap().unwrap(), b"1");
        drop(s);
        // (and the next round starts over from that copy's new INDEX)
        fs::remove_dir_all(d.path()).unwrap();
        fs::create_dir(d.path()).unwrap();
        for e in fs::read_dir(copy.path()).unwrap() {
            let e = e.unwrap();
            fs::copy(e.path(), d.path().join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn a_clean_close_keeps_the_live_overlay_instead_of_rewriting_index() {
    // A store opened from INDEX whose changes fit the live overlay closes without
    // writing INDEX: the next open takes OVERLAY back (nothing replayed), session
    // after session, until the overlay joins the table and INDEX is written again.
    let d = tempfile::tempdir().unwrap();
    let (o, index) = unsynced(&d, opts());
    let o = || o.clone();
    {
        let s = Store::open(d.path(), o()).unwrap();
        for i in 0..3000u32 {
            s.put(format!("k{i}").as_bytes(), &i.to_le_bytes()).unwrap();
        }
    }
    let written = fs::read(&index).unwrap();
    for round in 0..3u32 {
        let s = Store::open(d.path(), o()).unwrap();
        assert!(s.recovery.from_snapshot);
        assert_eq!(s.recovery.from_overlay, round > 0, "round {round}");
        assert_eq!(s.recovery.records, 0);
        s.put(format!("r{round}").as_bytes(), b"new").unwrap();
        s.put(b"k5", &round.to_le_bytes()).unwrap();
        assert!(s.delete(format!("k{}", 10 + round).as_bytes()).unwrap());
        for i in 0..300u32 {
            // (enough to roll into a new segment now and then)
            s.put(format!("n{round}-{i}").as_bytes(), &[round as u8; 60])
                .unwrap();
        }
        drop(s);
        assert_eq!(fs::read(&index).unwrap(), written, "INDEX left as it was");
        assert!(d.path().join(overlay::FILE).exists());
    }
    let check = |s: &Store| {
        assert_eq!(s.len(), 3000 - 3 + 3 + 900);
        assert_eq!(s.get(b"k5").unwrap().unwrap(), 2u32.to_le_bytes());
        assert_eq!(s.get(b"k11").unwrap(), None);
        assert_eq!(s.get(b"r1").unwrap().unwrap(), b"new");
        assert_eq!(s.get(b"n0-299").unwrap().unwrap(), [0; 60]);
        assert_eq!(s.get(b"k2999").unwrap().unwrap(), 2999u32.to_le_bytes());
        assert_eq!(s.keys().unwrap().len(), s.len());
        assert!(s.check().unwrap().1.is_empty());
    };
    let s = Store::open(d.path(), o()).unwrap();
    assert!(s.recovery.from_overlay && s.recovery.records == 0);
    check(&s);
    drop(s);
    // a follower replays the records since INDEX; so does an open that cannot trust
    // the overlay (after a reboot: another boot's file) — the same store either way
    let s = Store::open(
        d.path(),
        Options {
            read_only: true,
            ..o()
        },
    )
    .unwrap();
    check(&s);
    drop(s);
    let other = copy_without_lock(d.path());
    let mut b = fs::read(other.path().join(overlay::FILE)).unwrap();
    b[16] ^= 1; // (its boot id)
    fs::write(other.path().join(overlay::FILE), b).unwrap();
    let s = Store::open(other.path(), o()).unwrap();
    assert!(!s.recovery.from_overlay && s.recovery.records >= 900);
    check(&s);
    drop(s);
    // ... or an overlay of an older layout (version 3: home slots masked, not scaled)
    let other = copy_without_lock(d.path());
    let mut b = fs::read(other.path().join(overlay::FILE)).unwrap();
    assert_eq!(&b[..5], b"XVO1\x04");
    b[4] = 3;
    fs::write(other.path().join(overlay::FILE), b).unwrap();
    let s = Store::open(other.path(), o()).unwrap();
    assert!(!s.recovery.from_overlay && s.recovery.records >= 900);
    check(&s);
    drop(s);
    // compaction drops both; the close after it writes INDEX
    let s = Store::open(d.path(), o()).unwrap();
    s.compact().unwrap();
    s.put(b"after", b"1").unwrap();
    drop(s);
    assert!(!d.path().join(overlay::FILE).exists());
    assert_ne!(fs::read(&index).unwrap(), written);
    let s = Store::open(d.path(), o()).unwrap();
    assert!(!s.recovery.from_overlay && s.recovery.records == 0);
    assert_eq!(s.len(), 3000 - 3 + 3 + 900 + 1);
}

#[test]
fn a_close_after_a_long_log_writes_index_however_few_keys_changed() {
    // ten keys rewritten over and over: a small overlay, but a long log since INDEX
    // (what an open after a reboot would replay) — past KEEP_OVERLAY_LOG (INDEX is
    // smaller than that) the close writes INDEX as before
    let d = tempfile::tempdir().unwrap();
    let big_segments = Options {
        segment_size: 256 << 20,
        ..opts()
    };
    let (o, index) = unsynced(&d, big_segments);
    let o = || o.clone();
    drop(Store::open(d.path(), o()).unwrap());
    let big = vec![7u8; 64 << 10];
    // a session of `writes` puts of `big`: whether its close kept INDEX (and OVERLAY)
    let session = |writes: usize, kept: bool| {
        let before = fs::read(&index).unwrap();
        let s = Store::open(d.path(), o()).unwrap();
        for i in 0..writes {
            s.put(format!("k{}", i % 10).as_bytes(), &big).unwrap();
        }
        drop(s);
        assert_eq!(fs::read(&index).unwrap() == before, kept, "{writes} writes");
        assert_eq!(d.path().join(overlay::FILE).exists(), kept);
    };
    let past = KEEP_OVERLAY_LOG as usize / big.len() + 10;
    session(past / 2, true);
    session(past, false);
    let s = Store::open(d.path(), o()).unwrap();
    assert!(!s.recovery.from_overlay && s.recovery.records == 0);
    assert_eq!(s.len(), 10);
    // a larger store: the log may grow about as long as INDEX before a close writes
    // it again (an open after a reboot then replays about what the rewrite costs)
    let keys: Vec<Vec<u8>> = (0..300_000u32).map(|i| i.to_le_bytes().repeat(4)).collect();
    let ops: Vec<(&[u8], Option<&[u8]>)> = keys.iter().map(|k| (&k[..], Some(&b"v"[..]))).collect();
    s.batch(&ops).unwrap();
    drop(s);
    let index_len = fs::metadata(&index).unwrap().len();
    assert!(index_len > 2 * KEEP_OVERLAY_LOG + (1 << 20), "{index_len}");
    let past = index_len as usize / big.len() + 10;
    assert!((past - 40) * big.len() > KEEP_OVERLAY_LOG as usize);
    session(past - 40, true);
    session(past, false);
}

#[test]
fn snapshot_then_tail_replay_and_stale_snapshots_are_ignored() {
    let d = tempfile::tempdir().unwrap();
    {
        let s = Store::open(d.path(), opts()).unwrap();
        for i in 0..2000u32 {
            s.put(format!("k{i}").as_bytes(), &i.to_le_bytes()).unwrap();
        }
    }
    // a writer that never closes (as if SIGKILLed): its records follow the snapshot
    let s = Store::open(d.path(), opts()).unwrap();
    assert!(s.recovery.from_snapshot);
    assert_eq!(s.recovery.records, 0);
    s.put(b"k5", b"five").unwrap();
    s.delete(b"k6").unwrap();
    s.batch(&[(b"b1", Some(b"x")), (b"k7", None)]).unwrap();
    for i in 0..1500u32 {
        // enough to roll into new segments after the snapshot's active one
        s.put(format!("n{i}").as_bytes(), &[7; 40]).unwrap();
    }
    let dead_before = stat(&s, "dead_bytes");
    std::mem::forget(s); // no close: no new snapshot, the lock fd leaks with the test
    let s = Store::open(d.path(), opts());
    // the forgotten store still holds the flock in this process: open a copy instead
    assert!(s.is_err());
    let copy_of = copy_without_lock;
    let same = |s: &Store| {
        assert!(s.recovery.from_snapshot);
        assert_eq!(s.get(b"k5").unwrap().unwrap(), b"five");
        assert_eq!(s.get(b"k6").unwrap(), None);
        assert_eq!(s.get(b"k7").unwrap(), None);
        assert_eq!(s.get(b"b1").unwrap().unwrap(), b"x");
        assert_eq!(s.get(b"k8").unwrap().unwrap(), 8u32.to_le_bytes());
        assert_eq!(s.get(b"n1499").unwrap().unwrap(), [7; 40]);
        assert_eq!(s.len(), 2000 - 2 + 1 + 1500);
        assert_eq!(s.keys().unwrap().len(), s.len());
        let dead = stat(s, "dead_bytes");
        assert!(dead >= dead_before, "{dead} < {dead_before}");
    };
    // The writer's live overlay (OVERLAY, in the page cache): nothing to replay.
    let live = copy_of(d.path());
    let s = Store::open(live.path(), opts()).unwrap();
    assert!(s.recovery.from_overlay && s.recovery.records == 0);
    same(&s);
    s.put(b"more", b"1").unwrap(); // (and it goes on in the same file)
    std::mem::forget(s);
    let again = copy_of(live.path());
    let s = Store::open(again.path(), opts()).unwrap();
    assert!(s.recovery.from_overlay && s.recovery.records == 0);
    assert_eq!(s.get(b"more").unwrap().unwrap(), b"1");
    drop(s);
    // Killed in the middle of an update (its busy word odd), from another boot, or
    // without the file: replay from the snapshot, with the same result.
    for spoil in [Some(32), Some(16), None] {
        let other = copy_of(d.path());
        let ov = other.path().join(overlay::FILE);
        match spoil {
            Some(at) => {
                let mut b = fs::read(&ov).unwrap();
                b[at] ^= 1;
                fs::write(&ov, b).unwrap();
            }
            None => fs::remove_file(&ov).unwrap(),
        }
        let s = Store::open(other.path(), opts()).unwrap();
        assert!(!s.recovery.from_overlay && s.recovery.records > 1500);
        same(&s);
    }
    let copy = copy_of(d.path());
    fs::remove_file(copy.path().join(overlay::FILE)).unwrap();
    let s = Store::open(copy.path(), opts()).unwrap();
    same(&s);
    // compaction retires segments the snapshot named: it is dropped first, and a new
    // one is written once the copies are in place
    let named = snapshot::recorded(copy.path()).unwrap().unwrap().segs;
    s.compact().unwrap();
    let now = snapshot::recorded(copy.path()).unwrap().unwrap().segs;
    assert!(named.iter().all(|(id, _)| now.iter().all(|n| n.0 != *id)));
    drop(s);
    let s = Store::open(copy.path(), opts()).unwrap();
    assert!(s.recovery.from_snapshot);
    assert_eq!(s.len(), 2000 - 2 + 1 + 1500);
    drop(s);
    // a snapshot from before a segment was rewritten under it is not trusted
    let old = fs::read(copy.path().join(snapshot::FILE)).unwrap();
    let s = Store::open(copy.path(), opts()).unwrap();
    s.put(b"late", b"1").unwrap();
    s.compact().unwrap();
    drop(s);
    fs::write(copy.path().join(snapshot::FILE), &old).unwrap();
    let s = Store::open(copy.path(), opts()).unwrap();
    assert!(!s.recovery.from_snapshot);
    assert_eq!(s.get(b"late").unwrap().unwrap(), b"1");
    assert_eq!(s.get(b"k5").unwrap().unwrap(), b"five");
    // a damaged snapshot is rebuilt from the segments, never misread
    drop(s);
    let mut snap = fs::read(copy.path().join(snapshot::FILE)).unwrap();
    let mid = snap.len() / 2;
    snap[mid] ^= 1;
    fs::write(copy.path().join(snapshot::FILE), &snap).unwrap();
    let s = Store::open(copy.path(), opts()).unwrap();
    assert!(!s.recovery.from_snapshot);
    assert_eq!(s.len(), 2000 - 2 + 1 + 1500 + 1);
}

#[test]
fn snapshots_of_another_layout_are_ignored() {
    let d = tempfile::tempdir().unwrap();
    {
        let s = Store::open(d.path(), opts()).unwrap();
        for i in 0..100u32 {
            s.put(format!("k{i}").as_bytes(), b"v").unwrap();
        }
    }
    let index = d.path().join(snapshot::FILE);
    // 2: the version before the mapped layout; 4: the one before home slots were
    // scaled (its header checksum made to hold: read, its table not used)
    for version in [2u8, 4] {
        let mut snap = fs::read(&index).unwrap();
        snap[4] = version;
        let nsegs = u32::from_le_bytes(snap[36..40].try_into().unwrap()) as usize;
        let head = snapshot::FIXED + 24 * nsegs;
        let crc = crc32c::crc32c(&snap[..head]);
        snap[head..head + 4].copy_from_slice(&crc.to_le_bytes());
        fs::write(&index, &snap).unwrap();
        let s = Store::open(d.path(), opts()).unwrap();
        assert!(!s.recovery.from_snapshot, "version {version}");
        assert_eq!(s.len(), 100);
        drop(s); // writes the current layout again
        let s = Store::open(d.path(), opts()).unwrap();
        assert!(s.recovery.from_snapshot);
        assert_eq!(s.get(b"k99").unwrap().unwrap(), b"v");
    }
}

/// The sizing tests' keys.
fn sized_key(i: u32) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// Durability "none", segments of 8 MiB.
fn sizing_opts() -> Options {
    Options {
        durability: Durability::None,
        segment_size: 8 << 20,
        ..Default::default()
    }
}

/// A store at `d` given keys 0..10,000 one at a time (each key's value: its number):
/// its table doubled from 8 slots to 16,384, 61 % full.
fn ten_thousand_one_at_a_time(d: &Path) -> Store {
    let s = Store::open(d, sizing_opts()).unwrap();
    for i in 0..10_000 {
        s.put(&sized_key(i), &i.to_le_bytes()).unwrap();
    }
    assert_eq!(s.state.read().unwrap().index.memory_buckets(), 16_384);
    s
}

/// The slots of the table in `d`'s `INDEX` (its header's `buckets`).
fn index_buckets(d: &Path) -> usize {
    let snap = fs::read(d.join(snapshot::FILE)).unwrap();
    u64::from_le_bytes(snap[48..56].try_into().unwrap()) as usize
}

#[test]
fn index_is_written_sized_for_its_keys() {
    // INDEX gets a table sized for the keys, which the next open maps and grows from
    let d = tempfile::tempdir().unwrap();
    drop(ten_thousand_one_at_a_time(d.path()));
    assert_eq!(
        index_buckets(d.path()),
        super::super::table::buckets_for(10_000)
    );
    {
        let s = Store::open(d.path(), sizing_opts()).unwrap();
        assert!(s.recovery.from_snapshot);
        assert_eq!(s.get(b"absent").unwrap(), None);
        for i in (0..10_000).step_by(7) {
            assert_eq!(s.get(&sized_key(i)).unwrap().unwrap(), i.to_le_bytes());
        }
        // past what the overlay holds (65,536 keys): its keys join the table, which
        // grows onto the heap
        for i in 10_000..80_000 {
            s.put(&sized_key(i), &i.to_le_bytes()).unwrap();
        }
        assert!(s.delete(&sized_key(3)).unwrap());
        assert!(!s.state.read().unwrap().index.is_mapped());
    }
    // (fitted when over a quarter larger than a table sized for them)
    let (b, want) = (
        index_buckets(d.path()),
        super::super::table::buckets_for(79_999),
    );
    assert!(b / 8 * 7 >= 79_999 && b <= want + want / 4, "{b} slots");
    let s = Store::open(d.path(), sizing_opts()).unwrap();
    assert!(s.recovery.from_snapshot);
    assert_eq!(s.len(), 79_999);
    assert_eq!(s.get(&sized_key(3)).unwrap(), None);
    for i in (0..80_000).filter(|&i| i != 3) {
        assert_eq!(
            s.get(&sized_key(i)).unwrap().unwrap(),
            i.to_le_bytes(),
            "{i}"
        );
    }
}

#[test]
fn a_compactions_index_is_sized_for_its_keys() {
    // the INDEX a compaction writes while the store stays open is fitted as a close's
    // is, from its copy of the table
    let d = tempfile::tempdir().unwrap();
    let s = ten_thousand_one_at_a_time(d.path());
    for i in 0..2_000 {
        s.put(&sized_key(i), b"again").unwrap();
    }
    s.compact().unwrap();
    assert_eq!(s.state.read().unwrap().index.memory_buckets(), 16_384);
    assert_eq!(
        index_buckets(d.path()),
        super::super::table::buckets_for(10_000)
    );
    s.put(b"after", b"the compaction").unwrap();
    drop(s);
    let s = Store::open(d.path(), sizing_opts()).unwrap();
    assert!(s.recovery.from_snapshot);
    assert_eq!(s.len(), 10_001);
    assert_eq!(s.get(&sized_key(1)).unwrap().unwrap(), b"again");
    assert_eq!(
        s.get(&sized_key(9_999)).unwrap().unwrap(),
        9_999u32.to_le_bytes()
    );
    assert_eq!(s.get(b"after").unwrap().unwrap(), b"the compaction");
}

#[test]
fn a_multi_get_that_met_cold_values_checks_the_next_ones_first() {
    let d = tempfile::tempdir().unwrap();
    let keys: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| format!("k{i:05}").into_bytes())
        .collect();
    let val = |k: &[u8]| k.repeat(40);
    {
        let s = Store::open(d.path(), opts()).unwrap();
        for k in &keys {
            s.put(k, &val(k)).unwrap();
        }
    }
    let s = Store::open(
        d.path(),
        Options {
            warm: false,
            ..opts()
        },
    )
    .unwrap();
    let evict = || {
        let st = s.state.read().unwrap();
        for seg in st.segs.values() {
            // SAFETY: the segment's fd is open; advice only.
            unsafe { libc::posix_fadvise(seg.fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    };
    let cached = |ks: &[Vec<u8>]| {
        let st = s.state.read().unwrap();
        ks.iter().all(|k| {
            let l = st.index.get(k).unwrap();
            let at = l.off + (HEADER + k.len()) as u64;
            st.segs[&l.seg].resident(at, l.val_len as usize)
        })
    };
    let get = |from: usize| {
        let ks: Vec<&[u8]> = keys[from..from + 100].iter().map(|k| &k[..]).collect();
        let got = s.multi_get(&ks).unwrap();
        let want: Vec<Option<Vec<u8>>> = ks.iter().map(|k| Some(val(k))).collect();
        assert_eq!(got, want);
    };
    evict();
    if cached(&keys[..100]) {
        return; // (a filesystem that keeps everything cached: nothing to see)
    }
    assert!(!s.cold_hint.load(Ordering::Relaxed));
    get(0);
    assert!(
        s.cold_hint.load(Ordering::Relaxed),
        "values came from the disk"
    );
    get(1000); // (cold again: still the hint)
    assert!(s.cold_hint.load(Ordering::Relaxed));
    get(1000); // (now in memory: the hint goes)
    assert!(!s.cold_hint.load(Ordering::Relaxed));
    evict();
    get(2000);
    assert!(s.cold_hint.load(Ordering::Relaxed));
}

#[test]
fn large_snapshot_is_mapped_and_verified_in_the_background() {
    let d = tempfile::tempdir().unwrap();
    let o = || Options {
        segment_size: 8 << 20,
        ..Default::default()
    };
    let key = |i: u32| format!("key{i}").into_bytes();
    let put_range = |s: &Store, r: std::ops::Range<u32>| {
        let ks: Vec<Vec<u8>> = r.clone().map(key).collect();
        let vs: Vec<[u8; 4]> = r.map(u32::to_le_bytes).collect();
        let ops: Vec<(&[u8], Option<&[u8]>)> = ks
            .iter()
            .zip(&vs)
            .map(|(k, v)| (&k[..], Some(&v[..])))
            .collect();
        s.batch(&ops).unwrap();
    };
    {
        let s = Store::open(d.path(), o()).unwrap();
        put_range(&s, 0..150_000);
    }
    let index = d.path().join(snapshot::FILE);
    assert!(
        fs::metadata(&index).unwrap().len() > 4 << 20,
        "verified in the background"
    );
    {
        let s = Store::open(d.path(), o()).unwrap();
        assert!(s.recovery.from_snapshot);
        assert_eq!(s.recovery.records, 0);
        assert!(s.state.read().unwrap().index.is_mapped());
        assert_eq!(s.get(&key(777)).unwrap().unwrap(), 777u32.to_le_bytes());
        assert_eq!(s.get(b"absent").unwrap(), None); // (after the verification)
                                                     // writes land in private copies of the mapped pages, never in the file
        let before = fs::read(&index).unwrap();
        for i in 0..1000u32 {
            s.put(format!("new{i}").as_bytes(), b"n").unwrap();
        }
        assert!(s.delete(&key(1)).unwrap());
        assert_eq!(fs::read(&index).unwrap(), before);
        // growing past the mapped table's room rehashes it into memory
        put_range(&s, 150_000..300_000);
        assert!(!s.state.read().unwrap().index.is_mapped());
        assert_eq!(s.len(), 300_000 + 1000 - 1);
        assert_eq!(
            s.get(&key(299_999)).unwrap().unwrap(),
            299_999u32.to_le_bytes()
        );
        assert_eq!(s.get(b"new999").unwrap().unwrap(), b"n");
    }
    {
        let s = Store::open(d.path(), o()).unwrap();
        assert!(s.recovery.from_snapshot);
        assert_eq!(s.len(), 300_000 + 1000 - 1);
        assert_eq!(s.get(&key(1)).unwrap(), None);
        assert_eq!(s.get(b"new5").unwrap().unwrap(), b"n");
        assert_eq!(s.keys().unwrap().len(), 300_000 + 1000 - 1);
    }
    // a store closed right after it opened: its verification stops (no verdict, the
    // file left alone — not taken for damage), and the next open maps it again
    let abandoned = snapshot::ABANDONED.load(Ordering::Relaxed);
    drop(Store::open(d.path(), o()).unwrap());
    let t = Instant::now();
    while snapshot::ABANDONED.load(Ordering::Relaxed) == abandoned {
        assert!(t.elapsed() < Duration::from_secs(10), "the check went on");
        std::thread::sleep(Duration::from_millis(1));
    }
    {
        let s = Store::open(d.path(), o()).unwrap();
        assert!(s.recovery.from_snapshot && index.exists());
        assert_eq!(s.get(b"absent").unwrap(), None); // (verified whole this time)
    }
    // damage in the keys (the file's last section): the header holds, so the store
    // opens on the mapping; the first answer that needs the whole index finds out
    let mut snap = fs::read(&index).unwrap();
    let n = snap.len();
    snap[n - 10] ^= 0x40;
    fs::write(&index, &snap).unwrap();
    {
        let s = Store::open(d.path(), o()).unwrap();
        assert!(s.recovery.from_snapshot);
        assert_eq!(s.get(&key(5)).unwrap().unwrap(), 5u32.to_le_bytes()); // a hit: checked against its record
        let e = s.get(b"absent").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let msg = e.to_string();
        assert!(
            msg.contains("INDEX") && msg.contains("keys") && msg.contains("reopen"),
            "{msg}"
        );
        assert!(s.keys().is_err() && s.contains(b"absent").is_err());
        assert!(s.compact().is_err());
        assert!(!index.exists(), "a damaged snapshot is removed");
    } // (and not written out again at close)
    let s = Store::open(d.path(), o()).unwrap();
    assert!(!s.recovery.from_snapshot);
    assert_eq!(s.len(), 300_000 + 1000 - 1);
    assert_eq!(s.get(b"absent").unwrap(), None);
    assert_eq!(s.get(b"new5").unwrap().unwrap(), b"n");
}

/// Run `writer(t)` on `n` threads at once (scoped: they may borrow) and wait for all.
fn on_threads(n: usize, writer: impl Fn(usize) + Sync) {
    std::thread::scope(|sc| {
        for t in 0..n {
            let w = &writer;
            sc.spawn(move || w(t));
        }
    });
}

/// A store opened with relayed wake-ups (as the Python glue opens it).
fn relayed(d: &tempfile::TempDir) -> Store {
    let o = Options {
        relay: true,
        ..opts()
    };
    Store::open(d.path(), o).unwrap()
}

/// The release policy when a group completes, on a real store's commit state.
#[test]
fn relay_release_policy() {
    let d = tempfile::tempdir().unwrap();
    let s = relayed(&d);
    let parked = |c: &mut Commit, n: u64| -> Vec<Arc<AtomicU64>> {
        (1..=n).map(|t| s.park(c, t, false)).collect()
    };
    let queued = |c: &mut Commit| {
        c.pending.push(Pending {
            ticket: 99,
            bytes: Vec::new(),
            updates: Vec::new(),
        })
    };
    let gone = |g: &[Arc<AtomicU64>]| g.iter().filter(|x| x.load(Ordering::Relaxed) == GO).count();
    let mut c = s.commit.lock().unwrap();
    // few ready: all go, even with more queued
    let g = parked(&mut c, 5);
    c.done_ticket = 5;
    queued(&mut c);
    s.ready_parked(&mut c);
    assert_eq!((gone(&g), c.ready.len()), (5, 0));
    // many ready, more queued: they wait their turn — one goes if a writer found
    // nobody to release meanwhile, and the oldest first
    c.pending.clear();
    let g = parked(&mut c, 12);
    c.done_ticket = 12;
    queued(&mut c);
    s.ready_parked(&mut c);
    assert_eq!((gone(&g), c.ready.len()), (0, 12));
    c.unrelayed = 3;
    s.ready_parked(&mut c);
    assert_eq!((gone(&g), c.ready.len(), c.unrelayed), (1, 11, 0));
    assert_eq!(g[0].load(Ordering::Relaxed), GO);
    // nothing queued: nobody is writing, everyone goes
    c.pending.clear();
    s.ready_parked(&mut c);
    assert_eq!((gone(&g), c.ready.len()), (12, 0));
    assert_eq!(s.waiting.load(Ordering::Relaxed), 0);
    // closing: every ready writer goes, whatever is queued
    let g = parked(&mut c, 12);
    queued(&mut c);
    s.ready_parked(&mut c);
    assert_eq!((gone(&g), c.ready.len()), (0, 12));
    drop(c);
    s.relay_all();
    assert_eq!(gone(&g), 12);
    assert_eq!(s.waiting.load(Ordering::Relaxed), 0);
}

/// relay_one: the first call (nobody primed) releases the oldest ready writer and
/// primes the next for the following turn; each later call lets the primed one go
/// (it is the one that takes the lock) and primes the next. A primed writer goes
/// once the turns pass its own, or on its own after PRIME_PATIENCE.
#[test]
fn relay_primes_the_next_writer() {
    let d = tempfile::tempdir().unwrap();
    let s = relayed(&d);
    let mut c = s.commit.lock().unwrap();
    let g: Vec<Arc<AtomicU64>> = (1..=4).map(|t| s.park(&mut c, t, true)).collect();
    drop(c);
    let state = |g: &[Arc<AtomicU64>]| -> Vec<u64> {
        g.iter().map(|x| x.load(Ordering::Relaxed)).collect()
    };
    s.relay_one(); // turn 1: writer 1 goes, writer 2 waits past turn 1
    assert_eq!(state(&g), [GO, 2, 0, 0]);
    assert_eq!(s.primed.load(Ordering::Relaxed), 2);
    s.relay_one(); // turn 2: writer 2 takes the lock, writer 3 waits past turn 2
    assert_eq!(state(&g), [GO, 2, 3, 0]);
    s.relay_one();
    s.relay_one(); // writer 4 took the lock; nobody left to prime
    assert_eq!(state(&g), [GO, 2, 3, 4]);
    assert_eq!(s.primed.load(Ordering::Relaxed), 0);
    assert_eq!(s.waiting.load(Ordering::Relaxed), 0);
    // a primed writer goes once the turns pass its own...
    let turn = s.turns.load(Ordering::Relaxed);
    let t = Instant::now();
    s.wait_turn(turn - 1);
    assert!(t.elapsed() < PRIME_PATIENCE);
    // ... or, when nobody comes, after PRIME_PATIENCE, no longer primed
    s.primed.store(turn + 1, Ordering::Relaxed);
    s.wait_turn(turn);
    assert!(t.elapsed() >= PRIME_PATIENCE);
    assert_eq!(s.primed.load(Ordering::Relaxed), 0);
}

/// `each` puts from each of `threads` threads started together; all of them are there.
fn puts_from_threads(s: &Store, threads: usize, each: usize) {
    let start = std::sync::Barrier::new(threads);
    on_threads(threads, |t| {
        start.wait();
        for i in 0..each {
            s.put(format!("t{t}-{i}").as_bytes(), b"v").unwrap();
        }
    });
    assert_eq!(s.len(), threads * each);
}

#[test]
fn group_commit_threads() {
    let d = tempfile::tempdir().unwrap();
    puts_from_threads(&Store::open(d.path(), opts()).unwrap(), 8, 100);
}

/// Relay mode as Python uses it: each thread holds a process-wide lock (the GIL)
/// except while in the store, and releases a writer on its way in. Threads stop at
/// different times, so that some writers' groups complete with nobody left to release
/// them (they go on their own). Every put is there afterwards, and groups were shared.
#[test]
fn relayed_writers_under_a_global_lock() {
    let d = tempfile::tempdir().unwrap();
    let s = relayed(&d);
    let gil = Mutex::new(());
    on_threads(16, |t| {
        let mut held = Some(gil.lock().unwrap());
        for i in 0..20 + 10 * t {
            drop(held.take());
            s.relay_one();
            s.put(format!("t{t}-{i}").as_bytes(), &[t as u8; 9])
                .unwrap();
            held = Some(gil.lock().unwrap());
        }
    });
    let n: usize = (0..16).map(|t| 20 + 10 * t).sum();
    assert_eq!(s.len(), n);
    for t in 0..16 {
        let last = format!("t{t}-{}", 19 + 10 * t);
        assert_eq!(s.get(last.as_bytes()).unwrap().unwrap(), [t as u8; 9]);
    }
    let commits = s.group_commits.load(Ordering::Relaxed);
    assert!(commits < n as u64, "{commits} group commits for {n} puts");
    let c = s.commit.lock().unwrap();
    assert!(c.parked.is_empty() && c.ready.is_empty());
}

/// Relay mode with nobody releasing anyone: writers whose commit is done go on their
/// own after RELAY_PATIENCE.
#[test]
fn relayed_writers_nobody_releases() {
    let d = tempfile::tempdir().unwrap();
    puts_from_threads(&relayed(&d), 8, 3);
}

#[test]
fn buffered_durability_reads_and_reopens() {
    let d = tempfile::tempdir().unwrap();
    {
        let s = Store::open(
            d.path(),
            Options {
                durability: Durability::None,
                ..opts()
            },
        )
        .unwrap();
        for i in 0..5000u32 {
            s.put(format!("k{i}").as_bytes(), &i.to_le_bytes()).unwrap();
        }
        assert_eq!(s.get(b"k4999").unwrap().unwrap(), 4999u32.to_le_bytes());
        s.delete(b"k1").unwrap();
        assert_eq!(
            s.multi_get(&[b"k1", b"k2"]).unwrap()[1].as_deref(),
            Some(&2u32.to_le_bytes()[..])
        );
    }
    let s = Store::open(d.path(), opts()).unwrap();
    assert_eq!(s.len(), 4999);
    assert_eq!(s.get(b"k1").unwrap(), None);
}

#[test]
fn bad_sizes() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), opts()).unwrap();
    assert!(s.put(b"", b"v").is_err());
    assert!(s.put(&vec![0u8; 70_000], b"v").is_err());
}

#[test]
fn a_view_reads_the_store_as_it_was_through_an_overlay_merge_and_a_compaction() {
    // A store reopened over its mapped INDEX (changes go to the overlay, which merges
    // into the table a few entries per put past OVERLAY_MAX keys): a view taken then
    // reads every key as it was while 70,000 new keys, overwrites, deletes and a
    // compaction (retiring every segment its records are in) happen.
    let d = tempfile::tempdir().unwrap();
    let (o, _) = unsynced(&d, opts());
    let val = |i: u32, gen: u8| [gen; 3].repeat(1 + i as usize % 9);
    {
        let s = Store::open(d.path(), o.clone()).unwrap();
        for i in 0..3000u32 {
            s.put(format!("k{i:05}").as_bytes(), &val(i, 1)).unwrap();
        }
    }
    let s = Store::open(d.path(), o).unwrap();
    let v = s.view_open().unwrap();
    for i in 0..3000u32 {
        match i % 3 {
            0 => s
                .put(format!("k{i:05}").as_bytes(), &val(i, 2))
                .map(|_| true),
            1 => s.delete(format!("k{i:05}").as_bytes()),
            _ => Ok(true),
        }
        .unwrap();
    }
    for i in 0..(OVERLAY_MAX as u32 + 4464) {
        s.put(format!("n{i:06}").as_bytes(), b"new").unwrap();
    }
    s.compact().unwrap();
    let get = |k: &[u8]| s.view_get_with(v, k, false, <[u8]>::to_vec).unwrap();
    for i in 0..3000u32 {
        assert_eq!(
            get(format!("k{i:05}").as_bytes()),
            Some(val(i, 1)),
            "k{i:05}"
        );
    }
    assert_eq!(get(b"n000001"), None);
    assert!(s.view_contains(v, b"k00001").unwrap());
    assert_eq!(s.view_len(v).unwrap(), 3000);
    let listed = s.view_scan(v, b"k", None, None).unwrap();
    assert_eq!(listed.len(), 3000);
    assert!(s.view_scan(v, b"n", None, None).unwrap().is_empty());
    let got = s.read_listed(&listed).unwrap();
    assert!(got.iter().enumerate().all(|(i, x)| *x == val(i as u32, 1)));
    let many: Vec<&[u8]> = vec![b"k00000", b"k00001", b"n000000"];
    assert_eq!(
        s.view_multi_get(v, &many).unwrap(),
        vec![Some(val(0, 1)), Some(val(1, 1)), None]
    );
    // the store itself moved on; a second view sees it now
    assert_eq!(s.get(b"k00000").unwrap(), Some(val(0, 2)));
    assert_eq!(s.get(b"k00001").unwrap(), None);
    let now = s.view_open().unwrap();
    assert_eq!(s.view_len(now).unwrap(), s.len());
    assert_eq!(s.views(), 2);
    assert_eq!((s.view_close(v), s.view_close(v)), (Some(1), None));
    assert!(s
        .view_get_with(v, b"k00000", false, <[u8]>::to_vec)
        .is_err());
    assert_eq!(s.view_close(now), Some(0));
    assert_eq!(s.views(), 0);
}

#[test]
fn range_scans_follow_the_keys_through_a_lost_log_and_mass_deletes() {
    // The sorted order of range scans (kv/order.rs) against a model: built by the first
    // bounded scan; keys inserted after it taken in by the next scan; the index's log
    // of inserts dropped when it outgrows its bound (the next scan sorts afresh); keys
    // deleted en masse (the order then holds more than twice the store's keys: sorted
    // afresh); an unbounded scan after it walks the order.
    let d = tempfile::tempdir().unwrap();
    let (o, _) = unsynced(&d, opts());
    let s = Store::open(d.path(), o).unwrap();
    let key = |i: u32| format!("k{:07}", i * 7919 % 1_000_003).into_bytes();
    let mut model = std::collections::BTreeSet::new();
    let check = |s: &Store, model: &std::collections::BTreeSet<Vec<u8>>, lo: &[u8], hi: &[u8]| {
        let got: Vec<Vec<u8>> = s
            .scan(b"k", Some(lo), Some(hi))
            .unwrap()
            .into_iter()
            .map(|l| l.0)
            .collect();
        let want: Vec<Vec<u8>> = model.range(lo.to_vec()..hi.to_vec()).cloned().collect();
        assert_eq!(got, want, "[{:?}, {:?})", lo, hi);
    };
    for i in 0..1000 {
        s.put(&key(i), b"v").unwrap();
        model.insert(key(i));
    }
    assert!(s.order.lock().unwrap().is_none(), "no order before a scan");
    check(&s, &model, b"k0", b"k1");
    let logging = |s: &Store| s.state.read().unwrap().index.added.is_some();
    assert!(
        logging(&s),
        "the index logs its inserts once a scan sorted the keys"
    );
    // the log dropped (as when it outgrows its bound, 4 MiB: ~350,000 8-byte keys):
    // the index goes on without it, the next scan sorts afresh
    s.state.write().unwrap().index.added = None;
    for i in 1000..80_000 {
        s.put(&key(i), b"v").unwrap();
        model.insert(key(i));
    }
    assert!(!logging(&s));
    check(&s, &model, b"k0001000", b"k0002000");
    assert!(logging(&s));
    // a few inserts and deletes between scans
    for i in 80_000..80_100 {
        s.put(&key(i), b"v").unwrap();
        model.insert(key(i));
        s.delete(&key(i - 79_000)).unwrap();
        model.remove(&key(i - 79_000));
        let lo = key(i - 5);
        check(&s, &model, &lo, &[&lo[..4], b"\xff"].concat());
        check(&s, &model, &key(i), &[&key(i)[..], b"\0"].concat()); // (just put)
    }
    // most keys deleted: the order is sorted afresh, and keeps up after
    for i in 0..75_000 {
        if s.delete(&key(i)).unwrap() {
            model.remove(&key(i));
        }
    }
    let before = s.order.lock().unwrap().as_ref().unwrap().len();
    check(&s, &model, b"k", b"k1");
    let after = s.order.lock().unwrap().as_ref().unwrap().len();
    assert!(
        before > 2 * model.len() && after == model.len(),
        "{before} -> {after}"
    );
    let all: Vec<Vec<u8>> = s
        .scan(b"", None, None)
        .unwrap()
        .into_iter()
        .map(|l| l.0)
        .collect();
    assert_eq!(all, model.iter().cloned().collect::<Vec<_>>());
    // a deleted key put back, a key both in the order and logged: listed once
    s.put(&key(1), b"back").unwrap();
    model.insert(key(1));
    check(&s, &model, b"k", b"k2");
    assert!(s.stats().iter().any(|(k, v)| k == "order_bytes" && *v > 0));
}

#[test]
fn the_order_saved_at_close_serves_the_next_open_of_that_state_only() {
    // ORDER (kv/order.rs): written by a close that has an order, read by the next
    // open's first scan when the store is in the state it was saved for; rewritten
    // after writes; removed when a killed writer left another state; ignored when its
    // bytes are damaged. Every scan against the model.
    let d = tempfile::tempdir().unwrap();
    let (o, _) = unsynced(&d, opts());
    let file = d.path().join(order::FILE);
    let mut model = std::collections::BTreeSet::new();
    let all = |s: &Store| -> Vec<Vec<u8>> {
        s.scan(b"k", None, None)
            .unwrap()
            .into_iter()
            .map(|l| l.0)
            .collect()
    };
    let want = |m: &std::collections::BTreeSet<Vec<u8>>| m.iter().cloned().collect::<Vec<_>>();
    let saved_for = |s: &Store| *s.order_file.lock().unwrap();
    let sorts = |s: &Store| s.order_sorts.load(Ordering::Relaxed);
    {
        let s = Store::open(d.path(), o.clone()).unwrap();
        for i in 0..3000 {
            s.put(format!("k{:05}", i * 7 % 3001).as_bytes(), b"v")
                .unwrap();
            model.insert(format!("k{:05}", i * 7 % 3001).into_bytes());
        }
        assert_eq!(all(&s), want(&model));
    }
    assert!(file.exists(), "saved at close");
    let written = fs::read(&file).unwrap();
    {
        // the same state: the file is used (no sort), and a close without writes
        // leaves it as it was
        let s = Store::open(d.path(), o.clone()).unwrap();
        assert!(saved_for(&s).is_some(), "this open's state");
        assert_eq!(all(&s), want(&model));
        assert_eq!(sorts(&s), 0, "read, not sorted");
    }
    assert_eq!(fs::read(&file).unwrap(), written, "left as it was");
    {
        // writes without a scan: the close takes them into the saved order
        let s = Store::open(d.path(), o.clone()).unwrap();
        s.put(b"k99999", b"new").unwrap();
        s.delete(b"k00007").unwrap();
        model.insert(b"k99999".to_vec());
        model.remove(&b"k00007".to_vec());
    }
    {
        let s = Store::open(d.path(), o.clone()).unwrap();
        assert!(saved_for(&s).is_some(), "rewritten for the new state");
        assert_eq!(all(&s), want(&model));
        assert_eq!(sorts(&s), 0);
        // killed after more writes: the file is another state's
        s.put(b"k00000x", b"v").unwrap();
        model.insert(b"k00000x".to_vec());
        s.flush().unwrap();
        std::mem::forget(s);
    }
    let d = copy_without_lock(d.path()); // (the killed writer's lock stays in this process)
    let file = d.path().join(order::FILE);
    assert!(file.exists());
    {
        let s = Store::open(d.path(), o.clone()).unwrap();
        assert!(
            saved_for(&s).is_none() && !file.exists(),
            "another state's: removed"
        );
        assert_eq!(all(&s), want(&model));
        assert_eq!(sorts(&s), 1, "sorted afresh");
    }
    // a close killed while saving left ORDER.tmp: the next writer's open removes it
    fs::write(d.path().join(order::TMP), b"half").unwrap();
    drop(Store::open(d.path(), o.clone()).unwrap());
    assert!(!d.path().join(order::TMP).exists());
    // without INDEX (index_snapshot=False) no state could match: the close removes it
    {
        let s = Store::open(
            d.path(),
            Options {
                index_snapshot: false,
                ..o.clone()
            },
        )
        .unwrap();
        s.scan(b"k", None, None).unwrap();
    }
    assert!(!file.exists(), "removed by a close without INDEX");
    {
        let s = Store::open(d.path(), o.clone()).unwrap();
        s.scan(b"k", None, None).unwrap();
    }
    assert!(file.exists());
    // damaged: its CRC fails, the scan sorts
    let mut b = fs::read(&file).unwrap();
    let at = b.len() - 3;
    b[at] ^= 0x20;
    fs::write(&file, &b).unwrap();
    let s = Store::open(d.path(), o).unwrap();
    assert!(saved_for(&s).is_some(), "its header matches");
    assert_eq!(all(&s), want(&model));
    assert_eq!(sorts(&s), 1, "not used");
}
