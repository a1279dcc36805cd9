//! The runtime: one pinned glommio executor per shard, each driving its own [`Engine`] over its
//! own broker sockets. Protocol decisions live in the engine; this layer only moves bytes,
//! keeps time and carries commands between threads.
//!
//! Thread-per-core rules kept here: a shard's engine, sockets and timers never leave its
//! executor; application threads reach a shard only through its bounded command queue; no
//! call on a shard blocks its thread (DNS goes to glommio's blocking pool).
//!
//! [`Engine`]: crate::engine::Engine

mod connection;
mod identity_replica;
pub(crate) mod inbox;
mod sendmsg;
pub(crate) mod shard;
mod stats;
pub mod ticket_ring;
pub(crate) mod txn_driver;
mod uring;

pub(crate) use stats::RuntimeCounters;
pub use stats::{
    ConnectionError, ConnectionFailure, ConnectionReport, FramePart, RuntimeStats, RuntimeWatch,
    ShardReport, RECENT_FAILURES,
};
pub use uring::io_uring_preflight;

/// Why the runtime could not start or run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    #[error("io_uring is unavailable: {reason}")]
    IoUringUnavailable { reason: String },
    #[error("RLIMIT_MEMLOCK is {limit} bytes; glommio needs at least 524288 (raise LimitMEMLOCK)")]
    MemlockTooLow { limit: u64 },
    #[error("kacrab.cores names CPU {cpu}, which is not online (online: {online:?})")]
    CoreNotOnline { cpu: usize, online: Vec<usize> },
    #[error("failed to start shard {shard}: {reason}")]
    ShardStart { shard: usize, reason: String },
}

/// The CPUs this process may run on, in order.
pub fn online_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .map(|ids| ids.into_iter().map(|c| c.id).collect())
        .unwrap_or_else(|| vec![0])
}
