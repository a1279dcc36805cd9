//! The one classifier for Produce partition error codes (Java: `Sender.completeBatch`,
//! `TransactionManager.canRetry` / `handleFailedBatch` / `maybeTransitionToErrorState`; the
//! table in docs/java-rules.md §5.1). Every produce error decision in the engine
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
    /// OUT_OF_ORDER_SEQUENCE_NUMBER: decided by docs/java-rules.md §4.7 (retry, with or without a
    /// bump).
    OutOfOrderSequence,
    /// UNKNOWN_PRODUCER_ID: decided by docs/java-rules.md §4.6.
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

/// Whether a Produce answer with this error code may come after the broker appended the batch,
/// so the batch may be in the log (on this leader, or on the next one if it was replicated):
/// its attempt's outcome is unknown. Such a batch is retried only under its original stamp and
/// never reported as definitely failed.
///
/// With `acks=all` the leader appends first, then parks the request in Kafka's
/// `DelayedProduce` until the in-sync replicas have the batch. Every error that request can end
/// with was decided after the append:
/// - REQUEST_TIMED_OUT: `DelayedProduce` starts each appended partition at REQUEST_TIMED_OUT
///   and the purgatory's expiry answers with it;
/// - NOT_ENOUGH_REPLICAS_AFTER_APPEND: `Partition.checkEnoughReplicasReachOffset`, the ISR
///   shrank below `min.insync.replicas` after the append;
/// - NOT_LEADER_OR_FOLLOWER: `Partition.checkEnoughReplicasReachOffset` when this broker is no
///   longer the leader (leadership moved while waiting), or `ReplicaManager.getPartitionOrError`
///   (`DelayedProduce.tryComplete` case A) when the replica was removed meanwhile;
/// - KAFKA_STORAGE_ERROR: `ReplicaManager.getPartitionOrError` when the partition's log
///   directory went offline after the append.
///
/// The same NOT_LEADER_OR_FOLLOWER and KAFKA_STORAGE_ERROR also come before any append (the
/// request reached a broker that was not the leader); the answer does not say which, so with
/// `acks=all` the producer must assume the append. With `acks=1` no request waits in
/// `DelayedProduce` (`ReplicaManager.delayedProduceRequestRequired` wants `acks=-1`), so those
/// two are answered only for a batch the leader did not take.
pub fn may_have_appended(error_code: i16, acks: i16) -> bool {
    match error_code {
        code::REQUEST_TIMED_OUT | code::NOT_ENOUGH_REPLICAS_AFTER_APPEND => true,
        code::NOT_LEADER_OR_FOLLOWER | code::KAFKA_STORAGE_ERROR => acks == -1,
        _ => false,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_errors_a_delayed_produce_can_end_with_may_have_appended() {
        for error in [
            code::REQUEST_TIMED_OUT,
            code::NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            code::NOT_LEADER_OR_FOLLOWER,
            code::KAFKA_STORAGE_ERROR,
        ] {
            assert!(
                may_have_appended(error, -1),
                "{}",
                crate::protocol::error_code::name(error)
            );
            assert!(matches!(
                classify_produce_error(error),
                ProduceErrorClass::Retriable | ProduceErrorClass::RetriableRefreshMetadata
            ));
        }
        // Refused before the append: the batch is not in the log.
        for error in [
            code::NOT_ENOUGH_REPLICAS,
            code::CORRUPT_MESSAGE,
            code::INVALID_RECORD,
            code::MESSAGE_TOO_LARGE,
            code::OUT_OF_ORDER_SEQUENCE_NUMBER,
        ] {
            assert!(
                !may_have_appended(error, -1),
                "{}",
                crate::protocol::error_code::name(error)
            );
        }
        // Without acks=all nothing waits for the replicas after the append.
        assert!(!may_have_appended(code::NOT_LEADER_OR_FOLLOWER, 1));
        assert!(!may_have_appended(code::KAFKA_STORAGE_ERROR, 1));
    }

    #[test]
    fn every_produce_error_code_gets_the_class_of_javas_sender() {
        use ProduceErrorClass::*;
        let table: &[(i16, ProduceErrorClass)] = &[
            (code::NONE, Success),
            (code::DUPLICATE_SEQUENCE_NUMBER, DuplicateSequence),
            (code::UNKNOWN_TOPIC_OR_PARTITION, RetriableRefreshMetadata),
            (code::LEADER_NOT_AVAILABLE, RetriableRefreshMetadata),
            (code::NOT_LEADER_OR_FOLLOWER, RetriableRefreshMetadata),
            (code::REPLICA_NOT_AVAILABLE, RetriableRefreshMetadata),
            (code::FENCED_LEADER_EPOCH, RetriableRefreshMetadata),
            (code::KAFKA_STORAGE_ERROR, RetriableRefreshMetadata),
            (code::NETWORK_EXCEPTION, RetriableRefreshMetadata),
            (code::UNKNOWN_TOPIC_ID, RetriableRefreshMetadata),
            (code::INCONSISTENT_TOPIC_ID, RetriableRefreshMetadata),
            (code::LISTENER_NOT_FOUND, RetriableRefreshMetadata),
            (
                code::PREFERRED_LEADER_NOT_AVAILABLE,
                RetriableRefreshMetadata,
            ),
            (code::ELECTION_NOT_NEEDED, RetriableRefreshMetadata),
            (
                code::ELIGIBLE_LEADERS_NOT_AVAILABLE,
                RetriableRefreshMetadata,
            ),
            (code::CORRUPT_MESSAGE, Retriable),
            (code::REQUEST_TIMED_OUT, Retriable),
            (code::NOT_ENOUGH_REPLICAS, Retriable),
            (code::NOT_ENOUGH_REPLICAS_AFTER_APPEND, Retriable),
            (code::UNKNOWN_LEADER_EPOCH, Retriable),
            (code::THROTTLING_QUOTA_EXCEEDED, Retriable),
            (code::CONCURRENT_TRANSACTIONS, Retriable),
            (code::COORDINATOR_LOAD_IN_PROGRESS, Retriable),
            (code::COORDINATOR_NOT_AVAILABLE, Retriable),
            (code::NOT_COORDINATOR, Retriable),
            (code::UNSTABLE_OFFSET_COMMIT, Retriable),
            (code::OUT_OF_ORDER_SEQUENCE_NUMBER, OutOfOrderSequence),
            (code::UNKNOWN_PRODUCER_ID, UnknownProducerId),
            (code::MESSAGE_TOO_LARGE, MessageTooLarge),
            (code::INVALID_PRODUCER_EPOCH, InvalidProducerEpoch),
            (code::PRODUCER_FENCED, Fatal),
            (code::INVALID_PRODUCER_ID_MAPPING, Fatal),
            (code::CLUSTER_AUTHORIZATION_FAILED, Fatal),
            (code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Fatal),
            (code::UNSUPPORTED_VERSION, Fatal),
            (code::INVALID_TXN_STATE, TransactionAbortable),
            (code::TRANSACTION_ABORTABLE, TransactionAbortable),
            (code::INVALID_RECORD, NonRetriable),
            (code::RECORD_LIST_TOO_LARGE, NonRetriable),
            (code::TOPIC_AUTHORIZATION_FAILED, NonRetriable),
            (code::UNKNOWN_SERVER_ERROR, NonRetriable),
        ];
        for &(error, class) in table {
            assert_eq!(
                classify_produce_error(error),
                class,
                "{}",
                crate::protocol::error_code::name(error)
            );
        }
    }
}
