//! Process-level facts and controls: seccomp, kernel version.

pub mod fileio;
pub mod fork;
pub mod helper;
pub mod nowait;
pub mod seccomp;

/// `uname -r`, e.g. "6.18.44-fc".
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain old data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid utsname we own.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    // SAFETY: the kernel NUL-terminates release.
    unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// (major, minor) of the running kernel.
pub fn kernel_version() -> (u32, u32) {
    parse_version(&kernel_release())
}

pub fn parse_version(s: &str) -> (u32, u32) {
    let mut it = s.split(|c: char| !c.is_ascii_digit());
    let major = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    let minor = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    (major, minor)
}

#[cfg(test)]
mod tests {
    #[test]
    fn version() {
        assert_eq!(super::parse_version("6.18.44-fc-v657"), (6, 18));
        assert_eq!(super::parse_version("5.4.0"), (5, 4));
    }
}
