//! kacrab: a thread-per-core io_uring Kafka producer that writes records exactly once and in
//! order per partition, across retries, reconnects, broker failovers and lost responses.
//!
//! Partitions are sharded onto glommio executors, each pinned to a core of its own (by default one
//! per CPU the process can spare); each shard is the only owner of its partitions' sequence state
//! and its own broker sockets. The producer state machine (producer id, epoch, per-partition
//! sequences, `inflight_batches_by_sequence`, `maybe_resolve_sequences`, KIP-360 epoch bumps)
//! follows the Java client rule for rule, in a sans-IO engine that the runtime drives.

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

// The internal layers are private; the tests, the benchmarks and the simulator reach them
// through `testkit::internals` (feature `testkit`). Without the feature, what only those use
// (test-only accessors, invariant checks, the codec functions the reference broker needs)
// looks unused to the compiler: the engine and the codec allow that then. Builds with the
// feature still report their unused private items and imports.
#[cfg_attr(not(feature = "testkit"), allow(dead_code, unused_imports))]
#[cfg_attr(feature = "testkit", allow(missing_docs))]
mod engine;
#[cfg_attr(not(feature = "testkit"), allow(dead_code, unused_imports))]
#[cfg_attr(feature = "testkit", allow(missing_docs))]
mod protocol;
#[cfg_attr(feature = "testkit", allow(missing_docs))]
mod runtime;

pub mod config;
pub mod error;
pub mod metrics;
pub mod partitioner;
pub mod stats;

mod panics;
mod producer;
mod sync;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use config::{
    Acks, ConfigError, MetadataRecoveryStrategy, OAuthBearerToken, OAuthTokenProvider,
    ProducerConfig, ProducerConfigBuilder,
};
pub use engine::{
    GroupMetadata, OffsetAndMetadata, RecordMetadata, TopicPartition, TransactionState,
};
pub use error::{Error, ProduceError, TransactionError};
pub use metrics::ProducerMetrics;
pub use producer::{
    BatchDelivery, DeliveryFuture, Producer, ProducerBuilder, ProducerRecord, RecordHeader,
    ShardTask, ShardTaskError, TrySendError,
};
