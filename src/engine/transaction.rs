//! Java's `TransactionManager`, transactional half: the states and their legal transitions
//! (docs/java-rules.md §6.1, in `transaction/state.rs`), the API calls and their
//! cached results (docs/java-rules.md §6.2, §6.3), the transactional request queue
//! (docs/java-rules.md §6.4, in `transaction/queue.rs`) and the partition membership sets
//! (docs/java-rules.md §1.2). Sans-IO: the engine (`sender.rs`) sends the request this module hands
//! out, classifies the answer with `txn_requests.rs` and feeds the outcome back here.
//!
//! # The transaction protocol between engines
//!
//! A producer with several engines (one per shard) has exactly one transaction manager, on the
//! engine with `owns_identity` (the *owner*). Every engine, the owner included, is a
//! *participant* for the partitions it owns. The two talk only through [`TxnAction`]s, which the
//! driver forwards; a one-engine driver loops each action back to the same engine:
//!
//! | action | from → to | the driver calls |
//! | --- | --- | --- |
//! | `AddPartitions` | participant → owner | `txn_add_partitions` |
//! | `PartitionsAdded` | owner → every participant | `txn_partitions_added` |
//! | `ProduceFailed` | participant → owner | `txn_produce_failed` |
//! | `Abortable` | owner → every participant | `txn_abortable` |
//! | `Flush` | owner → every participant | `txn_flush` |
//! | `Flushed` | participant → owner, once all reported | `txn_all_flushed` |
//! | `Ended` | owner → every participant | `txn_ended` |
//! | `IdentityReplaced` | owner → every engine | `on_identity` |
//! | `Fatal` | owner → every participant | `txn_fatal` |
//! | `Completed` | owner → application | `txn_result` |
//!
//! Invariants the protocol keeps:
//! - a partition's first batch of a transaction is not drained until the owner's
//!   AddPartitionsToTxn for it succeeded (`PartitionsAdded`; Java's `isSendToPartitionAllowed`);
//! - EndTxn is sent only after every participant reported `Flushed` for the current round,
//!   that is, had no incomplete batch left after the flush (Java's
//!   `RecordAccumulator.hasIncomplete` check);
//! - every participant learns the end of a transaction (`Ended`) before the owner accepts the
//!   next `begin_transaction`, because the driver forwards `Ended` before it returns the
//!   result of the commit or abort to the application;
//! - the driver delivers a participant's `AddPartitions` to the owner before the application's
//!   next transaction call (commit or abort), as Java's `send` adds the partition before it
//!   returns: a commit then sends AddPartitionsToTxn for it before EndTxn, and an abort fails
//!   its batches unsent;
//! - the new identity of an InitProducerId (`IdentityReplaced`) reaches every engine before
//!   the next transaction's first batch is drained, so each batch is stamped with the epoch
//!   its AddPartitionsToTxn named.
//!
//! # Transactions V2 (KIP-890 part 2)
//!
//! The protocol is chosen per transaction (`transaction/version.rs`). Under V2 the owner
//! answers a participant's `AddPartitions` at once with `PartitionsAdded`, sending nothing (the
//! partition joins the transaction at the coordinator with its first Produce v12, and joins
//! `partitions_in_transaction` here as Java's `maybeAddPartition` does); offsets go straight to
//! TxnOffsetCommit v5; and the identity every EndTxn v5 returns replaces the current one
//! (`IdentityReplaced`), so the next transaction's batches start at sequence 0 under the bumped
//! epoch. The gate of the first invariant below still holds: it only opens sooner.
//!
//! No PREPARED_TRANSACTION (two-phase commit). Deviations from
//! Java, each on purpose: requests of one priority go out FIFO (docs/java-rules.md §6.4 quirk);
//! produce requests are not paused while a transactional request is in flight
//! (docs/java-rules.md §0 quirk, see `sender/txn.rs`); an unknown-outcome produce failure always
//! makes the abort bump the epoch, also while committing, and so does a definite failure of a batch
//! whose partition had later batches on the wire (their sequences are moved down, while the broker
//! may hold them under the old ones); and when one of those later batches is of unknown outcome, no
//! sequence moves at all (Java's `adjustSequencesDueToFailedBatch` would re-stamp it). And an abort
//! sends EndTxn also when no add was answered but one lost its answer (`start_outcome_unknown`):
//! Java skips EndTxn then, and when the lost add had started the transaction at the coordinator,
//! the abort's KIP-360 InitProducerId meets it ongoing, and the coordinator fences the epoch
//! (`prepareFenceProducerEpoch`). That EndTxn's INVALID_TXN_STATE means no transaction was ongoing,
//! which is what the abort needed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::error::{ErrorCause, ProduceError, TransactionError};

