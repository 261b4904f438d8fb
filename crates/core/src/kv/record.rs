//! The on-disk record (docs/kv-format.md).
//!
//! ```text
//! offset size field
//!      0    4 crc32c   over bytes 4..end of record (rest of header, key, value)
//!      4    2 magic    0x5856 ("XV")
//!      6    1 version  1
//!      7    1 type     1 PUT, 2 DELETE, 3 COMMIT (with no records and the key
//!                      "seal" + u32 id + u64 length: a seal record, see encode_seal)
//!      6    1 version  2: the same, with a compressed value (flags bit 1 or 2)
//!      8    1 flags    bit 0: part of a batch (visible only once its COMMIT is read)
//!                      bit 1: the value is LZ4-compressed: u32 length, then an LZ4 block
//!                      bit 2: the value is a zstd frame (naming its dictionary, if any)
//!      9    3 mark_seg low 24 bits of the id of the segment `mark_off` is about (0: none)
//!     12    4 key_len
//!     16    8 seq      sequence number (batch members share the batch's seq)
//!     24    4 val_len  (COMMIT: number of records in the batch)
//!     28    4 mark_off every byte of segment `mark_seg` below this offset had been
//!                      fdatasynced when the record was encoded (a true lower bound)
//!     32      key, then value
//! ```

pub const HEADER: usize = 32;
pub const MAGIC: u16 = 0x5856;
pub const VERSION: u8 = 1;
/// The version of records with a compressed value: a build that does not know
/// compression refuses them as damaged instead of serving compressed bytes.
pub const VERSION_COMPRESSED: u8 = 2;
pub const MAX_KEY: usize = 64 * 1024;
pub const MAX_VALUE: usize = 64 * 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Put = 1,
    Delete = 2,
    Commit = 3,
}

pub const FLAG_BATCH: u8 = 1;
pub const FLAG_LZ4: u8 = 2;
pub const FLAG_ZSTD: u8 = 4;
/// Either compression flag (never both).
pub const FLAG_COMPRESSED: u8 = FLAG_LZ4 | FLAG_ZSTD;

/// Values shorter than this are stored as they are (too little to gain).
pub const COMPRESS_MIN: usize = 64;

/// `value` compressed for a record with [`FLAG_LZ4`] (its length as a u32, then an LZ4
/// block), or None when that would not save at least an eighth of it (incompressible
/// data is stored as it is, and read without a decompression).
pub fn compress(value: &[u8]) -> Option<Vec<u8>> {
    if value.len() < COMPRESS_MIN {
        return None;
    }
    let c = lz4_flex::block::compress_prepend_size(value);
    (c.len() <= value.len() - value.len() / 8).then_some(c)
}

/// The value a record with [`FLAG_LZ4`] stores as `stored` (after its CRC held: a
/// failure here is a bug or a record written by something else, reported as such).
pub fn decompress(stored: &[u8]) -> Result<Vec<u8>, String> {
    let n = match stored.get(..4) {
        Some(b) => u32::from_le_bytes(b.try_into().expect("4")) as usize,
        None => return Err("a compressed value shorter than its length field".into()),
    };
    if n > MAX_VALUE {
        return Err(format!(
            "a compressed value says it holds {n} bytes (> 64 MiB)"
        ));
    }
    match lz4_flex::block::decompress(&stored[4..], n) {
        Ok(v) if v.len() == n => Ok(v),
        Ok(v) => Err(format!("a compressed value of {n} bytes gave {}", v.len())),
        Err(e) => Err(format!("a compressed value does not decompress: {e}")),
    }
}

/// A durable mark: `(segment id) << 32 | offset` — every byte of that segment below the
/// offset has been fdatasynced. 0: no claim. Packed so that a later mark is larger.
pub fn mark(seg: u32, synced_to: u64) -> u64 {
    (seg as u64) << 32 | synced_to.min(u32::MAX as u64)
}

