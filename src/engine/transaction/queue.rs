//! The transactional request queue (`TransactionManager.nextRequest`,
//! `TransactionManager.Priority`, docs/java-rules.md §6.4): the requests, their priorities and
//! coordinators, and the choice of the next one to send (by priority; EndTxn only once its flush
//! round is reported; in an error state the queued requests end with the error instead, except a
//! FindCoordinator while the error is abortable).

use std::collections::BTreeMap;

use super::super::partition::TopicPartition;
use super::super::Micros;
use super::{GroupMetadata, OffsetAndMetadata, TransactionManager, TransactionState, TxnHandle};

/// FindCoordinator `key_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoordinatorType {
    Group = 0,
    Transaction = 1,
}

/// `TransactionManager.Priority`, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Priority {
    FindCoordinator = 0,
    InitProducerId = 1,
    AddPartitionsOrOffsets = 2,
    EndTxn = 3,
    EpochBump = 4,
}

/// A transactional request waiting in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnRequest {
    FindCoordinator {
        key_type: CoordinatorType,
        key: String,
    },
    /// With `bump`, it carries the current producer id and epoch (KIP-360,
    /// docs/java-rules.md §4.5).
    InitProducerId { bump: bool },
    /// Carries the whole pending set when it is sent (`TransactionManager.nextRequest` step 1).
    AddPartitions,
    AddOffsets {
        group: GroupMetadata,
        offsets: BTreeMap<TopicPartition, OffsetAndMetadata>,
    },
    /// Sends the offsets still in `pending_txn_offset_commits`. `v2`: queued under
    /// transactions V2, so sent at v5+ (the group joins the transaction with it); under V1 at
    /// v4 at most (Java's `TxnOffsetCommitRequest.Builder` takes the flag when it is built).
    TxnOffsetCommit { group: GroupMetadata, v2: bool },
    /// `v2`: the ending transaction ran under transactions V2, so EndTxn goes at v5+ and
    /// returns the bumped epoch; under V1 at v4 at most (`EndTxnRequest.Builder`).
    EndTxn { commit: bool, v2: bool },
}

impl TxnRequest {
    pub fn priority(&self) -> Priority {
        match self {
            TxnRequest::FindCoordinator { .. } => Priority::FindCoordinator,
            TxnRequest::InitProducerId { bump: false } => Priority::InitProducerId,
            TxnRequest::InitProducerId { bump: true } => Priority::EpochBump,
            TxnRequest::AddPartitions
            | TxnRequest::AddOffsets { .. }
            | TxnRequest::TxnOffsetCommit { .. } => Priority::AddPartitionsOrOffsets,
            TxnRequest::EndTxn { .. } => Priority::EndTxn,
        }
    }

    /// Which coordinator answers it (`None`: any node, the least loaded).
    pub fn coordinator(&self) -> Option<CoordinatorType> {
        match self {
            TxnRequest::FindCoordinator { .. } => None,
            TxnRequest::TxnOffsetCommit { .. } => Some(CoordinatorType::Group),
            _ => Some(CoordinatorType::Transaction),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            TxnRequest::FindCoordinator { .. } => "FindCoordinator",
            TxnRequest::InitProducerId { .. } => "InitProducerId",
            TxnRequest::AddPartitions => "AddPartitionsToTxn",
            TxnRequest::AddOffsets { .. } => "AddOffsetsToTxn",
            TxnRequest::TxnOffsetCommit { .. } => "TxnOffsetCommit",
            TxnRequest::EndTxn { .. } => "EndTxn",
        }
    }
}

/// A queued request with the API call it completes.
#[derive(Debug, Clone)]
pub struct QueuedRequest {
    pub request: TxnRequest,
    /// The call whose result this request decides (on success only if it is the last step).
    pub op: Option<TxnHandle>,
    /// FIFO order within a priority (Java's heap is not FIFO; a harmless refinement,
    /// docs/java-rules.md §6.4).
    seq: u64,
    /// Not sent before this time (the handler's backoff before a retry).
    pub retry_at: Micros,
}

