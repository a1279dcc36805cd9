//! What the runtime reports about itself ([`Producer::runtime_stats`],
//! [`Producer::runtime_watch`]): shard threads and sockets alive, connections made and why they
//! ended, and each shard's engine counters and producer identity. For operators who want to see
//! why a broker is unreachable, and for tests that check that a fault left nothing behind.
//!
//! [`Producer::runtime_stats`]: crate::Producer::runtime_stats
//! [`Producer::runtime_watch`]: crate::Producer::runtime_watch

pub use crate::engine::sender::EngineStats;
pub use crate::engine::ProducerIdAndEpoch;
pub use crate::protocol::api::{ApiKey, VersionRange};
pub use crate::protocol::wire::WireError;
pub use crate::runtime::{
    ConnectionError, ConnectionFailure, ConnectionReport, FramePart, RuntimeStats, RuntimeWatch,
    ShardReport, RECENT_FAILURES,
};