use super::identity::ProducerIdAndEpoch;
use super::partition::TopicPartition;
use super::transaction_version::ClusterFeatures;
use super::{Micros, NodeId};
use crate::config::TransactionVersion;

mod queue;
mod state;
mod version;
pub use queue::{CoordinatorType, Priority, QueuedRequest, TxnRequest};
pub use state::TransactionState;

/// The handle of one transaction API call; its result is taken with
/// [`TransactionManager::take_result`] after [`TxnAction::Completed`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxnHandle(pub u64);

/// The API calls whose result is awaited (Java's `TransactionalRequestResult` operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOperation {
    InitTransactions,
    SendOffsetsToTransaction,
    CommitTransaction,
    AbortTransaction,
}

impl TxnOperation {
    pub fn name(self) -> &'static str {
        match self {
            TxnOperation::InitTransactions => "init_transactions",
            TxnOperation::SendOffsetsToTransaction => "send_offsets_to_transaction",
            TxnOperation::CommitTransaction => "commit_transaction",
            TxnOperation::AbortTransaction => "abort_transaction",
        }
    }
}

/// A consumer group's identity as TxnOffsetCommit v3+ sends it (Java's
/// `ConsumerGroupMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// The consumer group's id.
    pub group_id: String,
    /// The group's generation (-1: unknown, as `new` gives).
    pub generation_id: i32,
    /// This member's id (empty: unknown).
    pub member_id: String,
    /// The static member's instance id, if any.
    pub group_instance_id: Option<String>,
}

impl GroupMetadata {
    /// A group known only by its id (Java's `new ConsumerGroupMetadata(groupId)`).
    pub fn new(group_id: impl Into<String>) -> Self {
        GroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

/// One offset to commit with the transaction (Java's `OffsetAndMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    /// The offset to commit (the next record the group will read).
    pub offset: i64,
    /// The leader epoch of the last record consumed (-1: unknown).
    pub leader_epoch: i32,
    /// Free-form metadata committed with the offset.
    pub metadata: Option<String>,
}

impl OffsetAndMetadata {
    /// `offset`, with no leader epoch and no metadata.
    pub fn new(offset: i64) -> Self {
        OffsetAndMetadata {
            offset,
            leader_epoch: -1,
            metadata: None,
        }
    }
}

/// What the transaction layer asks the driver to do. See the module docs for the routing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnAction {
    /// A participant's partitions received their first batch of the transaction.
    AddPartitions { partitions: Vec<TopicPartition> },
    /// AddPartitionsToTxn succeeded for these partitions: their batches may be drained.
    PartitionsAdded { partitions: Vec<TopicPartition> },
    /// A participant's batch failed inside the transaction
    /// (`TransactionManager.maybeTransitionToErrorState`). `needs_bump`: the failure left sequences
    /// the broker may not agree on (an outcome unknown), so the abort must bump the epoch.
    ProduceFailed {
        error: ProduceError,
        needs_bump: bool,
        fatal: bool,
    },
    /// The transaction must be aborted: unsent batches fail with this error.
    Abortable { error: ProduceError },
    /// Commit or abort began: make every batch ready (commit) or fail the unsent ones (abort),
    /// then report `Flushed` with this round once nothing is incomplete.
    Flush { round: u64, abort: bool },
    /// This participant has no incomplete batch left for the round.
    Flushed { round: u64 },
    /// EndTxn succeeded, or the manager returned to UNINITIALIZED: every participant forgets
    /// the transaction's partitions and stops failing unsent batches.
    Ended,
    /// InitProducerId installed a new identity (the first one, or a bump).
    IdentityReplaced {
        from: ProducerIdAndEpoch,
        to: ProducerIdAndEpoch,
    },
    /// The transaction manager is in FATAL_ERROR: every engine fails its batches.
    Fatal { error: ProduceError },
    /// The API call's result is ready ([`TransactionManager::take_result`]).
    Completed { handle: TxnHandle },
}

