//! xkv: a crash-safe append-only KV store (MISSION.md §4, seed 003), Bitcask's design.

pub mod append;
pub mod dict;
pub mod index;
pub mod mapped;
pub mod order;
pub mod overlay;
pub mod record;
pub mod snapshot;
pub mod store;
pub mod table;

pub use store::{
    AutoCompact, Compression, Durability, Listed, Options, Recovery, Refresh, Refreshed, Store,
};
