//! The one classifier for Produce partition error codes (Java: `Sender.completeBatch`,
//! `TransactionManager.canRetry` / `handleFailedBatch` / `maybeTransitionToErrorState`; the
//! table in java-producer-state-machine.md §5.1). Every produce error decision in the engine
//! goes through [`classify_produce_error`].

use crate::protocol::error_code::code;

/// What a Produce partition error code means for the batch that received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProduceErrorClass {
    /// NONE: appended; complete and raise the last acked sequence and offset.
    Success,
    /// DUPLICATE_SEQUENCE_NUMBER (older brokers): already in the log; success with offset -1.
    DuplicateSequence,
    /// Retriable and the partition's leader metadata is stale (`InvalidMetadataException`):
    /// retry under the same stamp after a metadata refresh.
    RetriableRefreshMetadata,
    /// Retriable with no metadata refresh: retry under the same stamp.
    Retriable,
    /// OUT_OF_ORDER_SEQUENCE_NUMBER: decided by §4.7 (retry, with or without a bump).
    OutOfOrderSequence,
    /// UNKNOWN_PRODUCER_ID: decided by §4.6.
    UnknownProducerId,
    /// MESSAGE_TOO_LARGE: split when the batch has more than one record, else fail.
    MessageTooLarge,
    /// INVALID_PRODUCER_EPOCH on Produce: fail the batch; idempotent bumps for the partition
    /// (KIP-588: not fatal on produce).
    InvalidProducerEpoch,
    /// Fatal for the producer: every incomplete batch fails and later sends are refused.
    Fatal,
    /// Transactional only: the transaction must abort (INVALID_TXN_STATE, TRANSACTION_ABORTABLE).
    TransactionAbortable,
    /// Any other non-retriable error: fail the batch; idempotent bumps for the partition.
    NonRetriable,
}

impl ProduceErrorClass {
    /// True when the batch was definitely not appended by this attempt.
    pub fn is_definite_rejection(self) -> bool {
        !matches!(
            self,
            ProduceErrorClass::Success
                | ProduceErrorClass::DuplicateSequence
                // REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS_AFTER_APPEND may have appended.
                | ProduceErrorClass::Retriable
        )
    }
}

/// Classifies a Produce partition error code.
pub fn classify_produce_error(error_code: i16) -> ProduceErrorClass {
    use ProduceErrorClass::*;
    match error_code {
        code::NONE => Success,
        code::DUPLICATE_SEQUENCE_NUMBER => DuplicateSequence,
        code::UNKNOWN_TOPIC_OR_PARTITION
        | code::LEADER_NOT_AVAILABLE
        | code::NOT_LEADER_OR_FOLLOWER
        | code::REPLICA_NOT_AVAILABLE
        | code::FENCED_LEADER_EPOCH
        | code::KAFKA_STORAGE_ERROR
        | code::NETWORK_EXCEPTION
        | code::UNKNOWN_TOPIC_ID
        | code::INCONSISTENT_TOPIC_ID
        | code::LISTENER_NOT_FOUND
        | code::PREFERRED_LEADER_NOT_AVAILABLE
        | code::ELECTION_NOT_NEEDED
        | code::ELIGIBLE_LEADERS_NOT_AVAILABLE => RetriableRefreshMetadata,
        code::CORRUPT_MESSAGE
        | code::REQUEST_TIMED_OUT
        | code::NOT_ENOUGH_REPLICAS
        | code::NOT_ENOUGH_REPLICAS_AFTER_APPEND
        | code::UNKNOWN_LEADER_EPOCH
        | code::THROTTLING_QUOTA_EXCEEDED
        | code::CONCURRENT_TRANSACTIONS
        | code::COORDINATOR_LOAD_IN_PROGRESS
        | code::COORDINATOR_NOT_AVAILABLE
        | code::NOT_COORDINATOR
        | code::UNSTABLE_OFFSET_COMMIT => Retriable,
        code::OUT_OF_ORDER_SEQUENCE_NUMBER => OutOfOrderSequence,
        code::UNKNOWN_PRODUCER_ID => UnknownProducerId,
        code::MESSAGE_TOO_LARGE => MessageTooLarge,
        code::INVALID_PRODUCER_EPOCH => InvalidProducerEpoch,
        code::PRODUCER_FENCED
        | code::INVALID_PRODUCER_ID_MAPPING
        | code::CLUSTER_AUTHORIZATION_FAILED
        | code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        | code::UNSUPPORTED_VERSION => Fatal,
        code::INVALID_TXN_STATE | code::TRANSACTION_ABORTABLE => TransactionAbortable,
        _ => NonRetriable,
    }
}