#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub kind: Kind,
    pub flags: u8,
    pub key_len: u32,
    pub val_len: u32,
    pub seq: u64,
    /// the durable mark the record carries: (low 24 bits of a segment id, offset)
    pub mark_seg: u32,
    pub mark_off: u32,
}

impl Header {
    pub fn total(&self) -> usize {
        let body = match self.kind {
            Kind::Commit => 0,
            _ => self.val_len as usize,
        };
        HEADER + self.key_len as usize + body
    }

    /// How far segment `seg` was synced when this record was encoded, as it says
    /// (0 when it says nothing about that segment).
    pub fn synced_in(&self, seg: u32) -> u64 {
        match self.mark_seg != 0 && self.mark_seg == seg & 0xFF_FFFF {
            true => self.mark_off as u64,
            false => 0,
        }
    }

    /// This record's mark names a segment after `seg`: a sync happened after `seg` was
    /// sealed (ids compared in the mark's 24 bits).
    pub fn synced_after(&self, seg: u32) -> bool {
        self.mark_seg != 0 && self.mark_seg > seg & 0xFF_FFFF
    }
}

fn put_mark(out: &mut [u8], start: usize, mark: u64) {
    let seg = ((mark >> 32) as u32 & 0xFF_FFFF).to_le_bytes();
    out[start + 9..start + 12].copy_from_slice(&seg[..3]);
    out[start + 28..start + 32].copy_from_slice(&(mark as u32).to_le_bytes());
}

/// Append one record to `out`, carrying the durable `mark` (see [`mark`]; 0: none).
pub fn encode(
    out: &mut Vec<u8>,
    kind: Kind,
    flags: u8,
    seq: u64,
    key: &[u8],
    value: &[u8],
    mark: u64,
) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(match flags & FLAG_COMPRESSED {
        0 => VERSION,
        _ => VERSION_COMPRESSED,
    });
    out.push(kind as u8);
    out.push(flags);
    out.extend_from_slice(&[0u8; 3]);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    put_mark(out, start, mark);
    out.extend_from_slice(key);
    if kind != Kind::Commit {
        out.extend_from_slice(value);
    }
    let crc = crc32c::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// A COMMIT record closing a batch of `count` records with sequence `seq`.
pub fn encode_commit(out: &mut Vec<u8>, seq: u64, count: u32, mark: u64) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(VERSION);
    out.push(Kind::Commit as u8);
    out.push(0);
    out.extend_from_slice(&[0u8; 3]);
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    put_mark(out, start, mark);
    let crc = crc32c::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// The key of a seal record: this tag, then the sealed segment's id (u32) and length
/// (u64), little-endian.
pub const SEAL_TAG: &[u8; 4] = b"seal";
/// A seal record's size: a header and its 16-byte key.
pub const SEAL_LEN: usize = HEADER + 16;

/// The seal record that starts a segment the log rolled to: a COMMIT of no records
/// (a build that does not know it reads an empty batch) whose key says how long the
/// previous segment, `prev`, was when it was sealed. Recovery compares it with what the
/// disk kept of that segment: a tail lost to a crash of the machine is then known, even
/// where it reads as zeros or the file came back shorter.
pub fn encode_seal(out: &mut Vec<u8>, prev: u32, len: u64, mark: u64) {
    let mut key = [0u8; 16];
    key[..4].copy_from_slice(SEAL_TAG);
    key[4..8].copy_from_slice(&prev.to_le_bytes());
    key[8..].copy_from_slice(&len.to_le_bytes());
    encode(out, Kind::Commit, 0, 0, &key, &[], mark);
}

