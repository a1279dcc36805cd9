//! The simulated world's transactional side: the driver's routing of [`TxnAction`]s between
//! engines (shard 0 owns the transaction manager; see `engine/transaction.rs` for the
//! protocol), the application's transaction calls, and the record of each transaction's
//! records and reported outcome for the read_committed checker.

use std::collections::{BTreeMap, HashMap};

use crate::engine::transaction::TxnOperation;
use crate::engine::{
    GroupMetadata, OffsetAndMetadata, TopicPartition, TransactionState, TxnAction, TxnHandle,
};
use crate::error::TransactionError;

use super::super::checker::RecordId;
use super::super::txn_checker::{
    check_committed_offsets, check_transactions, SimTxn, TxnStats, TxnVerdict,
};
use super::{Event, Sim};

/// The owner of the transaction manager.
pub const OWNER: usize = 0;

/// How often the coordinator looks for transactions open past their timeout (Kafka's
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms` default).
pub const TXN_TIMEOUT_SWEEP_INTERVAL: crate::engine::Micros = 10 * super::SECOND;

/// The driver's transactional state.
#[derive(Debug, Default)]
pub struct TxnWorld {
    pub txns: Vec<SimTxn>,
    /// The transaction `send` adds records to.
    pub current: Option<usize>,
    ops: HashMap<TxnHandle, (TxnOperation, Option<usize>)>,
    /// The flush round in progress and which shards reported it.
    flush: Option<(u64, Vec<bool>)>,
    pub completed: Vec<TxnHandle>,
    /// When the coordinator next sweeps for timed-out transactions.
    next_timeout_sweep: crate::engine::Micros,
    /// Transactions the coordinator aborted because they outlived their timeout.
    pub timed_out: u64,
    /// Records of a transaction that `send` refused before they reached an engine.
    pub sends_refused: u64,
}

impl Sim {
    pub fn txn_world(&self) -> &TxnWorld {
        &self.txn
    }

    pub fn txn_state(&self) -> Option<TransactionState> {
        self.shards[OWNER]
            .engine
            .transaction_manager()
            .map(|tm| tm.state())
    }

    /// What made the transaction manager fail, if it did.
    pub fn txn_last_error(&self) -> Option<String> {
        self.shards[OWNER]
            .engine
            .transaction_manager()
            .and_then(|tm| tm.last_error())
            .map(|e| e.to_string())
    }

    /// The coordinator's periodic `abortTimedOutTransactions` on the virtual clock: at the
    /// first event after each interval, as a broker's scheduler would have run it by then.
    /// Nothing can observe the broker between two events, so the run is the same.
    pub(super) fn maybe_abort_timed_out_transactions(&mut self) {
        if self.now < self.txn.next_timeout_sweep {
            return;
        }
        self.txn.next_timeout_sweep = self.now + TXN_TIMEOUT_SWEEP_INTERVAL;
        let now_ms = super::EPOCH_MS + (self.now / super::MS) as i64;
        let aborted = self.shared.cluster().abort_timed_out_transactions(now_ms);
        if aborted > 0 {
            self.txn.timed_out += aborted as u64;
            self.observe_logs();
        }
    }

    /// The transaction coordinator's marker writer, run on the virtual clock when a plan holds
    /// markers: writes every held marker now (Kafka answers EndTxn once PrepareCommit or
    /// PrepareAbort is logged and writes the markers afterwards; until then AddPartitionsToTxn
    /// and EndTxn of the next transaction see CONCURRENT_TRANSACTIONS). Returns how many
    /// transactions completed.
    pub fn write_held_markers(&mut self) -> usize {
        let now_ms = super::EPOCH_MS + (self.now / super::MS) as i64;
        let written = self.shared.cluster().release_transaction_markers(now_ms);
        if written > 0 {
            self.observe_logs();
        }
        written
    }

    /// Moves the transaction coordinator of this producer's transactional id to `broker`
    /// (`Cluster::move_transaction_coordinator`), also in the middle of an EndTxn whose
    /// markers are not written yet.
    pub fn move_transaction_coordinator(&mut self, broker: i32) {
        let transactional_id = self.setup.engine.transactional_id.clone();
        let transactional_id = transactional_id.expect("a transactional run");
        self.shared
            .cluster()
            .move_transaction_coordinator(&transactional_id, broker);
    }

    /// Routes one transactional action emitted by `shard` (the driver's half of the protocol).
    pub(super) fn route_txn(&mut self, shard: usize, action: TxnAction) {
        let all: Vec<usize> = (0..self.shards.len()).collect();
        let mut touched: Vec<usize> = Vec::new();
        match action {
            TxnAction::AddPartitions { partitions } => {
                self.shards[OWNER].engine.txn_add_partitions(&partitions);
                touched.push(OWNER);
            }
            TxnAction::PartitionsAdded { partitions } => {
                // As the runtime's driver does: the protocol of the transaction in progress,
                // read from the owner when it emitted the action, goes with the partitions, so
                // that a participant's Produce version is v12 under transactions V2 (no
                // AddPartitionsToTxn went out) and at most v11 under V1.
                let transaction_v2 = self.shards[OWNER].engine.txn_transaction_v2();
                for &s in &all {
                    self.shards[s].engine.txn_set_transaction_v2(transaction_v2);
                    self.shards[s].engine.txn_partitions_added(&partitions);
                }
                touched.extend(&all);
            }
            TxnAction::ProduceFailed {
                error,
                needs_bump,
                fatal,
            } => {
                self.shards[OWNER]
                    .engine
                    .txn_produce_failed(&error, needs_bump, fatal);
                touched.push(OWNER);
            }
            TxnAction::Abortable { error } => {
                for &s in &all {
                    self.shards[s].engine.txn_abortable(error.clone());
                }
                touched.extend(&all);
            }
            TxnAction::Flush { round, abort } => {
                self.txn.flush = Some((round, vec![false; all.len()]));
                for &s in &all {
                    self.shards[s].engine.txn_flush(round, abort);
                }
                touched.extend(&all);
            }
            TxnAction::Flushed { round } => {
                if let Some((r, done)) = &mut self.txn.flush {
                    if *r == round {
                        done[shard] = true;
                        if done.iter().all(|d| *d) {
                            self.txn.flush = None;
                            self.shards[OWNER].engine.txn_all_flushed(round);
                            touched.push(OWNER);
                        }
                    }
                }
            }
            TxnAction::Ended => {
                for &s in &all {
                    self.shards[s].engine.txn_ended();
                }
                touched.extend(&all);
            }
            TxnAction::IdentityReplaced { from, to } => {
                if self.coordinator.replace(from, to) {
                    self.note_identity();
                    // Synchronously on every shard: the next transaction's first batch on any
                    // shard must be stamped with the epoch its AddPartitionsToTxn names.
                    for &s in &all {
                        self.adopt_identity(s);
                    }
                    touched.extend(&all);
                }
            }
            TxnAction::Fatal { error } => {
                for &s in &all {
                    self.shards[s].engine.txn_fatal(error.clone());
                }
                touched.extend(&all);
            }
            TxnAction::Completed { handle } => self.txn.completed.push(handle),
        }
        touched.sort_unstable();
        touched.dedup();
        for s in touched {
            if s != shard {
                self.schedule(self.now, Event::Drive(s));
            }
        }
    }

    fn register(
        &mut self,
        result: Result<TxnHandle, TransactionError>,
        op: TxnOperation,
    ) -> Result<TxnHandle, TransactionError> {
        let handle = result?;
        self.txn.ops.entry(handle).or_insert((op, self.txn.current));
        self.drive(OWNER);
        Ok(handle)
    }

    pub fn init_transactions(&mut self) -> Result<TxnHandle, TransactionError> {
        let r = self.shards[OWNER].engine.init_transactions();
        self.register(r, TxnOperation::InitTransactions)
    }

    pub fn begin_transaction(&mut self) -> Result<(), TransactionError> {
        self.shards[OWNER].engine.begin_transaction()?;
        self.txn.txns.push(SimTxn {
            records: Vec::new(),
            offsets: Vec::new(),
            verdict: TxnVerdict::Open,
        });
        self.txn.current = Some(self.txn.txns.len() - 1);
        Ok(())
    }

    /// Sends one record in the current transaction, if the transaction manager allows a send
    /// now; the owning shard runs.
    pub fn send_in_transaction(
        &mut self,
        tp: &TopicPartition,
        pad: usize,
    ) -> Result<RecordId, TransactionError> {
        self.shards[OWNER].engine.txn_check_send()?;
        let id = self.send(tp, None, pad);
        let t = self.txn.current.expect("a transaction is open");
        self.txn.txns[t].records.push(id);
        Ok(id)
    }

    /// `send` refused a record of the open transaction before it reached an engine (here: too
    /// large). As the runtime does (`Producer::send_record`), the refusal reaches the owner's
    /// engine as a failed batch is reported (`Engine::txn_send_refused`): the transaction can
    /// no longer commit.
    pub fn refuse_send_in_transaction(&mut self) -> Result<(), TransactionError> {
        self.shards[OWNER].engine.txn_check_send()?;
        self.shards[OWNER]
            .engine
            .txn_send_refused(crate::error::ProduceError::RecordTooLarge {
                size: 2 << 20,
                limit: 1 << 20,
                key: "max.request.size",
            });
        self.txn.sends_refused += 1;
        Ok(())
    }

    pub fn send_offsets_to_transaction(
        &mut self,
        group: &str,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<TxnHandle, TransactionError> {
        let map: BTreeMap<TopicPartition, OffsetAndMetadata> = offsets
            .iter()
            .map(|(tp, o)| (tp.clone(), OffsetAndMetadata::new(*o)))
            .collect();
        let r = self.shards[OWNER]
            .engine
            .send_offsets_to_transaction(map, GroupMetadata::new(group));
        if r.is_ok() {
            if let Some(t) = self.txn.current {
                for (tp, o) in offsets {
                    self.txn.txns[t]
                        .offsets
                        .push((group.to_string(), tp.clone(), *o));
                }
            }
        }
        self.register(r, TxnOperation::SendOffsetsToTransaction)
    }

    pub fn commit_transaction(&mut self) -> Result<TxnHandle, TransactionError> {
        let r = self.shards[OWNER].engine.commit_transaction();
        self.register(r, TxnOperation::CommitTransaction)
    }

    pub fn abort_transaction(&mut self) -> Result<TxnHandle, TransactionError> {
        let r = self.shards[OWNER].engine.abort_transaction();
        self.register(r, TxnOperation::AbortTransaction)
    }

    /// Takes a call's result; the transaction it ended gets its verdict.
    pub fn txn_result(&mut self, handle: TxnHandle) -> Option<Result<(), TransactionError>> {
        let result = self.shards[OWNER].engine.txn_result(handle)?;
        if let Some((op, txn)) = self.txn.ops.remove(&handle) {
            let verdict = match (op, &result) {
                (TxnOperation::CommitTransaction, Ok(())) => Some(TxnVerdict::Committed),
                (TxnOperation::AbortTransaction, Ok(())) => Some(TxnVerdict::Aborted),
                (TxnOperation::CommitTransaction | TxnOperation::AbortTransaction, Err(e))
                    if e.is_fatal() =>
                {
                    Some(TxnVerdict::Unknown)
                }
                _ => None,
            };
            if let (Some(verdict), Some(t)) = (verdict, txn) {
                self.txn.txns[t].verdict = verdict;
                if self.txn.current == Some(t) {
                    self.txn.current = None;
                }
            }
        }
        Some(result)
    }

    /// Runs until the call's result is there or `limit` passes (the caller's timeout).
    pub fn wait_txn(
        &mut self,
        handle: TxnHandle,
        limit: crate::engine::Micros,
    ) -> Option<Result<(), TransactionError>> {
        let mut out = None;
        self.run_while_not(limit, |sim| sim.txn.completed.contains(&handle));
        if self.txn.completed.contains(&handle) {
            self.txn.completed.retain(|h| *h != handle);
            out = self.txn_result(handle);
        }
        out
    }

    /// The read_committed checks over the whole run (`txn_checker`). A transaction still open
    /// when the producer is fatal has an unknown outcome.
    pub fn check_transactions(&mut self) -> TxnStats {
        self.observe_logs();
        if self.txn_state() == Some(TransactionState::FatalError) {
            for txn in &mut self.txn.txns {
                if txn.verdict == TxnVerdict::Open {
                    txn.verdict = TxnVerdict::Unknown;
                }
            }
        }
        let cluster = self.shared.cluster();
        let logs: Vec<(&[crate::testkit::broker::StoredBatch], i64)> = self
            .partitions
            .iter()
            .map(|tp| {
                (
                    cluster.partition_log(&tp.topic, tp.partition),
                    cluster
                        .last_stable_offset(&tp.topic, tp.partition)
                        .expect("known partition"),
                )
            })
            .collect();
        let mut stats = check_transactions(&self.partitions, &logs, &self.txn.txns, &self.checker);
        stats.offsets_checked = check_committed_offsets(&self.txn.txns, |group, tp| {
            cluster.committed_offset(group, &tp.topic, tp.partition)
        });
        stats
    }
}
