//! The transactional requests on the wire: one builder and one error classifier per API,
//! each classifier a transcription of its Java handler's table
//! (docs/java-rules.md §5.2–§5.8: `InitProducerIdHandler`, `AddPartitionsToTxnHandler`,
//! `AddOffsetsToTxnHandler`, `TxnOffsetCommitHandler`, `EndTxnHandler`, `FindCoordinatorHandler`).
//! Pure functions: the engine applies the outcome to the transaction manager.

use std::collections::BTreeMap;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, InitProducerIdRequest, ProducerId,
    TopicName, TransactionalId, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::{ErrorCause, TransactionError};
use crate::protocol::error_code::{self, code};

use super::identity::ProducerIdAndEpoch;
use super::partition::TopicPartition;
use super::transaction::{CoordinatorType, GroupMetadata, OffsetAndMetadata};
use super::NodeId;

/// `AddPartitionsToTxnHandler.ADD_PARTITIONS_RETRY_BACKOFF_MS`: the short retry when the
/// previous transaction is still completing.
pub const ADD_PARTITIONS_RETRY_BACKOFF_MS: u64 = 20;

/// What one answer (or its absence) means for the transaction manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Success: the handler's success effects apply.
    Done,
    /// Send again after the backoff; `short` is the 20 ms AddPartitions backoff.
    Retry { short: bool },
    /// Forget the coordinator, find it again, then retry (`lookupCoordinator` + `reenqueue`).
    LookupCoordinator(CoordinatorType),
    /// `abortableError`: fail the call, ABORTABLE_ERROR.
    Abortable(TransactionError),
    /// `abortableErrorIfPossible`: abortable with an epoch bump if the coordinator can bump,
    /// else fatal.
    AbortableIfPossible(TransactionError),
    /// `fatalError` (including fencing).
    Fatal(TransactionError),
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// `api` was answered with `error`.
fn failed(api: &'static str, error: i16) -> ErrorCause {
    ErrorCause::Response {
        request: api,
        code: error,
    }
}

fn fenced(api: &'static str, error: i16) -> TxnOutcome {
    TxnOutcome::Fatal(TransactionError::Fenced(failed(api, error)))
}

fn fatal(api: &'static str, error: i16) -> TxnOutcome {
    TxnOutcome::Fatal(TransactionError::Fatal(failed(api, error)))
}

fn abortable(api: &'static str, error: i16) -> TxnOutcome {
    TxnOutcome::Abortable(TransactionError::Abortable(failed(api, error)))
}

/// Kafka's `Errors.exception() instanceof RetriableException` for the codes a coordinator
/// returns.
pub fn is_retriable(error: i16) -> bool {
    matches!(
        error,
        code::CORRUPT_MESSAGE
            | code::UNKNOWN_TOPIC_OR_PARTITION
            | code::LEADER_NOT_AVAILABLE
            | code::NOT_LEADER_OR_FOLLOWER
            | code::REQUEST_TIMED_OUT
            | code::NETWORK_EXCEPTION
            | code::COORDINATOR_LOAD_IN_PROGRESS
            | code::COORDINATOR_NOT_AVAILABLE
            | code::NOT_COORDINATOR
            | code::NOT_ENOUGH_REPLICAS
            | code::NOT_ENOUGH_REPLICAS_AFTER_APPEND
            | code::CONCURRENT_TRANSACTIONS
            | code::KAFKA_STORAGE_ERROR
            | code::FENCED_LEADER_EPOCH
            | code::UNKNOWN_LEADER_EPOCH
            | code::UNSTABLE_OFFSET_COMMIT
            | code::THROTTLING_QUOTA_EXCEEDED
    )
}

// --------------------------------------------------------------------------------------------
// FindCoordinator (docs/java-rules.md §5.7)
// --------------------------------------------------------------------------------------------

pub fn find_coordinator_request(
    version: i16,
    key_type: CoordinatorType,
    key: &str,
) -> FindCoordinatorRequest {
    let request = FindCoordinatorRequest::default().with_key_type(key_type as i8);
    if version >= 4 {
        request.with_coordinator_keys(vec![str_bytes(key)])
    } else {
        request.with_key(str_bytes(key))
    }
}

