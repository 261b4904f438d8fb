//! crc32c block pattern (fio's verify=crc32c idea): every block carries its own offset and
//! a CRC32C of its contents, so a read-back detects corruption, torn and misplaced writes.
//!
//! Layout: `[magic u32][crc32c u32][offset u64][payload …]`, the CRC covering everything
//! after itself; the payload is a xorshift stream seeded by the offset, so the content of
//! a block depends only on where it lives (overwrites in any order stay verifiable).

const MAGIC: u32 = 0x756b_7631; // "ukv1"

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// Fill `buf` with the pattern for the block at `offset`.
pub fn fill(buf: &mut [u8], offset: u64) {
    assert!(buf.len() >= 16, "verify needs blocks of at least 16 bytes");
    let mut x = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf[16..].chunks_mut(8) {
        x = xorshift(x);
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
    buf[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    buf[8..16].copy_from_slice(&offset.to_le_bytes());
    let crc = crc32c::crc32c(&buf[8..]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Why a block failed verification.
#[derive(Debug, PartialEq, Eq)]
pub enum Bad {
    Magic,
    Crc { want: u32, got: u32 },
    Offset { want: u64, got: u64 },
}

pub fn check(buf: &[u8], offset: u64) -> Result<(), Bad> {
    if buf.len() < 16 || buf[0..4] != MAGIC.to_le_bytes() {
        return Err(Bad::Magic);
    }
    let want = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    let got = crc32c::crc32c(&buf[8..]);
    if want != got {
        return Err(Bad::Crc { want, got });
    }
    let at = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
    if at != offset {
        return Err(Bad::Offset {
            want: offset,
            got: at,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_detection() {
        let mut b = vec![0u8; 4096];
        fill(&mut b, 8192);
        assert_eq!(check(&b, 8192), Ok(()));
        assert!(matches!(check(&b, 4096), Err(Bad::Offset { .. })));
        b[100] ^= 1;
        assert!(matches!(check(&b, 8192), Err(Bad::Crc { .. })));
        let z = vec![0u8; 4096];
        assert_eq!(check(&z, 0), Err(Bad::Magic));
    }
}