/// The (sealed segment, its length) that `rec` records, if it is a whole seal record
/// with a valid CRC.
pub fn parse_seal(rec: &[u8]) -> Option<(u32, u64)> {
    let h = parse_header(rec).ok()?;
    let key = rec.get(HEADER..SEAL_LEN)?;
    let seal = h.kind == Kind::Commit
        && h.val_len == 0
        && h.flags == 0
        && h.key_len as usize == SEAL_LEN - HEADER
        && key[..4] == SEAL_TAG[..]
        && check(&rec[..SEAL_LEN]).is_ok();
    seal.then(|| {
        let id = u32::from_le_bytes(key[4..8].try_into().expect("4"));
        (id, u64::from_le_bytes(key[8..].try_into().expect("8")))
    })
}

#[derive(Debug, PartialEq, Eq)]
pub enum Bad {
    /// Fewer bytes than a header or than the header announces: a torn write.
    Short,
    Magic,
    Version(u8),
    Kind(u8),
    Crc,
    TooBig,
}

/// Parse the header at the start of `buf` (no CRC check: that needs the whole record).
pub fn parse_header(buf: &[u8]) -> Result<Header, Bad> {
    if buf.len() < HEADER {
        return Err(Bad::Short);
    }
    if u16::from_le_bytes([buf[4], buf[5]]) != MAGIC {
        return Err(Bad::Magic);
    }
    // (version 2 is version 1 with a compressed value; the flags and the version agree,
    // and one compression flag at most is set)
    let packed = buf[8] & FLAG_COMPRESSED;
    if (buf[6] != VERSION && buf[6] != VERSION_COMPRESSED)
        || (buf[6] == VERSION_COMPRESSED) != (packed != 0)
        || packed == FLAG_COMPRESSED
    {
        return Err(Bad::Version(buf[6]));
    }
    let kind = match buf[7] {
        1 => Kind::Put,
        2 => Kind::Delete,
        3 => Kind::Commit,
        k => return Err(Bad::Kind(k)),
    };
    let key_len = u32::from_le_bytes(buf[12..16].try_into().expect("4"));
    let seq = u64::from_le_bytes(buf[16..24].try_into().expect("8"));
    let val_len = u32::from_le_bytes(buf[24..28].try_into().expect("4"));
    if key_len as usize > MAX_KEY || (kind != Kind::Commit && val_len as usize > MAX_VALUE) {
        return Err(Bad::TooBig);
    }
    Ok(Header {
        kind,
        flags: buf[8],
        key_len,
        val_len,
        seq,
        mark_seg: u32::from_le_bytes([buf[9], buf[10], buf[11], 0]),
        mark_off: u32::from_le_bytes(buf[28..32].try_into().expect("4")),
    })
}

