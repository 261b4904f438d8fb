//! Numbers in messages, written the way Python users write them.

/// `v` as people write it: `2**64 - 1` rather than `18446744073709551615`.
pub fn int_bound(v: i128) -> String {
    let pow2 = |x: i128| x > 0 && x & (x - 1) == 0;
    if v > 0xFFFF && pow2(v + 1) {
        format!("2**{} - 1", (v + 1).trailing_zeros())
    } else if v < -0xFFFF && pow2(-v) {
        format!("-2**{}", (-v).trailing_zeros())
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::int_bound;

    #[test]
    fn bounds_read_like_python() {
        assert_eq!(int_bound(u64::MAX as i128), "2**64 - 1");
        assert_eq!(int_bound(i64::MIN as i128), "-2**63");
        assert_eq!(int_bound(u16::MAX as i128), "65535");
        assert_eq!(int_bound(0), "0");
    }
}