#[derive(Debug, Clone)]
struct PendingOperation {
    handle: TxnHandle,
    op: TxnOperation,
    result: Option<Result<(), TransactionError>>,
}

/// The transaction manager of the owning engine. See the module docs.
#[derive(Debug)]
pub struct TransactionManager {
    pub transactional_id: String,
    pub transaction_timeout_ms: i32,
    state: TransactionState,
    last_error: Option<TransactionError>,
    /// `last_error` is InitProducerId's authorization failure (Java tests `lastError` for
    /// TransactionalIdAuthorizationException or ClusterAuthorizationException). Cleared
    /// whenever `last_error` changes.
    last_error_is_authorization: bool,
    /// The identity the transaction runs under (set by InitProducerId only).
    pub producer_id_and_epoch: ProducerIdAndEpoch,
    /// Appended to, not yet requested.
    pub new_partitions: BTreeSet<TopicPartition>,
    /// In an unfinished AddPartitionsToTxn.
    pub pending_partitions: BTreeSet<TopicPartition>,
    /// Confirmed by the coordinator: the drain gate.
    pub partitions_in_transaction: BTreeSet<TopicPartition>,
    pub pending_txn_offset_commits: BTreeMap<TopicPartition, OffsetAndMetadata>,
    /// Anything was added broker-side (`transactionStarted`).
    pub transaction_started: bool,
    /// An AddPartitionsToTxn or AddOffsetsToTxn of this transaction lost its answer: the
    /// coordinator may hold the transaction ongoing while `transaction_started` is false, so
    /// an abort still sends EndTxn (see the module's deviations).
    pub start_outcome_unknown: bool,
    /// `clientSideEpochBumpRequired`: the abort ends with InitProducerId(current id, epoch).
    pub epoch_bump_required: bool,
    /// The transaction coordinator speaks InitProducerId v3+ (KIP-360): a bump is possible.
    pub coordinator_supports_bumping_epoch: bool,
    pub transaction_coordinator: Option<NodeId>,
    pub group_coordinator: Option<NodeId>,
    /// `kacrab.transaction.version`.
    pub transaction_version_config: TransactionVersion,
    /// What the owner's connections' ApiVersions answers said (Java's `ApiVersions`).
    pub cluster: ClusterFeatures,
    /// Java's `isTransactionV2Enabled`, chosen at `init_transactions` and when a transaction
    /// ends (`transaction/version.rs`), never in the middle of one.
    transaction_v2: bool,
    /// The protocol of the transaction being committed or aborted, kept from the moment its
    /// completion began (when `transaction_v2` may already be the next one's) until it ended.
    completing_v2: Option<bool>,
    queue: Vec<QueuedRequest>,
    next_seq: u64,
    /// The request on the wire (at most one, docs/java-rules.md §0).
    pub in_flight: Option<QueuedRequest>,
    pending: Option<PendingOperation>,
    /// Results of calls that completed but were not taken yet, by handle (bounded: one per
    /// operation kind, since a new call of a kind replaces the old unread one).
    done: BTreeMap<TxnHandle, Result<(), TransactionError>>,
    next_handle: u64,
    flush_round: u64,
    flushed_round: u64,
    pub actions: VecDeque<TxnAction>,
}

