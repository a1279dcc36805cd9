//! The errors an application sees, each saying what it promises about the log where a record
//! is concerned.

use std::sync::Arc;
use std::time::Duration;

use crate::protocol::error_code;

/// Why one record was not delivered. Each variant states what it promises about the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProduceError {
    /// The broker rejected the batch and it was never appended: the record is not in the log
    /// and never will be.
    #[error("{topic}-{partition}: broker rejected the batch with {name} ({code}){}; the record is not in the log", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Rejected {
        /// The record's topic.
        topic: Arc<str>,
        /// The record's partition.
        partition: i32,
        /// The broker's error code.
        code: i16,
        /// The error code's name, as Kafka's `Errors` enum spells it.
        name: String,
        /// The broker's error message, when it sent one.
        message: Option<String>,
    },
    /// An attempt's outcome was never learned before the batch failed: the record is in the
    /// log at most once, in order, or not at all.
    #[error("{topic}-{partition}: {reason}; outcome unknown: the record may be in the log (at most once, in order)")]
    OutcomeUnknown {
        /// The record's topic.
        topic: Arc<str>,
        /// The record's partition.
        partition: i32,
        /// Why the outcome is unknown (the connection that carried the attempt closed, the
        /// request timed out, the batch expired with an attempt in flight, ...).
        reason: String,
    },
    /// `delivery.timeout.ms` passed before any attempt could have been appended: the record is
    /// not in the log and never will be.
    #[error("{topic}-{partition}: delivery.timeout.ms ({timeout:?}) passed before the record was sent; it is not in the log")]
    TimedOut {
        /// The record's topic.
        topic: Arc<str>,
        /// The record's partition.
        partition: i32,
        /// `delivery.timeout.ms`.
        timeout: Duration,
    },
    /// The record is larger than a configured limit; it failed alone, before being queued.
    #[error("record of {size} bytes is larger than {key} ({limit})")]
    RecordTooLarge {
        /// The record's encoded size bound, in bytes.
        size: usize,
        /// The limit's value, in bytes.
        limit: usize,
        /// The limit's configuration key (`max.request.size` or `buffer.memory`).
        key: &'static str,
    },
    /// The partition does not exist in the topic: the record named it, or the application's
    /// [`Partitioner`](crate::partitioner::Partitioner) chose it. The record failed alone,
    /// before being queued.
    #[error(
        "partition {partition} does not exist in topic {topic} ({partition_count} partitions)"
    )]
    InvalidPartition {
        /// The record's topic.
        topic: Arc<str>,
        /// The partition the record named.
        partition: i32,
        /// How many partitions the topic has.
        partition_count: i32,
    },
    /// The topic was not found in the cluster metadata within `max.block.ms`.
    #[error("topic {topic} not present in metadata after {waited:?} (max.block.ms){}", last_error.as_deref().map(|e| format!(": {e}")).unwrap_or_default())]
    MetadataTimeout {
        /// The record's topic.
        topic: Arc<str>,
        /// How long the send waited.
        waited: Duration,
        /// The error the last metadata answer gave for the topic, if any.
        last_error: Option<String>,
    },
    /// `buffer.memory` stayed full for `max.block.ms`; the record was not queued and is not in
    /// the log.
    #[error("buffer.memory ({buffer_memory} bytes) stayed full for max.block.ms ({waited:?})")]
    BufferExhausted {
        /// `buffer.memory`, in bytes.
        buffer_memory: usize,
        /// How long the send waited for room.
        waited: Duration,
    },
    /// The producer hit a fatal error (fenced, unauthorized, unsupported version, ...); every
    /// later send fails with it. The record was not appended by this producer after the error.
    /// The cause carries the broker's error code when a broker's answer was the cause.
    #[error("producer is in a fatal error state: {0}")]
    Fatal(ErrorCause),
    /// SASL authentication with a broker failed (wrong credentials, a mechanism the broker
    /// does not enable, a server that failed SCRAM's checks): the producer is stopped, as by
    /// [`ProduceError::Fatal`], and opens no further connection. The record was not appended by
    /// this producer after the error.
    #[error("SASL authentication with {broker} using {mechanism} failed: {reason}; the producer is stopped")]
    Authentication {
        /// The broker, by id and address (or the bootstrap address).
        broker: String,
        /// The SASL mechanism (`sasl.mechanism`).
        mechanism: String,
        /// What failed: the broker's message, or the check the producer made.
        reason: String,
    },
    /// The TLS handshake with a broker was refused (`security.protocol=SSL` or `SASL_SSL`):
    /// its certificate did not verify (unknown authority, expired, not valid for the host),
    /// it refused the producer's client certificate or its absence, or the two share no TLS
    /// version. The producer is stopped, as by [`ProduceError::Authentication`], and opens no
    /// further connection. The record was not appended by this producer after the error.
    #[error("TLS with {broker} failed: {reason}; the producer is stopped")]
    Tls {
        /// The broker, by id and address (or the bootstrap address).
        broker: String,
        /// What the TLS library refused, and why.
        reason: String,
    },
    /// A shard of the producer stopped on a bug of its own (a panic, with its message): the
    /// producer is fatal, as by [`ProduceError::Fatal`]. A record failed with this error was
    /// never sent by that shard and is not in the log; one of its records that an attempt may
    /// have carried fails as [`ProduceError::OutcomeUnknown`] instead.
    #[error("shard {shard} of the producer panicked ({message}); the producer is stopped and the record is not in the log")]
    ShardPanicked {
        /// The shard's index.
        shard: usize,
        /// The panic's message.
        message: String,
    },
    /// The application's [`Partitioner`](crate::partitioner::Partitioner) panicked while
    /// choosing the record's partition (with the panic's message): the record failed alone,
    /// before being queued, and is not in the log; the producer goes on.
    #[error("the partitioner panicked choosing a partition for a record of {topic} ({message}); the record is not in the log")]
    PartitionerPanicked {
        /// The record's topic.
        topic: Arc<str>,
        /// The panic's message.
        message: String,
    },
    /// The producer was closed before the record could be sent; it is not in the log.
    #[error("producer closed before the record was sent")]
    Closed,
    /// `Producer::purge` removed the record before any attempt carried it: it is not in the
    /// log. In a transaction, as any failed record does, it makes the transaction abortable.
    #[error("the record was purged before it was sent; it is not in the log")]
    Purged,
    /// The record's transaction was aborted before the record was sent (Java's
    /// `TransactionAbortedException`): it is not in the log.
    #[error("the transaction was aborted before the record was sent; it is not in the log")]
    TransactionAborted,
    /// The record's transaction hit an error before the record was sent and must be aborted
    /// (Java fails undrained batches with the transaction manager's `lastError`): it is not in
    /// the log.
    #[error(
        "the transaction must be aborted ({0}); the record was not sent and is not in the log"
    )]
    TransactionAbortable(ErrorCause),
    /// A transactional producer refused the record before appending it (no transaction
    /// begun, a pending call, or an abortable or fatal error): it is not in the log.
    #[error("the transaction manager refused the send: {0}")]
    Transaction(TransactionError),
}

