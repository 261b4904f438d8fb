//! Numbers and errors in messages, written the way Python users read them.

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

/// An I/O error's text without std's " (os error N)" suffix, to go inside a sentence
/// (the errno reaches Python as `OSError.errno`, not in the text).
pub fn io_error(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or_default().to_string()
}

/// An OS error under a new message, its errno kept (`io::Error::new` keeps only the
/// kind): the Python bindings raise it as `OSError(errno, message)`.
#[derive(Debug)]
pub struct Reworded {
    pub errno: i32,
    pub msg: String,
}

impl std::fmt::Display for Reworded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Reworded {}

/// `e` (an OS error, or one reworded before) said as `msg`, errno and kind kept.
pub fn reword(e: &std::io::Error, msg: String) -> std::io::Error {
    match errno_of(e) {
        Some(errno) => std::io::Error::new(e.kind(), Reworded { errno, msg }),
        None => std::io::Error::new(e.kind(), msg),
    }
}

/// The errno of an OS error, or of one [`reword`]ed.
pub fn errno_of(e: &std::io::Error) -> Option<i32> {
    e.raw_os_error()
        .or_else(|| e.get_ref()?.downcast_ref::<Reworded>().map(|r| r.errno))
}

#[cfg(test)]
mod tests {
    use super::{errno_of, int_bound, io_error, reword};

    #[test]
    fn bounds_read_like_python() {
        assert_eq!(int_bound(u64::MAX as i128), "2**64 - 1");
        assert_eq!(int_bound(i64::MIN as i128), "-2**63");
        assert_eq!(int_bound(u16::MAX as i128), "65535");
        assert_eq!(int_bound(0), "0");
    }

    #[test]
    fn io_errors_without_the_os_error_suffix() {
        let e = std::io::Error::from_raw_os_error(28);
        assert_eq!(io_error(&e), "No space left on device");
        let custom = std::io::Error::other("plain text");
        assert_eq!(io_error(&custom), "plain text");
    }

    #[test]
    fn a_reworded_error_keeps_its_errno() {
        let e = std::io::Error::from_raw_os_error(20);
        let r = reword(&e, format!("/x/LOCK: {}", io_error(&e)));
        assert_eq!(
            (errno_of(&r), r.to_string().as_str()),
            (Some(20), "/x/LOCK: Not a directory")
        );
        let again = reword(&r, format!("open: {r}"));
        assert_eq!(errno_of(&again), Some(20));
        assert_eq!(
            errno_of(&reword(&std::io::Error::other("x"), "y".into())),
            None
        );
    }
}