/// The coordinator a FindCoordinator answer names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundCoordinator {
    pub node: NodeId,
    pub host: String,
    pub port: i32,
}

/// `FindCoordinatorHandler.handleResponse`.
pub fn classify_find_coordinator(
    version: i16,
    response: &FindCoordinatorResponse,
) -> Result<FoundCoordinator, TxnOutcome> {
    let (error, node, host, port) = if version >= 4 {
        // A response that does not hold exactly one coordinator is fatal.
        let [c] = response.coordinators.as_slice() else {
            return Err(TxnOutcome::Fatal(TransactionError::Fatal(
                ErrorCause::other(format!(
                    "FindCoordinator answered {} coordinators for one key",
                    response.coordinators.len()
                )),
            )));
        };
        (c.error_code, c.node_id.0, c.host.to_string(), c.port)
    } else {
        (
            response.error_code,
            response.node_id.0,
            response.host.to_string(),
            response.port,
        )
    };
    match error {
        code::NONE if node >= 0 && port > 0 => Ok(FoundCoordinator { node, host, port }),
        code::NONE => Err(TxnOutcome::Fatal(TransactionError::Fatal(
            ErrorCause::other(format!(
                "FindCoordinator answered an invalid node {node} at {host}:{port}"
            )),
        ))),
        e if is_retriable(e) => Err(TxnOutcome::Retry { short: false }),
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED => Err(fatal("FindCoordinator", error)),
        code::GROUP_AUTHORIZATION_FAILED | code::TRANSACTION_ABORTABLE => {
            Err(abortable("FindCoordinator", error))
        }
        _ => Err(fatal("FindCoordinator", error)),
    }
}

// --------------------------------------------------------------------------------------------
// InitProducerId (docs/java-rules.md §5.2)
// --------------------------------------------------------------------------------------------

/// With `bump` (KIP-360, v3+), the request carries the current identity so the coordinator
/// bumps that epoch instead of fencing it.
pub fn init_producer_id_request(
    transactional_id: &str,
    transaction_timeout_ms: i32,
    bump_from: Option<ProducerIdAndEpoch>,
) -> InitProducerIdRequest {
    let from = bump_from.unwrap_or(ProducerIdAndEpoch::NONE);
    InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(str_bytes(transactional_id))))
        .with_transaction_timeout_ms(transaction_timeout_ms)
        .with_producer_id(ProducerId(from.producer_id))
        .with_producer_epoch(from.epoch)
}

/// The InitProducerId errors after which the Sender fails the batches and returns to
/// UNINITIALIZED (`Sender.shouldHandleAuthorizationError`, docs/java-rules.md §0 step 3, §9 item
/// 18): the idempotent producer asks again by itself, the transactional one when
/// `init_transactions` is called again.
pub fn is_init_producer_id_authorization_failure(error: i16) -> bool {
    matches!(
        error,
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED | code::CLUSTER_AUTHORIZATION_FAILED
    )
}

/// `InitProducerIdHandler.handleResponse`.
pub fn classify_init_producer_id(error: i16) -> TxnOutcome {
    match error {
        code::NONE => TxnOutcome::Done,
        code::NOT_COORDINATOR | code::COORDINATOR_NOT_AVAILABLE => {
            TxnOutcome::LookupCoordinator(CoordinatorType::Transaction)
        }
        e if is_retriable(e) => TxnOutcome::Retry { short: false },
        // Abortable for the call; the sender's next loop then returns the manager to
        // UNINITIALIZED (`TransactionManager::should_handle_authorization_error`), so the
        // application can call `init_transactions` again.
        e if is_init_producer_id_authorization_failure(e) => abortable("InitProducerId", error),
        code::INVALID_PRODUCER_EPOCH | code::PRODUCER_FENCED => fenced("InitProducerId", error),
        code::TRANSACTION_ABORTABLE => abortable("InitProducerId", error),
        _ => fatal("InitProducerId", error),
    }
}