impl ProduceError {
    pub(crate) fn rejected(
        topic: &Arc<str>,
        partition: i32,
        code: i16,
        message: Option<String>,
    ) -> Self {
        ProduceError::Rejected {
            topic: topic.clone(),
            partition,
            code,
            name: error_code::name(code),
            message,
        }
    }

    /// Whether the record may be in the log despite the error.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, ProduceError::OutcomeUnknown { .. })
    }

    /// The Kafka error code behind the error, if a broker's answer was its cause.
    fn code(&self) -> Option<i16> {
        match self {
            ProduceError::Rejected { code, .. } => Some(*code),
            ProduceError::Fatal(cause) | ProduceError::TransactionAbortable(cause) => cause.code(),
            _ => None,
        }
    }
}

/// What a fatal, fenced or abortable error comes from: the Kafka error code a broker answered
/// with, where there is one, and what failed. Its text is the part of the error's message after
/// the variant's own words (`producer fenced: ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorCause {
    /// A broker answered `request` (the API's name, `"InitProducerId"`) with the error `code`.
    #[error("{request} failed: {}", error_code::name(*code))]
    Response {
        /// The API's name.
        request: &'static str,
        /// The Kafka error code it answered with.
        code: i16,
    },
    /// A broker answered a produce to `topic`-`partition` with the error `code`.
    #[error("{} on produce to {topic}-{partition}", error_code::name(*code))]
    Produce {
        /// The topic produced to.
        topic: Arc<str>,
        /// The partition produced to.
        partition: i32,
        /// The Kafka error code of the partition's answer.
        code: i16,
    },
    /// The broker `broker` (its node id) lacks a version of an API the producer needs
    /// (Java's `UnsupportedVersionException`, code UNSUPPORTED_VERSION).
    #[error("broker {broker}: {error}")]
    UnsupportedVersion {
        /// The broker's node id.
        broker: i32,
        /// Which API and versions were missing (the protocol layer's `VersionError`, as text).
        error: String,
    },
    /// A record's error: a batch's failure that the transaction, or the whole producer, takes
    /// as its own.
    #[error("{0}")]
    Record(Box<ProduceError>),
    /// The transaction's error, carried to the records it fails or to the producer it stops.
    #[error("{0}")]
    Transaction(Box<TransactionError>),
    /// `0` calls for an epoch bump that the transaction coordinator cannot make (its
    /// InitProducerId is older than v3, KIP-360): without one the sequences cannot be brought
    /// back in line, so the error is fatal.
    #[error("{0}; the coordinator cannot bump the epoch, so continuing is not safe")]
    NoEpochBump(Box<ErrorCause>),
    /// Anything else: `reason` says what failed, and `code` is the Kafka error code behind it
    /// when there is one (UNSUPPORTED_VERSION for a broker that lacks a version the producer
    /// needs, TOPIC_AUTHORIZATION_FAILED for topics AddPartitionsToTxn refused, ...).
    #[error("{reason}")]
    Other {
        /// The Kafka error code behind it, if any.
        code: Option<i16>,
        /// What failed.
        reason: String,
    },
}