impl TransactionManager {
    pub fn enqueue(&mut self, request: TxnRequest, op: Option<TxnHandle>, retry_at: Micros) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push(QueuedRequest {
            request,
            op,
            seq,
            retry_at,
        });
    }

    /// Puts a request back in its place (a retry keeps its order).
    pub fn requeue(&mut self, mut request: QueuedRequest, retry_at: Micros) {
        request.retry_at = retry_at;
        self.queue.push(request);
    }

    /// `TransactionManager.lookupCoordinator`: forget the cached node, queue FindCoordinator
    /// (once).
    pub fn lookup_coordinator(&mut self, key_type: CoordinatorType, key: String) {
        tracing::debug!(
            target: "kacrab::transaction",
            coordinator = ?key_type,
            "looking up the coordinator"
        );
        match key_type {
            CoordinatorType::Transaction => self.transaction_coordinator = None,
            CoordinatorType::Group => self.group_coordinator = None,
        }
        let queued = self.queue.iter().chain(self.in_flight.iter()).any(|q| {
            matches!(&q.request, TxnRequest::FindCoordinator { key_type: t, .. } if *t == key_type)
        });
        if !queued {
            self.enqueue(TxnRequest::FindCoordinator { key_type, key }, None, 0);
        }
    }

    fn head_index(&self) -> Option<usize> {
        self.queue
            .iter()
            .enumerate()
            .min_by_key(|(_, q)| (q.request.priority(), q.seq))
            .map(|(i, _)| i)
    }

    /// `TransactionManager.nextRequest`: the next request to send now, popped from the queue, or
    /// `None`. Requests dequeued in an error state fail with `last_error` unsent
    /// (docs/java-rules.md §5.8); an EndTxn waits for the flush of its round; an EndTxn with
    /// nothing started completes unsent (KAFKA-18401), unless an add lost its answer and may have
    /// started it.
    pub fn next_request(&mut self, now: Micros) -> Option<QueuedRequest> {
        if self.in_flight.is_some() {
            return None;
        }
        if !self.new_partitions.is_empty()
            && !self
                .queue
                .iter()
                .any(|q| q.request == TxnRequest::AddPartitions)
        {
            self.enqueue(TxnRequest::AddPartitions, None, 0);
        }
        loop {
            let index = self.head_index()?;
            let head = &self.queue[index];
            let is_end = matches!(head.request, TxnRequest::EndTxn { .. });
            if is_end && self.flushed_round < self.flush_round {
                return None;
            }
            let error_state = matches!(
                self.state,
                TransactionState::AbortableError | TransactionState::FatalError
            );
            let find_in_abortable = self.state == TransactionState::AbortableError
                && matches!(head.request, TxnRequest::FindCoordinator { .. });
            if error_state && !find_in_abortable {
                let request = self.queue.swap_remove(index);
                if request.request == TxnRequest::AddPartitions {
                    self.new_partitions.clear();
                    self.pending_partitions.clear();
                }
                if let (Some(op), Some(err)) = (request.op, self.last_error.clone()) {
                    self.complete(op, Err(err));
                }
                continue;
            }
            if is_end && !self.transaction_started && !self.start_outcome_unknown {
                let request = self.queue.swap_remove(index);
                if let Some(op) = request.op {
                    self.complete(op, Ok(()));
                }
                self.reset_transaction_state();
                continue;
            }
            if head.retry_at > now {
                return None;
            }
            let mut request = self.queue.swap_remove(index);
            if request.request == TxnRequest::AddPartitions {
                if self.new_partitions.is_empty() && self.pending_partitions.is_empty() {
                    continue;
                }
                let new = std::mem::take(&mut self.new_partitions);
                self.pending_partitions.extend(new);
            }
            request.retry_at = 0;
            return Some(request);
        }
    }

    /// When the queue next has something to send by time alone.
    pub fn next_retry_at(&self) -> Option<Micros> {
        if self.in_flight.is_some() {
            return None;
        }
        self.head_index().map(|i| self.queue[i].retry_at)
    }
}