impl TransactionManager {
    pub fn new(transactional_id: String, transaction_timeout_ms: i32) -> Self {
        TransactionManager {
            transactional_id,
            transaction_timeout_ms,
            state: TransactionState::Uninitialized,
            last_error: None,
            last_error_is_authorization: false,
            producer_id_and_epoch: ProducerIdAndEpoch::NONE,
            new_partitions: BTreeSet::new(),
            pending_partitions: BTreeSet::new(),
            partitions_in_transaction: BTreeSet::new(),
            pending_txn_offset_commits: BTreeMap::new(),
            transaction_started: false,
            start_outcome_unknown: false,
            epoch_bump_required: false,
            coordinator_supports_bumping_epoch: true,
            transaction_coordinator: None,
            group_coordinator: None,
            transaction_version_config: TransactionVersion::Auto,
            cluster: ClusterFeatures::default(),
            transaction_v2: false,
            completing_v2: None,
            queue: Vec::new(),
            next_seq: 0,
            in_flight: None,
            pending: None,
            done: BTreeMap::new(),
            next_handle: 1,
            flush_round: 0,
            flushed_round: 0,
            actions: VecDeque::new(),
        }
    }

    pub fn state(&self) -> TransactionState {
        self.state
    }

    pub fn last_error(&self) -> Option<&TransactionError> {
        self.last_error.as_ref()
    }

    pub fn queued(&self) -> impl Iterator<Item = &QueuedRequest> {
        self.queue.iter()
    }

    /// The flush round EndTxn waits for, and the last one every participant reported.
    pub fn flush_rounds(&self) -> (u64, u64) {
        (self.flush_round, self.flushed_round)
    }

    // ----------------------------------------------------------------------------------------
    // API calls (docs/java-rules.md §6.2, §6.3)
    // ----------------------------------------------------------------------------------------

    /// `TransactionManager.handleCachedTransactionRequestResult` / `throwIfPendingState`: the same
    /// operation again returns its pending handle; any other operation is refused while one is
    /// pending.
    fn check_pending(
        &self,
        operation: TxnOperation,
    ) -> Result<Option<TxnHandle>, TransactionError> {
        match &self.pending {
            Some(p) if p.op == operation => Ok(Some(p.handle)),
            Some(p) => Err(TransactionError::PendingOperation {
                operation: operation.name(),
                pending: p.op.name(),
            }),
            None => Ok(None),
        }
    }

    fn check_no_pending(&self, operation: &'static str) -> Result<(), TransactionError> {
        match &self.pending {
            Some(p) => Err(TransactionError::PendingOperation {
                operation,
                pending: p.op.name(),
            }),
            None => Ok(()),
        }
    }

    fn new_operation(&mut self, op: TxnOperation) -> TxnHandle {
        let handle = TxnHandle(self.next_handle);
        self.next_handle += 1;
        self.pending = Some(PendingOperation {
            handle,
            op,
            result: None,
        });
        handle
    }

    /// `initTransactions`: UNINITIALIZED → INITIALIZING, InitProducerId queued.
    pub fn init_transactions(&mut self) -> Result<TxnHandle, TransactionError> {
        if let Some(handle) = self.check_pending(TxnOperation::InitTransactions)? {
            return Ok(handle);
        }
        self.fail_if_error()?;
        self.transition_to(TransactionState::Initializing, "init_transactions")?;
        self.producer_id_and_epoch = ProducerIdAndEpoch::NONE;
        let handle = self.new_operation(TxnOperation::InitTransactions);
        self.enqueue(TxnRequest::InitProducerId { bump: false }, Some(handle), 0);
        Ok(handle)
    }

    /// `beginTransaction`: READY → IN_TRANSACTION, local only.
    pub fn begin_transaction(&mut self) -> Result<(), TransactionError> {
        self.check_no_pending("begin_transaction")?;
        self.fail_if_error()?;
        self.transition_to(TransactionState::InTransaction, "begin_transaction")
    }