impl ErrorCause {
    /// A cause with no Kafka error code behind it.
    pub fn other(reason: impl Into<String>) -> Self {
        ErrorCause::Other {
            code: None,
            reason: reason.into(),
        }
    }

    /// The Kafka error code behind the cause, if a broker's answer was it (looked for through
    /// the record or transaction error it carries).
    pub fn code(&self) -> Option<i16> {
        match self {
            ErrorCause::Response { code, .. } | ErrorCause::Produce { code, .. } => Some(*code),
            ErrorCause::UnsupportedVersion { .. } => Some(error_code::code::UNSUPPORTED_VERSION),
            ErrorCause::Record(error) => error.code(),
            ErrorCause::Transaction(error) => error.code(),
            ErrorCause::NoEpochBump(cause) => cause.code(),
            ErrorCause::Other { code, .. } => *code,
        }
    }
}

/// Why a transaction call failed (Java's KIP-1050 taxonomy,
/// `TransactionManager.maybeFailWithError`). Each variant says what the application may do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransactionError {
    /// The producer has no `transactional.id`.
    #[error("the producer is not transactional (no transactional.id)")]
    NotTransactional,
    /// The call is not legal in the transaction manager's state (Java's
    /// `IllegalStateException`); nothing changed.
    #[error("{operation} is not allowed in state {state}")]
    InvalidState {
        /// The call refused (Java's method name).
        operation: &'static str,
        /// The transaction manager's state (Java's `State` name).
        state: &'static str,
    },
    /// An earlier call timed out and its operation is still in progress: only that same call
    /// may be repeated until its result has been taken (`TransactionManager.throwIfPendingState`).
    #[error("{operation} is not allowed while {pending} is pending; call {pending} again")]
    PendingOperation {
        /// The call refused.
        operation: &'static str,
        /// The call whose result is still to be taken.
        pending: &'static str,
    },
    /// The transaction cannot commit; abort it and start again (Java's
    /// `TransactionAbortableException` and the abortable `KafkaException`s).
    #[error("the transaction must be aborted: {0}")]
    Abortable(ErrorCause),
    /// Another producer with the same `transactional.id` took over (Java's
    /// `ProducerFencedException`): close this producer.
    #[error("producer fenced: {0}")]
    Fenced(ErrorCause),
    /// An unrecoverable error: close the producer.
    #[error("transaction manager is in a fatal error state: {0}")]
    Fatal(ErrorCause),
    /// The call's result did not come within its timeout. The operation goes on: call the
    /// same method again to wait for (and take) its result; any other call is refused with
    /// [`PendingOperation`](TransactionError::PendingOperation) meanwhile (Java's
    /// `TimeoutException` on a transactional call).
    #[error("{operation} did not complete within {waited:?}; call it again for its result")]
    Timeout {
        /// The call that timed out.
        operation: &'static str,
        /// How long it waited.
        waited: Duration,
    },
    /// The call was made on a shard thread (from a delivery callback, or a token provider),
    /// where waiting for its result would wait for the shard that runs the caller: refused at
    /// once, and nothing changed. Make it from another thread.
    #[error("{operation} cannot be called on a shard thread (from a callback): it would wait for the shard that runs it")]
    OnShardThread {
        /// The call refused.
        operation: &'static str,
    },
    /// The producer was closed.
    #[error("the producer is closed")]
    Closed,
}

impl TransactionError {
    /// Whether the producer can go on after an abort (the error is not fatal).
    pub fn is_abortable(&self) -> bool {
        matches!(self, TransactionError::Abortable(_))
    }

    /// Whether the producer must be closed.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            TransactionError::Fenced(_) | TransactionError::Fatal(_)
        )
    }

    /// The Kafka error code behind the error, if a broker's answer was its cause.
    pub(crate) fn code(&self) -> Option<i16> {
        match self {
            TransactionError::Abortable(cause)
            | TransactionError::Fenced(cause)
            | TransactionError::Fatal(cause) => cause.code(),
            _ => None,
        }
    }
}