// --------------------------------------------------------------------------------------------
// AddPartitionsToTxn (docs/java-rules.md §5.3)
// --------------------------------------------------------------------------------------------

pub fn add_partitions_request<'a>(
    transactional_id: &str,
    identity: ProducerIdAndEpoch,
    partitions: impl IntoIterator<Item = &'a TopicPartition>,
) -> AddPartitionsToTxnRequest {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        topics.entry(&tp.topic).or_default().push(tp.partition);
    }
    let topics = topics
        .into_iter()
        .map(|(name, partitions)| {
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(str_bytes(name)))
                .with_partitions(partitions)
        })
        .collect();
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(str_bytes(transactional_id)))
        .with_v3_and_below_producer_id(ProducerId(identity.producer_id))
        .with_v3_and_below_producer_epoch(identity.epoch)
        .with_v3_and_below_topics(topics)
}

/// `AddPartitionsToTxnHandler.handleResponse`: the per-partition errors are scanned in turn
/// and the first one that returns decides; after a full scan, unauthorized topics, then any
/// other partition error, make it abortable. `nothing_in_transaction` picks the 20 ms backoff
/// for CONCURRENT_TRANSACTIONS.
pub fn classify_add_partitions(
    response: &AddPartitionsToTxnResponse,
    requested: &[TopicPartition],
    nothing_in_transaction: bool,
) -> TxnOutcome {
    const API: &str = "AddPartitionsToTxn";
    let mut unauthorized: Vec<String> = Vec::new();
    let mut partition_errors: Vec<String> = Vec::new();
    let mut answered = 0usize;
    for topic in &response.results_by_topic_v3_and_below {
        for p in &topic.results_by_partition {
            answered += 1;
            let error = p.partition_error_code;
            match error {
                code::NONE => {}
                code::COORDINATOR_NOT_AVAILABLE | code::NOT_COORDINATOR => {
                    return TxnOutcome::LookupCoordinator(CoordinatorType::Transaction)
                }
                code::CONCURRENT_TRANSACTIONS => {
                    return TxnOutcome::Retry {
                        short: nothing_in_transaction,
                    }
                }
                e if is_retriable(e) => return TxnOutcome::Retry { short: false },
                code::INVALID_PRODUCER_EPOCH | code::PRODUCER_FENCED => return fenced(API, error),
                code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                | code::INVALID_TXN_STATE
                | code::INVALID_PRODUCER_ID_MAPPING => return fatal(API, error),
                code::UNKNOWN_PRODUCER_ID => {
                    return TxnOutcome::AbortableIfPossible(TransactionError::Abortable(failed(
                        API, error,
                    )))
                }
                code::TRANSACTION_ABORTABLE => return abortable(API, error),
                code::TOPIC_AUTHORIZATION_FAILED => unauthorized.push(topic.name.0.to_string()),
                _ => partition_errors.push(format!(
                    "{}-{}: {}",
                    topic.name.0.as_str(),
                    p.partition_index,
                    error_code::name(error)
                )),
            }
        }
    }
    if !unauthorized.is_empty() {
        unauthorized.sort();
        unauthorized.dedup();
        return TxnOutcome::Abortable(TransactionError::Abortable(ErrorCause::Other {
            code: Some(code::TOPIC_AUTHORIZATION_FAILED),
            reason: format!("{API}: not authorized to access topics {unauthorized:?}"),
        }));
    }
    if !partition_errors.is_empty() {
        return TxnOutcome::Abortable(TransactionError::Abortable(ErrorCause::other(format!(
            "{API}: could not add partitions: {}",
            partition_errors.join(", ")
        ))));
    }
    if answered < requested.len() {
        // Java would leave the unanswered partitions pending forever; a broker that leaves
        // out a partition it was asked about is broken.
        return TxnOutcome::Fatal(TransactionError::Fatal(ErrorCause::other(format!(
            "{API} answered {answered} of {} partitions",
            requested.len()
        ))));
    }
    TxnOutcome::Done
}

// --------------------------------------------------------------------------------------------
// AddOffsetsToTxn (docs/java-rules.md §5.4)
// --------------------------------------------------------------------------------------------