/// Check a whole record's CRC.
pub fn check(rec: &[u8]) -> Result<(), Bad> {
    if rec.len() < HEADER {
        return Err(Bad::Short);
    }
    let want = u32::from_le_bytes(rec[0..4].try_into().expect("4"));
    if crc32c::crc32c(&rec[4..]) != want {
        return Err(Bad::Crc);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut v = Vec::new();
        encode(&mut v, Kind::Put, 0, 7, b"key", b"value", 0);
        let h = parse_header(&v).unwrap();
        assert_eq!(h.kind, Kind::Put);
        assert_eq!(h.seq, 7);
        assert_eq!(
            (h.synced_in(1), h.synced_in(0)),
            (0, 0),
            "no mark: no claim"
        );
        assert_eq!(h.total(), v.len());
        assert!(check(&v).is_ok());
        v[HEADER] ^= 1;
        assert_eq!(check(&v), Err(Bad::Crc));
        let mut c = Vec::new();
        encode_commit(&mut c, 9, 3, 0);
        let h = parse_header(&c).unwrap();
        assert_eq!((h.kind, h.val_len, h.total()), (Kind::Commit, 3, HEADER));
    }

    #[test]
    fn compressed_values() {
        let text = b"{\"user\": \"ada\", \"tags\": [\"a\", \"b\"]} ".repeat(20);
        let c = compress(&text).expect("compressible");
        assert!(c.len() < text.len() / 4);
        assert_eq!(decompress(&c).unwrap(), text);
        // short or incompressible values are stored as they are
        assert_eq!(compress(&[7u8; COMPRESS_MIN - 1]), None);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        assert_eq!(compress(&noise), None);
        // a record with a compressed value is version 2, and its flag and version agree
        let mut v = Vec::new();
        encode(&mut v, Kind::Put, FLAG_LZ4, 7, b"k", &c, 0);
        assert_eq!(v[6], VERSION_COMPRESSED);
        let h = parse_header(&v).unwrap();
        assert_eq!(
            (h.flags & FLAG_LZ4, h.val_len as usize),
            (FLAG_LZ4, c.len())
        );
        let mut bad = v.clone();
        bad[8] &= !FLAG_LZ4; // version 2 without the flag
        assert_eq!(parse_header(&bad).err(), Some(Bad::Version(2)));
        let mut plain = Vec::new();
        encode(&mut plain, Kind::Put, 0, 7, b"k", b"v", 0);
        plain[8] |= FLAG_LZ4; // the flag in a version 1 record (a build that knew no LZ4)
        assert_eq!(parse_header(&plain).err(), Some(Bad::Version(1)));
        let mut z = Vec::new();
        encode(&mut z, Kind::Put, FLAG_ZSTD, 7, b"k", b"frame", 0);
        assert_eq!(
            (z[6], parse_header(&z).unwrap().flags),
            (VERSION_COMPRESSED, FLAG_ZSTD)
        );
        z[8] |= FLAG_LZ4; // both: not something an encoder writes
        assert_eq!(parse_header(&z).err(), Some(Bad::Version(2)));
        // damage that passes the CRC (not from this encoder) is an error, not a panic
        assert!(decompress(&[1, 2]).is_err());
        assert!(decompress(&[0xff, 0xff, 0xff, 0xff, 0]).is_err());
        assert!(decompress(&[16, 0, 0, 0, 0xf0, 1]).is_err());
    }

    #[test]
    fn seal_records() {
        let mut v = Vec::new();
        encode_seal(&mut v, 7, 3 << 30, mark(7, 100));
        assert_eq!(v.len(), SEAL_LEN);
        let h = parse_header(&v).unwrap();
        // an empty batch to a reader that knows no seal records
        assert_eq!((h.kind, h.val_len, h.total()), (Kind::Commit, 0, SEAL_LEN));
        assert_eq!(h.synced_in(7), 100);
        assert_eq!(parse_seal(&v), Some((7, 3 << 30)));
        assert_eq!(parse_seal(&v[..SEAL_LEN - 1]), None, "short");
        let mut bad = v.clone();
        bad[SEAL_LEN - 1] ^= 1;
        assert_eq!(parse_seal(&bad), None, "bad CRC");
        let mut c = Vec::new();
        encode_commit(&mut c, 9, 0, 0);
        encode(&mut c, Kind::Put, 0, 9, b"seal0123", b"", 0);
        assert_eq!(parse_seal(&c), None, "a batch's COMMIT is no seal");
    }

    #[test]
    fn durable_marks() {
        let mut v = Vec::new();
        encode(&mut v, Kind::Put, 0, 7, b"k", b"v", mark(0x0123_4567, 5000));
        encode_commit(&mut v, 8, 1, mark(3, u64::MAX));
        let h = parse_header(&v).unwrap();
        assert!(check(&v[..h.total()]).is_ok());
        // the segment it is about (24 bits of its id), and only that one
        assert_eq!(h.synced_in(0x0123_4567), 5000);
        assert_eq!(h.synced_in(0x0023_4567), 5000);
        assert_eq!(h.synced_in(0x0123_4568), 0);
        let c = parse_header(&v[h.total()..]).unwrap();
        assert_eq!(c.synced_in(3), u32::MAX as u64, "a bound, saturated");
        assert!(
            mark(2, 0) > mark(1, u32::MAX as u64),
            "later segments mark higher"
        );
    }
}