/// Why the runtime could not start or run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The kernel refused io_uring (`EPERM` under seccomp or `kernel.io_uring_disabled`,
    /// `ENOSYS` before Linux 5.1): no shard can run.
    #[error("io_uring is unavailable: {reason}")]
    IoUringUnavailable {
        /// The error `io_uring_setup` returned.
        reason: String,
    },
    /// `needed` is what `shards` executors lock (glommio's floor of 524288 bytes, and without
    /// CAP_IPC_LOCK about 48 KiB of rings plus 3 × `kacrab.io.memory.bytes` per shard).
    #[error("RLIMIT_MEMLOCK is {limit} bytes; {shards} shard(s) need {needed} (raise LimitMEMLOCK / ulimit -l, or lower kacrab.shards or kacrab.io.memory.bytes)")]
    MemlockTooLow {
        /// RLIMIT_MEMLOCK's soft limit, in bytes.
        limit: u64,
        /// What the shards need, in bytes.
        needed: u64,
        /// How many shards were to start.
        shards: usize,
    },
    /// `kacrab.cores` names a CPU outside this process's affinity mask.
    #[error("kacrab.cores names CPU {cpu}, which this process may not run on (its affinity mask: {online:?})")]
    CoreNotOnline {
        /// The CPU named.
        cpu: usize,
        /// The CPUs of the affinity mask.
        online: Vec<usize>,
    },
    /// A shard's executor did not start (glommio refused it).
    #[error("failed to start shard {shard}: {reason}")]
    ShardStart {
        /// The shard's index.
        shard: usize,
        /// glommio's error.
        reason: String,
    },
}

/// Errors building or running the producer itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid; no producer was started.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The shards could not start; no producer was started.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A record's send failed, with what [`ProduceError`] promises about the log (for `?` on
    /// a delivery's result in a function that returns this error).
    #[error(transparent)]
    Produce(#[from] ProduceError),
}

// The runtime's shards report their panics through this path.
pub(crate) use crate::panics::panic_message;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::error_code::code;

    #[test]
    fn a_cause_reads_as_the_answer_it_stands_for() {
        let fatal = ProduceError::Fatal(ErrorCause::Produce {
            topic: Arc::from("t"),
            partition: 3,
            code: code::CLUSTER_AUTHORIZATION_FAILED,
        });
        assert_eq!(
            fatal.to_string(),
            "producer is in a fatal error state: CLUSTER_AUTHORIZATION_FAILED on produce to t-3"
        );
        let fenced = TransactionError::Fenced(ErrorCause::Response {
            request: "EndTxn",
            code: code::PRODUCER_FENCED,
        });
        assert_eq!(
            fenced.to_string(),
            "producer fenced: EndTxn failed: PRODUCER_FENCED"
        );
        assert_eq!(
            ErrorCause::other("no nonce").to_string(),
            "no nonce",
            "a cause without a code is its reason"
        );
    }

    #[test]
    fn the_code_behind_a_cause_is_found_through_the_errors_it_carries() {
        let rejected = ProduceError::rejected(&Arc::from("t"), 0, code::INVALID_RECORD, None);
        let abortable = TransactionError::Abortable(ErrorCause::Record(Box::new(rejected)));
        let carried = ErrorCause::Transaction(Box::new(abortable.clone()));
        assert_eq!(carried.code(), Some(code::INVALID_RECORD));
        assert_eq!(
            ProduceError::TransactionAbortable(carried).to_string(),
            format!(
                "the transaction must be aborted ({abortable}); the record was not sent and is \
                 not in the log"
            )
        );
        let version = ErrorCause::UnsupportedVersion {
            broker: 1,
            error: crate::protocol::api::VersionError::Missing {
                api: crate::protocol::api::ApiKey::InitProducerId,
                ours: crate::protocol::api::ApiKey::InitProducerId.supported(),
            }
            .to_string(),
        };
        assert_eq!(version.code(), Some(code::UNSUPPORTED_VERSION));
        assert!(version.to_string().starts_with("broker 1: "), "{version}");
        assert_eq!(ErrorCause::other("x").code(), None);
    }

    #[test]
    fn a_cause_that_needs_an_epoch_bump_says_the_coordinator_cannot_make_it() {
        let rejected = ProduceError::rejected(&Arc::from("t"), 1, code::INVALID_RECORD, None);
        let fatal = TransactionError::Fatal(ErrorCause::NoEpochBump(Box::new(ErrorCause::Record(
            Box::new(rejected.clone()),
        ))));
        assert_eq!(
            fatal.to_string(),
            format!(
                "transaction manager is in a fatal error state: {rejected}; the coordinator \
                 cannot bump the epoch, so continuing is not safe"
            )
        );
        assert_eq!(fatal.code(), Some(code::INVALID_RECORD));
    }
}