    /// `maybeAddPartition`'s checks, made before a record is appended.
    pub fn check_send(&self) -> Result<(), TransactionError> {
        self.fail_if_error()?;
        self.check_no_pending("send")?;
        if self.state != TransactionState::InTransaction {
            return Err(TransactionError::InvalidState {
                operation: "send",
                state: self.state.name(),
            });
        }
        Ok(())
    }

    /// `sendOffsetsToTransaction`: under transactions V1 AddOffsetsToTxn, then TxnOffsetCommit;
    /// under V2 TxnOffsetCommit v5 alone (the group coordinator adds the group to the
    /// transaction), and the transaction counts as started (Java sets `transactionStarted` as it
    /// queues the request). An empty map does nothing: its handle is completed at once.
    pub fn send_offsets_to_transaction(
        &mut self,
        offsets: BTreeMap<TopicPartition, OffsetAndMetadata>,
        group: GroupMetadata,
    ) -> Result<TxnHandle, TransactionError> {
        if let Some(handle) = self.check_pending(TxnOperation::SendOffsetsToTransaction)? {
            return Ok(handle);
        }
        self.fail_if_error()?;
        if self.state != TransactionState::InTransaction {
            return Err(TransactionError::InvalidState {
                operation: "send_offsets_to_transaction",
                state: self.state.name(),
            });
        }
        let handle = self.new_operation(TxnOperation::SendOffsetsToTransaction);
        if offsets.is_empty() {
            self.complete(handle, Ok(()));
            return Ok(handle);
        }
        if self.transaction_v2 {
            self.transaction_started = true;
            self.pending_txn_offset_commits.extend(offsets);
            self.enqueue(
                TxnRequest::TxnOffsetCommit { group, v2: true },
                Some(handle),
                0,
            );
        } else {
            self.enqueue(TxnRequest::AddOffsets { group, offsets }, Some(handle), 0);
        }
        Ok(handle)
    }

    /// `commitTransaction` (`TransactionManager.beginCommit`).
    pub fn commit_transaction(&mut self) -> Result<TxnHandle, TransactionError> {
        if let Some(handle) = self.check_pending(TxnOperation::CommitTransaction)? {
            return Ok(handle);
        }
        self.fail_if_error()?;
        self.transition_to(
            TransactionState::CommittingTransaction,
            "commit_transaction",
        )?;
        let handle = self.new_operation(TxnOperation::CommitTransaction);
        self.begin_completing(true, handle);
        Ok(handle)
    }

    /// `abortTransaction` (`TransactionManager.beginAbort`): allowed from ABORTABLE_ERROR, not from
    /// FATAL.
    pub fn abort_transaction(&mut self) -> Result<TxnHandle, TransactionError> {
        if let Some(handle) = self.check_pending(TxnOperation::AbortTransaction)? {
            return Ok(handle);
        }
        if self.state == TransactionState::FatalError {
            self.fail_if_error()?;
        }
        self.transition_to(TransactionState::AbortingTransaction, "abort_transaction")?;
        self.new_partitions.clear();
        let handle = self.new_operation(TxnOperation::AbortTransaction);
        self.begin_completing(false, handle);
        Ok(handle)
    }

    /// `TransactionManager.beginCompletingTransaction`: AddPartitions for new partitions first
    /// (V1, so their batches can be flushed), then EndTxn under the ending transaction's
    /// protocol, then the protocol of the next one is chosen, then the epoch bump if one is owed
    /// (an abortable error under V1, or the move from V1 to V2).
    fn begin_completing(&mut self, commit: bool, handle: TxnHandle) {
        self.flush_round += 1;
        self.actions.push_back(TxnAction::Flush {
            round: self.flush_round,
            abort: !commit,
        });
        self.completing_v2 = Some(self.transaction_v2);
        let end = TxnRequest::EndTxn {
            commit,
            v2: self.transaction_v2,
        };
        // Only `kacrab.transaction.version=2` errs, and only at initialization.
        let _ = self.maybe_update_transaction_v2(false);
        if self.epoch_bump_required {
            self.enqueue(end, None, 0);
            self.enqueue(TxnRequest::InitProducerId { bump: true }, Some(handle), 0);
        } else {
            self.enqueue(end, Some(handle), 0);
        }
    }

