//! Networking on io_uring: the echo server pattern of seed 001 §6 (multishot accept into
//! fixed files, multishot recv into a provided-buffer ring, send / send_zc from the
//! received buffer, batched completion handling) and a closed-loop load generator to
//! measure it against other servers.

pub mod echo;
pub mod load;