pub fn add_offsets_request(
    transactional_id: &str,
    identity: ProducerIdAndEpoch,
    group_id: &str,
) -> AddOffsetsToTxnRequest {
    AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(str_bytes(transactional_id)))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_group_id(GroupId(str_bytes(group_id)))
}

/// `AddOffsetsToTxnHandler.handleResponse`.
pub fn classify_add_offsets(error: i16) -> TxnOutcome {
    const API: &str = "AddOffsetsToTxn";
    match error {
        code::NONE => TxnOutcome::Done,
        code::COORDINATOR_NOT_AVAILABLE | code::NOT_COORDINATOR => {
            TxnOutcome::LookupCoordinator(CoordinatorType::Transaction)
        }
        e if is_retriable(e) => TxnOutcome::Retry { short: false },
        code::UNKNOWN_PRODUCER_ID => {
            TxnOutcome::AbortableIfPossible(TransactionError::Abortable(failed(API, error)))
        }
        code::INVALID_PRODUCER_EPOCH | code::PRODUCER_FENCED => fenced(API, error),
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        | code::INVALID_TXN_STATE
        | code::INVALID_PRODUCER_ID_MAPPING => fatal(API, error),
        code::GROUP_AUTHORIZATION_FAILED | code::TRANSACTION_ABORTABLE => abortable(API, error),
        _ => fatal(API, error),
    }
}

// --------------------------------------------------------------------------------------------
// TxnOffsetCommit (docs/java-rules.md §5.5)
// --------------------------------------------------------------------------------------------

/// Java's `TxnOffsetCommitRequest.Builder.groupMetadataSet`: the metadata is a real
/// member's (from a consumer's `groupMetadata()`), not the default of a group known only by
/// its id (`GroupMetadata::new`).
fn group_metadata_set(group: &GroupMetadata) -> bool {
    !group.member_id.is_empty() || group.generation_id != -1 || group.group_instance_id.is_some()
}

/// The TxnOffsetCommit request at `version`, or the fatal error Java's
/// `TxnOffsetCommitRequest.Builder.build(version)` throws (UnsupportedVersionException, which
/// `TxnRequestHandler.onComplete` turns into `fatalError`).
pub fn txn_offset_commit_request(
    version: i16,
    transactional_id: &str,
    identity: ProducerIdAndEpoch,
    group: &GroupMetadata,
    offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
) -> Result<TxnOffsetCommitRequest, TransactionError> {
    // The generation, member id and group instance id exist on the wire from v3 on
    // (KIP-447, Kafka 2.5). Without them the group coordinator cannot fence a stale member
    // (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID), so an older coordinator
    // is refused rather than sent offsets that a zombie could commit. A group known only by
    // its id carries nothing to lose and goes out at any version.
    if version < 3 && group_metadata_set(group) {
        return Err(TransactionError::Fatal(ErrorCause::Other {
            code: Some(code::UNSUPPORTED_VERSION),
            reason: format!(
                "the group coordinator speaks TxnOffsetCommit up to version {version}; a \
                 consumer group's generation and member id need version 3 (Kafka 2.5), and \
                 without them a stale member's offsets could commit"
            ),
        }));
    }
    let mut topics: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, o) in offsets {
        topics.entry(&tp.topic).or_default().push(
            TxnOffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(o.offset)
                .with_committed_leader_epoch(o.leader_epoch)
                .with_committed_metadata(o.metadata.as_deref().map(str_bytes)),
        );
    }
    let topics = topics
        .into_iter()
        .map(|(name, partitions)| {
            TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(str_bytes(name)))
                .with_partitions(partitions)
        })
        .collect();
    let mut request = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(str_bytes(transactional_id)))
        .with_group_id(GroupId(str_bytes(&group.group_id)))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_topics(topics);
    if version >= 3 {
        request = request
            .with_generation_id(group.generation_id)
            .with_member_id(str_bytes(&group.member_id))
            .with_group_instance_id(group.group_instance_id.as_deref().map(str_bytes));
    }
    Ok(request)
}

