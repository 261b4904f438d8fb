//! Which opcodes the running kernel supports (`IORING_REGISTER_PROBE`), by name.

use io_uring::opcode as op;

/// An opcode uringkit knows: its name, its number, and the first kernel that had it.
#[derive(Clone, Copy, Debug)]
pub struct OpInfo {
    pub name: &'static str,
    pub code: u8,
    pub since: &'static str,
}

macro_rules! ops {
    ($($name:literal => $ty:ty, $since:literal;)*) => {
        /// Every opcode uringkit names, in kernel order.
        pub const OPS: &[OpInfo] = &[$(OpInfo { name: $name, code: <$ty>::CODE, since: $since }),*];
    };
}

ops! {
    "nop" => op::Nop, "5.1";
    "readv" => op::Readv, "5.1";
    "writev" => op::Writev, "5.1";
    "fsync" => op::Fsync, "5.1";
    "read_fixed" => op::ReadFixed, "5.1";
    "write_fixed" => op::WriteFixed, "5.1";
    "poll_add" => op::PollAdd, "5.1";
    "poll_remove" => op::PollRemove, "5.1";
    "sync_file_range" => op::SyncFileRange, "5.2";
    "sendmsg" => op::SendMsg, "5.3";
    "recvmsg" => op::RecvMsg, "5.3";
    "timeout" => op::Timeout, "5.4";
    "timeout_remove" => op::TimeoutRemove, "5.5";
    "accept" => op::Accept, "5.5";
    "cancel" => op::AsyncCancel, "5.5";
    "link_timeout" => op::LinkTimeout, "5.5";
    "connect" => op::Connect, "5.5";
    "fallocate" => op::Fallocate, "5.6";
    "openat" => op::OpenAt, "5.6";
    "close" => op::Close, "5.6";
    "files_update" => op::FilesUpdate, "5.6";
    "statx" => op::Statx, "5.6";
    "read" => op::Read, "5.6";
    "write" => op::Write, "5.6";
    "fadvise" => op::Fadvise, "5.6";
    "madvise" => op::Madvise, "5.6";
    "send" => op::Send, "5.6";
    "recv" => op::Recv, "5.6";
    "openat2" => op::OpenAt2, "5.6";
    "epoll_ctl" => op::EpollCtl, "5.6";
    "splice" => op::Splice, "5.7";
    "provide_buffers" => op::ProvideBuffers, "5.7";
    "remove_buffers" => op::RemoveBuffers, "5.7";
    "tee" => op::Tee, "5.8";
    "shutdown" => op::Shutdown, "5.11";
    "renameat" => op::RenameAt, "5.11";
    "unlinkat" => op::UnlinkAt, "5.11";
    "mkdirat" => op::MkDirAt, "5.15";
    "symlinkat" => op::SymlinkAt, "5.15";
    "linkat" => op::LinkAt, "5.15";
    "msg_ring" => op::MsgRingData, "5.18";
    "fsetxattr" => op::FSetXattr, "5.19";
    "setxattr" => op::SetXattr, "5.19";
    "fgetxattr" => op::FGetXattr, "5.19";
    "getxattr" => op::GetXattr, "5.19";
    "socket" => op::Socket, "5.19";
    "uring_cmd" => op::UringCmd16, "5.19";
    "send_zc" => op::SendZc, "6.0";
    "sendmsg_zc" => op::SendMsgZc, "6.1";
    "read_multishot" => op::ReadMulti, "6.7";
    "waitid" => op::WaitId, "6.7";
    "futex_wait" => op::FutexWait, "6.7";
    "futex_wake" => op::FutexWake, "6.7";
    "futex_waitv" => op::FutexWaitV, "6.7";
    "fixed_fd_install" => op::FixedFdInstall, "6.8";
    "ftruncate" => op::Ftruncate, "6.9";
    "bind" => op::Bind, "6.11";
    "listen" => op::Listen, "6.11";
    "recv_zc" => op::RecvZc, "6.15";
    "epoll_wait" => op::EpollWait, "6.15";
    "readv_fixed" => op::ReadvFixed, "6.15";
    "writev_fixed" => op::WritevFixed, "6.15";
    "pipe" => op::Pipe, "6.16";
}

/// Look an opcode up by its uringkit name.
pub fn op_by_name(name: &str) -> Option<&'static OpInfo> {
    OPS.iter().find(|o| o.name == name)
}

/// Look an opcode up by number.
pub fn op_by_code(code: u8) -> Option<&'static OpInfo> {
    OPS.iter().find(|o| o.code == code)
}

/// Names of the opcodes this ring's kernel supports.
pub fn supported(ring: &io_uring::IoUring) -> std::io::Result<Vec<&'static str>> {
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    Ok(OPS
        .iter()
        .filter(|o| probe.is_supported(o.code))
        .map(|o| o.name)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = OPS.iter().map(|o| o.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), OPS.len());
    }

    #[test]
    fn lookup() {
        assert_eq!(op_by_name("nop").unwrap().code, 0);
        assert_eq!(op_by_code(op::Read::CODE).unwrap().name, "read");
    }
}
