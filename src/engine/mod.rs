//! The sans-IO producer engine: accumulator, per-partition sequence state, in-flight tracking,
//! metadata routing and error classification. It performs no I/O, reads no clock, spawns
//! nothing and takes no lock: the driver feeds it events (appends, connection results, frames,
//! time) and carries out the [`Action`]s it emits. The same engine runs inside a glommio shard,
//! inside the deterministic simulator, and inside unit tests.

pub mod batch;
pub mod batch_memory;
pub mod buffer_pool;
pub mod compression_ratio;
pub mod config;
pub mod connection;
pub mod error_class;
pub mod identity;
pub mod metadata;
pub mod metrics;
pub mod partition;
pub mod partition_index;
pub mod sender;
pub mod transaction;
pub mod transaction_version;
pub mod txn_requests;

use std::sync::Arc;

pub use identity::{EpochCoordinator, ProducerIdAndEpoch};
pub use partition::TopicPartition;
pub use sender::{Engine, EngineConfig};
pub use transaction::{
    GroupMetadata, OffsetAndMetadata, TransactionManager, TransactionState, TxnAction, TxnHandle,
};

use crate::error::ProduceError;
use crate::protocol::wire::Frame;

/// Microseconds on the driver's monotonic clock.
pub type Micros = u64;

/// A broker node id (negative for bootstrap addresses not yet resolved by Metadata).
pub type NodeId = i32;

/// Where a record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The record's topic.
    pub topic: Arc<str>,
    /// The partition it was written to.
    pub partition: i32,
    /// The record's offset; -1 when the broker answered DUPLICATE_SEQUENCE_NUMBER (it no longer
    /// knew the original offset) or `acks=0`.
    pub offset: i64,
    /// CreateTime as sent, or the broker's LogAppendTime.
    pub timestamp: i64,
}

/// The delivery handle of a run of consecutive records of one batch: one record appended by
/// [`Engine::append`], or every record an application thread encoded into a batch it handed
/// over whole ([`Engine::append_batch`]). The engine completes each handle exactly once.
pub trait Delivery: Sized {
    /// Every record of the run gets `result`: an error, or (a one-record run) its metadata.
    fn complete(self, result: Result<RecordMetadata, ProduceError>);

    /// The run is in the log from `offset` of `tp` on, its i-th record at `offset + i`.
    /// `timestamp` is the broker's log-append time of every record of the run, or, where the
    /// topic keeps create times, the record's own create time in a one-record run and
    /// [`NO_TIMESTAMP`](crate::protocol::record_batch::NO_TIMESTAMP) in a longer one, whose
    /// handle knows its records' times. A handle that knows its partition already overrides
    /// this to skip building the metadata (a reference count on the topic name per record).
    fn appended(self, tp: &TopicPartition, offset: i64, timestamp: i64) {
        self.complete(Ok(RecordMetadata {
            topic: tp.topic.clone(),
            partition: tp.partition,
            offset,
            timestamp,
        }));
    }

    /// Cuts the run at record `at` (0 < `at` < its length): `self` keeps the records before
    /// it and the result has the rest. Only a batch the broker refused as too large is cut
    /// (`split_and_reenqueue`), and only runs longer than one record, so the handles of
    /// [`Engine::append`] (one record each) are never asked to.
    fn split_off(&mut self, at: u32) -> Self {
        let _ = at;
        unreachable!("a one-record run is never cut")
    }
}

/// What the driver must do on the engine's behalf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Open a connection to `address` for `node`; answer with `on_connected` or
    /// `on_disconnected` carrying the same generation.
    Connect {
        node: NodeId,
        generation: u64,
        address: String,
    },
    /// Write one complete request frame on the connection, its segments in order.
    Write {
        node: NodeId,
        generation: u64,
        frame: Frame,
    },
    /// Close the connection (a protocol violation or a request timeout).
    Disconnect { node: NodeId, generation: u64 },
    /// A topic's partition count is known or changed (for the callers' partitioner).
    TopicMetadata {
        topic: Arc<str>,
        partition_count: i32,
        error_code: i16,
    },
    /// InitProducerId returned this identity; install it in the epoch coordinator.
    ProducerIdAssigned(ProducerIdAndEpoch),
    /// A partition needs the epoch bumped past `observed` (KIP-360).
    RequestEpochBump { observed: ProducerIdAndEpoch },
}