/// What a TxnOffsetCommit answer decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffsetCommitOutcome {
    /// Partitions whose offset is committed (they leave the pending map).
    pub committed: Vec<TopicPartition>,
    /// `Done` when the scan found no stopping error: the rest (if any) is retried, after a
    /// group coordinator lookup when `lookup` is set.
    pub outcome: TxnOutcome,
    pub lookup: bool,
}

/// `TxnOffsetCommitHandler.handleResponse`.
pub fn classify_txn_offset_commit(response: &TxnOffsetCommitResponse) -> TxnOffsetCommitOutcome {
    const API: &str = "TxnOffsetCommit";
    let mut committed = Vec::new();
    let mut lookup = false;
    for topic in &response.topics {
        for p in &topic.partitions {
            let tp = TopicPartition::new(topic.name.0.as_str(), p.partition_index);
            let error = p.error_code;
            let stop = match error {
                code::NONE => {
                    committed.push(tp);
                    None
                }
                code::COORDINATOR_NOT_AVAILABLE
                | code::NOT_COORDINATOR
                | code::REQUEST_TIMED_OUT => {
                    lookup = true;
                    None
                }
                e if is_retriable(e) => None,
                code::GROUP_AUTHORIZATION_FAILED
                | code::FENCED_INSTANCE_ID
                | code::TRANSACTION_ABORTABLE
                | code::UNKNOWN_MEMBER_ID
                | code::ILLEGAL_GENERATION => Some(abortable(API, error)),
                code::INVALID_PRODUCER_EPOCH | code::PRODUCER_FENCED => Some(fenced(API, error)),
                _ => Some(fatal(API, error)),
            };
            if let Some(outcome) = stop {
                return TxnOffsetCommitOutcome {
                    committed,
                    outcome,
                    lookup: false,
                };
            }
        }
    }
    TxnOffsetCommitOutcome {
        committed,
        outcome: TxnOutcome::Done,
        lookup,
    }
}

// --------------------------------------------------------------------------------------------
// EndTxn (docs/java-rules.md §5.6)
// --------------------------------------------------------------------------------------------

pub fn end_txn_request(
    transactional_id: &str,
    identity: ProducerIdAndEpoch,
    commit: bool,
) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(TransactionalId(str_bytes(transactional_id)))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_committed(commit)
}

/// `EndTxnHandler.handleResponse`. TRANSACTION_ABORTABLE while aborting is fatal so an abort
/// cannot loop (KAFKA-19250). `started`: an add of the transaction was answered. An abort sent
/// without one (an add lost its answer) is answered INVALID_TXN_STATE when the coordinator
/// holds no ongoing transaction for the epoch (Kafka's `endTransaction`: Empty, CompleteCommit,
/// PrepareCommit): nothing is left to abort, so the abort is done.
pub fn classify_end_txn(error: i16, commit: bool, started: bool) -> TxnOutcome {
    const API: &str = "EndTxn";
    match error {
        code::NONE => TxnOutcome::Done,
        code::INVALID_TXN_STATE if !commit && !started => TxnOutcome::Done,
        code::COORDINATOR_NOT_AVAILABLE | code::NOT_COORDINATOR => {
            TxnOutcome::LookupCoordinator(CoordinatorType::Transaction)
        }
        e if is_retriable(e) => TxnOutcome::Retry { short: false },
        code::INVALID_PRODUCER_EPOCH | code::PRODUCER_FENCED => fenced(API, error),
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        | code::INVALID_TXN_STATE
        | code::INVALID_PRODUCER_ID_MAPPING => fatal(API, error),
        code::UNKNOWN_PRODUCER_ID => {
            TxnOutcome::AbortableIfPossible(TransactionError::Abortable(failed(API, error)))
        }
        code::TRANSACTION_ABORTABLE if !commit => {
            TxnOutcome::Fatal(TransactionError::Fatal(ErrorCause::Other {
                code: Some(error),
                reason: "Failed to abort transaction: EndTxn answered TRANSACTION_ABORTABLE"
                    .to_string(),
            }))
        }
        code::TRANSACTION_ABORTABLE => abortable(API, error),
        _ => fatal(API, error),
    }
}

#[cfg(test)]
mod tests;
