//! The participant's half of a transaction (see `engine/transaction.rs` for the protocol
//! between engines): which of this engine's partitions may drain (the gate, Java's
//! `isSendToPartitionAllowed`), the Produce version the transaction's protocol asks for, the
//! failing of unsent batches while the transaction aborts, the flush report, and the failures
//! reported to the owner.

use std::collections::HashSet;

use crate::error::{ErrorCause, ProduceError};
use crate::protocol::api::ApiKey;

use super::super::transaction::TxnAction;
use super::super::transaction_version;
use super::super::{Delivery, NodeId};
use super::Engine;

/// A participant's view of the current transaction: which of its partitions may drain, and
/// the commands the owner sent.
#[derive(Debug, Default)]
pub struct TxnParticipant {
    /// Partitions (slot indexes) confirmed in the transaction.
    pub added: HashSet<usize>,
    /// Partitions asked for and not confirmed yet.
    pub requested: HashSet<usize>,
    /// Unsent batches fail with this (the transaction is abortable or aborting).
    pub fail_unsent: Option<ProduceError>,
    /// A flush the owner waits for.
    pub flush_round: Option<u64>,
    /// A definitely failed batch had later batches of its partition on the wire: their
    /// sequences were moved down (or, with one of unknown outcome among them, left as they
    /// are), but the broker may already hold them under the old ones (a producer's first write
    /// to a partition is accepted at any sequence), so only an epoch bump brings client and
    /// broker back in line. Consumed by the failure's report.
    pub sequences_diverged: bool,
    /// The transaction whose partitions this participant drains runs under transactions V2:
    /// its Produce requests go at v12, which adds each partition to the transaction at the
    /// coordinator; under V1 at v11 at most. Set by the owner with `PartitionsAdded`, before
    /// any batch of the transaction may drain (`txn_set_transaction_v2`).
    pub transaction_v2: bool,
}

impl<D: Delivery> Engine<D> {
    /// At append: a partition's first batch of the transaction asks to be added.
    pub(super) fn txn_on_append(&mut self, slot_index: usize) {
        if !self.is_transactional()
            || self.participant.added.contains(&slot_index)
            || !self.participant.requested.insert(slot_index)
        {
            return;
        }
        let tp = self.partitions[slot_index].tp.clone();
        self.txn_actions.push_back(TxnAction::AddPartitions {
            partitions: vec![tp],
        });
    }

    /// The drain gate (`TransactionManager.isSendToPartitionAllowed`) for an unstamped head.
    pub(super) fn txn_send_allowed(&self, slot_index: usize) -> bool {
        !self.is_transactional()
            || (self.participant.added.contains(&slot_index)
                && self.participant.fail_unsent.is_none())
    }

    /// Every loop: unsent batches fail while the transaction is abortable or aborting
    /// (`RecordAccumulator.abortUndrainedBatches`); then a pending flush is reported once nothing
    /// is left.
    pub(super) fn txn_participant_poll(&mut self) {
        if !self.is_transactional() {
            return;
        }
        if let Some(err) = self.participant.fail_unsent.clone() {
            for slot_index in 0..self.partitions.len() {
                let slot = &mut self.partitions[slot_index];
                if !slot.deque.iter().any(|b| b.stamp.is_none()) {
                    continue;
                }
                let (stamped, unsent): (Vec<_>, Vec<_>) =
                    slot.deque.drain(..).partition(|b| b.stamp.is_some());
                slot.deque.extend(stamped);
                for batch in unsent {
                    self.finish_batch(slot_index, batch, Err(err.clone()));
                }
            }
        }
        if let Some(round) = self.participant.flush_round {
            if self.incomplete_batches.is_empty() {
                self.participant.flush_round = None;
                self.flushes = self.flushes.saturating_sub(1);
                self.txn_actions.push_back(TxnAction::Flushed { round });
            }
        }
    }

    /// A batch of the transaction failed: the owner must learn it (`maybeTransitionToErrorState`).
    /// Failures that come from the transaction's own state are not reported back.
    pub(super) fn txn_report_failure(&mut self, error: &ProduceError, fatal: bool) {
        if !self.is_transactional() {
            return;
        }
        if matches!(
            error,
            ProduceError::Closed
                | ProduceError::TransactionAborted
                | ProduceError::TransactionAbortable(_)
        ) || (matches!(
            error,
            ProduceError::Fatal(_) | ProduceError::Authentication { .. } | ProduceError::Tls { .. }
        ) && !fatal)
        {
            return;
        }
        let diverged = std::mem::take(&mut self.participant.sequences_diverged);
        self.txn_actions.push_back(TxnAction::ProduceFailed {
            error: error.clone(),
            needs_bump: error.is_outcome_unknown() || diverged,
            fatal,
        });
    }

    /// The Produce version for a request to `node`, whose connection negotiated `negotiated`
    /// (Java's `Sender.sendProduceRequest` and `ProduceRequest.Builder`). A transactional
    /// producer sends v12 only for a transactions V2 transaction (the partition joins the
    /// transaction with it) and v11 at most for a V1 one; a producer without a transactional
    /// id sends the highest version both sides speak, as Java does (v12 means nothing more than
    /// v11 without a transaction). A V2 transaction's batch cannot go to a broker without v12:
    /// the engine turns fatal with the typed reason (Java's version mismatch), and `None` says
    /// nothing is drained.
    pub(super) fn produce_version(&mut self, node: NodeId, negotiated: i16) -> Option<i16> {
        if !self.is_transactional() {
            return Some(negotiated);
        }
        let v2 = self.participant.transaction_v2;
        match transaction_version::version_for(ApiKey::Produce, negotiated, v2) {
            Ok(version) => Some(version),
            Err(error) => {
                self.become_fatal(ProduceError::Fatal(ErrorCause::UnsupportedVersion {
                    broker: node,
                    error,
                }));
                None
            }
        }
    }
}