    /// Takes a completed call's result; `None` while it is still running (or for a handle
    /// already taken). Taking it ends the pending operation (docs/java-rules.md §6.3).
    pub fn take_result(&mut self, handle: TxnHandle) -> Option<Result<(), TransactionError>> {
        if let Some(p) = &self.pending {
            if p.handle == handle {
                p.result.as_ref()?;
                return self.pending.take().and_then(|p| p.result);
            }
        }
        self.done.remove(&handle)
    }

    fn complete(&mut self, handle: TxnHandle, result: Result<(), TransactionError>) {
        match &mut self.pending {
            Some(p) if p.handle == handle => {
                if p.result.is_some() {
                    return;
                }
                p.result = Some(result);
            }
            _ => {
                if self.done.len() >= 8 {
                    self.done.pop_first();
                }
                self.done.insert(handle, result);
            }
        }
        self.actions.push_back(TxnAction::Completed { handle });
    }

    // ----------------------------------------------------------------------------------------
    // Participants' reports
    // ----------------------------------------------------------------------------------------

    /// A participant's partitions got their first batch. Returns those already in the
    /// transaction (the caller ungates them at once). Under transactions V2 that is every one
    /// accepted: Java's `maybeAddPartition` puts the partition in `partitionsInTransaction` and
    /// starts the transaction with no request, and its first Produce v12 adds it at the
    /// coordinator.
    pub fn add_partitions(&mut self, partitions: &[TopicPartition]) -> Vec<TopicPartition> {
        let mut already = Vec::new();
        // After the abort began, unadded partitions are not added: their batches are unsent and
        // fail with the abort.
        let accepting = matches!(
            self.state,
            TransactionState::InTransaction | TransactionState::CommittingTransaction
        );
        for tp in partitions {
            if self.partitions_in_transaction.contains(tp) {
                already.push(tp.clone());
            } else if accepting && self.current_transaction_v2() {
                self.partitions_in_transaction.insert(tp.clone());
                self.transaction_started = true;
                already.push(tp.clone());
            } else if accepting && !self.pending_partitions.contains(tp) {
                self.new_partitions.insert(tp.clone());
            }
        }
        already
    }

    /// A batch failed inside the transaction (`TransactionManager.maybeTransitionToErrorState`,
    /// docs/java-rules.md §4.3).
    pub fn produce_failed(&mut self, error: &ProduceError, needs_bump: bool, fatal: bool) {
        if self.state == TransactionState::FatalError {
            return;
        }
        if fatal {
            return self.transition_to_fatal(TransactionError::Fatal(ErrorCause::Record(
                Box::new(error.clone()),
            )));
        }
        if needs_bump && !self.can_handle_abortable_error() {
            // `transitionToAbortableErrorOrFatalError`: without a bump the sequences cannot
            // be brought back in line.
            let cause = ErrorCause::Record(Box::new(error.clone()));
            return self.transition_to_fatal(TransactionError::Fatal(ErrorCause::NoEpochBump(
                Box::new(cause),
            )));
        }
        // `needToTriggerEpochBumpFromClient` and not completing; an unknown outcome always
        // needs the bump. Under transactions V2 the abort's EndTxn bumps the epoch instead.
        if self.need_to_trigger_epoch_bump_from_client()
            && (needs_bump || !self.state.is_completing())
        {
            self.epoch_bump_required = true;
        }
        // INVALID_PRODUCER_EPOCH on produce is abortable (KIP-588), yet `maybeFailWithError`
        // re-throws it as itself, an `ApplicationRecoverableException` (KIP-1050): another
        // producer took over the transactional id, and commit and send say so.
        let fenced = matches!(
            error,
            ProduceError::Rejected {
                code: crate::protocol::error_code::code::INVALID_PRODUCER_EPOCH,
                ..
            }
        );
        let cause = ErrorCause::Record(Box::new(error.clone()));
        self.transition_to_abortable(if fenced {
            TransactionError::Fenced(cause)
        } else {
            TransactionError::Abortable(cause)
        });
    }

    /// Every participant reported `Flushed` for `round`.
    pub fn all_flushed(&mut self, round: u64) {
        self.flushed_round = self.flushed_round.max(round);
    }

    // ----------------------------------------------------------------------------------------
    // Outcomes of sent requests
    // ----------------------------------------------------------------------------------------

    /// The in-flight request failed with an error for its API call.
    pub fn fail_request(&mut self, request: &QueuedRequest, error: TransactionError) {
        if let Some(op) = request.op {
            self.complete(op, Err(error.clone()));
        }
        match &error {
            TransactionError::Abortable(_) => self.transition_to_abortable(error),
            _ => self.transition_to_fatal(error),
        }
    }

    /// InitProducerId was refused for authorization
    /// (`txn_requests::is_init_producer_id_authorization_failure`): the call fails and the
    /// manager turns abortable, as for any abortable error; the sender's next loop then
    /// returns it to UNINITIALIZED (`should_handle_authorization_error`).
    pub fn fail_unauthorized(&mut self, request: &QueuedRequest, error: TransactionError) {
        self.fail_request(request, error);
        if self.state == TransactionState::AbortableError {
            self.last_error_is_authorization = true;
        }
    }

    /// InitProducerId succeeded. The first one of `init_transactions` also chooses the
    /// protocol (Java's `KafkaProducer.initTransactions` calls
    /// `maybeUpdateTransactionV2Enabled(true)` once the call returned); a protocol forced to V2
    /// that the brokers cannot speak fails the call, fatally, and installs nothing. Returns
    /// whether the identity was installed.
    pub fn on_init_producer_id(
        &mut self,
        request: &QueuedRequest,
        identity: ProducerIdAndEpoch,
    ) -> bool {
        if request.request == (TxnRequest::InitProducerId { bump: false }) {
            if let Err(err) = self.maybe_update_transaction_v2(true) {
                self.fail_request(request, err);
                return false;
            }
        }
        let from = self.producer_id_and_epoch;
        self.producer_id_and_epoch = identity;
        self.epoch_bump_required = false;
        self.transition_internal(TransactionState::Ready);
        self.actions
            .push_back(TxnAction::IdentityReplaced { from, to: identity });
        if let Some(op) = request.op {
            self.complete(op, Ok(()));
        }
        true
    }

    /// The in-flight request's answer is lost (its connection closed, or the answer could not
    /// be read). An add may have started the transaction at the coordinator.
    pub fn on_answer_lost(&mut self, request: &QueuedRequest) {
        if matches!(
            request.request,
            TxnRequest::AddPartitions | TxnRequest::AddOffsets { .. }
        ) {
            self.start_outcome_unknown = true;
        }
    }

    /// AddPartitionsToTxn succeeded for every pending partition.
    pub fn on_partitions_added(&mut self) {
        let added: Vec<TopicPartition> = std::mem::take(&mut self.pending_partitions)
            .into_iter()
            .collect();
        self.partitions_in_transaction.extend(added.iter().cloned());
        self.transaction_started = true;
        self.actions
            .push_back(TxnAction::PartitionsAdded { partitions: added });
    }

    /// AddPartitionsToTxn failed after a full scan: the pending set is emptied
    /// (docs/java-rules.md §5.3).
    pub fn on_partitions_rejected(&mut self, request: &QueuedRequest, error: TransactionError) {
        self.pending_partitions.clear();
        self.fail_request(request, error);
    }

    /// AddOffsetsToTxn succeeded: TxnOffsetCommit shares its API call.
    pub fn on_offsets_added(&mut self, request: &QueuedRequest) {
        let TxnRequest::AddOffsets { group, offsets } = &request.request else {
            return;
        };
        self.transaction_started = true;
        self.pending_txn_offset_commits = offsets.clone();
        self.enqueue(
            TxnRequest::TxnOffsetCommit {
                group: group.clone(),
                v2: false,
            },
            request.op,
            0,
        );
    }

    /// TxnOffsetCommit answered: `committed` left the pending map; the call completes once the
    /// map is empty, else the rest is retried.
    pub fn on_offsets_committed(
        &mut self,
        request: QueuedRequest,
        committed: &[TopicPartition],
        retry_at: Micros,
    ) {
        for tp in committed {
            self.pending_txn_offset_commits.remove(tp);
        }
        if self.pending_txn_offset_commits.is_empty() {
            if let Some(op) = request.op {
                self.complete(op, Ok(()));
            }
        } else {
            self.requeue(request, retry_at);
        }
    }

    /// EndTxn succeeded (`resetTransactionState`): READY, or INITIALIZING when the epoch bump
    /// follows.
    ///
    /// The bump can become owed after the abort began and queued its EndTxn with the call's
    /// handle: a batch of unknown outcome that fails while the abort flushes always requires
    /// it (the deviation in the module docs; Java sets no bump while completing). The bump is
    /// queued here then and the call completes with it, so the call never reports success while
    /// the manager sits in INITIALIZING with nothing to leave it.
    pub fn on_end_txn(&mut self, request: &QueuedRequest) {
        self.reset_transaction_state();
        let bump = TxnRequest::InitProducerId { bump: true };
        let bump_queued = self.queue.iter().any(|q| q.request == bump);
        if self.state == TransactionState::Initializing && !bump_queued {
            self.enqueue(bump, request.op, 0);
            return;
        }
        if let Some(op) = request.op {
            self.complete(op, Ok(()));
        }
    }

    fn reset_transaction_state(&mut self) {
        if self.state == TransactionState::FatalError {
            return;
        }
        let target = if self.epoch_bump_required {
            TransactionState::Initializing
        } else {
            TransactionState::Ready
        };
        self.transition_internal(target);
        self.forget_transaction();
        self.actions.push_back(TxnAction::Ended);
    }

    /// Forgets the transaction's partitions, offsets and start: it ended, or the manager went
    /// back to UNINITIALIZED.
    fn forget_transaction(&mut self) {
        self.new_partitions.clear();
        self.pending_partitions.clear();
        self.partitions_in_transaction.clear();
        self.pending_txn_offset_commits.clear();
        self.transaction_started = false;
        self.start_outcome_unknown = false;
        self.completing_v2 = None;
    }

    /// Checks the manager's own invariants (tests and the simulator call it).
    pub fn assert_invariants(&self) {
        assert!(
            self.new_partitions
                .is_disjoint(&self.partitions_in_transaction),
            "a partition is both new and in the transaction"
        );
        assert!(
            self.pending_partitions
                .is_disjoint(&self.partitions_in_transaction),
            "a partition is both pending and in the transaction"
        );
        if matches!(
            self.state,
            TransactionState::AbortableError | TransactionState::FatalError
        ) {
            assert!(self.last_error.is_some(), "an error state without an error");
        }
        // Under Transactions V2 a partition joins the transaction with no request: none waits
        // for an AddPartitionsToTxn (`add_partitions`).
        if self.current_transaction_v2() {
            assert!(
                self.new_partitions.is_empty() && self.pending_partitions.is_empty(),
                "a partition waits for AddPartitionsToTxn under transactions V2"
            );
        }
        assert!(self.flushed_round <= self.flush_round);
        assert!(
            self.queue.len() <= 16,
            "the transactional queue grew unbounded"
        );
    }
}

#[cfg(test)]
mod tests;
