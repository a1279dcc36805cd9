//! The shard driver's transactional half. `engine/transaction.rs` defines the protocol: the
//! owner shard ([`OWNER`]) holds the one transaction manager, every shard (the owner too) is a
//! participant for its own partitions, and the two sides talk only through [`TxnAction`]s.
//! This module carries those actions between shards as [`TxnCommand`]s, answers the
//! application's calls, and publishes the check `send` makes ([`TxnStatus`]).
//!
//! Ordering, which the protocol leaves to the driver:
//! - Commands travel on each shard's unbounded control queue, drained before every data
//!   command (`Shard::take_commands` in `shard/turn.rs`). So a participant handles `Ended`
//!   before any record the application sent after the commit or abort returned: `Ended` was
//!   queued before the result was handed over.
//! - A commit or abort first pushes a barrier token through every shard's data queue, behind
//!   every record sent before the call, and the owner's `Flush` names that token. A
//!   participant defers the flush until it has dequeued the barrier, so the records sent
//!   before the call are in the transaction's flush (Java adds a partition inside `send`).
//!   A record checked before the call and queued behind its barrier is refused unsent, and
//!   `send` is refused until the owner has handled the call, so no record reaches a
//!   participant after its transaction ended ([`TxnStatus`]).
//! - A new transactional identity travels on the ticket ring (`Ticket::Replace`), which every
//!   shard reads before it handles the data command that could drain a batch under it.
//!
//! A call's caller may time out; the operation goes on, its result stays with the transaction
//! manager, and the same call made again picks it up (Java's cached `TransactionalRequestResult`).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::engine::{
    Engine, GroupMetadata, OffsetAndMetadata, TopicPartition, TxnAction, TxnHandle,
};
use crate::error::{ProduceError, TransactionError};

use super::delivery_handle::DeliveryHandle;
pub(crate) use super::txn_status::{ending_state, Ongoing, TxnStatus};

/// The shard whose engine owns the identity and the transaction manager.
pub(crate) const OWNER: usize = 0;

/// An application call, made on the owner.
pub(crate) enum TxnCall {
    Init,
    Begin,
    SendOffsets {
        offsets: BTreeMap<TopicPartition, OffsetAndMetadata>,
        group: GroupMetadata,
    },
    /// `barrier`: the token the caller pushed through every shard's data queue first.
    Commit {
        barrier: u64,
    },
    Abort {
        barrier: u64,
    },
}

/// One protocol message to a shard. At most a few per transaction step, so the control queue
/// needs no bound of its own; every one is answered or ends with the shard.
pub(crate) enum TxnCommand {
    Call {
        call: TxnCall,
        slot: Arc<CallSlot>,
    },
    AddPartitions(Vec<TopicPartition>),
    /// The partitions may drain; `transaction_v2`: the transaction's protocol, which sets
    /// the Produce version of their batches (`Engine::txn_set_transaction_v2`).
    PartitionsAdded {
        partitions: Vec<TopicPartition>,
        transaction_v2: bool,
    },
    ProduceFailed {
        error: ProduceError,
        needs_bump: bool,
        fatal: bool,
    },
    Abortable(ProduceError),
    Flush {
        round: u64,
        abort: bool,
        barrier: u64,
    },
    Flushed {
        round: u64,
        shard: usize,
    },
    Ended,
    Fatal(ProduceError),
}

/// The sending side of one shard's control queue (unbounded; see [`TxnCommand`]).
#[derive(Clone)]
pub(crate) struct ControlSender {
    tx: flume::Sender<TxnCommand>,
    /// Commands queued, counted after each is in the queue.
    sent: Arc<AtomicU64>,
}

/// The shard's side of its control queue. The data path asks [`has_waiting`] before every
/// data command: an atomic load, where the channel's own `is_empty` takes its lock.
///
/// Invariant: a command queued before a data command was queued is counted in `sent` by the
/// time the shard dequeues that data command (the count is raised before the sender goes on),
/// so `has_waiting` never misses one the protocol orders before it.
///
/// [`has_waiting`]: ControlReceiver::has_waiting
pub(crate) struct ControlReceiver {
    rx: flume::Receiver<TxnCommand>,
    sent: Arc<AtomicU64>,
    received: Cell<u64>,
}

pub(crate) fn control_queue() -> (ControlSender, ControlReceiver) {
    let (tx, rx) = flume::unbounded();
    let sent = Arc::new(AtomicU64::new(0));
    (
        ControlSender {
            tx,
            sent: sent.clone(),
        },
        ControlReceiver {
            rx,
            sent,
            received: Cell::new(0),
        },
    )
}

impl ControlSender {
    /// Fails only when the shard has stopped.
    pub(crate) fn send(&self, command: TxnCommand) -> Result<(), TxnCommand> {
        self.tx.send(command).map_err(|e| e.into_inner())?;
        self.sent.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

impl ControlReceiver {
    /// Whether a command is queued that this shard has not taken yet.
    pub(crate) fn has_waiting(&self) -> bool {
        self.sent.load(Ordering::Acquire) > self.received.get()
    }

    pub(crate) fn try_recv(&self) -> Option<TxnCommand> {
        let command = self.rx.try_recv().ok()?;
        self.received.set(self.received.get() + 1);
        Some(command)
    }

    pub(crate) async fn recv(&self) -> Option<TxnCommand> {
        let command = self.rx.recv_async().await.ok()?;
        self.received.set(self.received.get() + 1);
        Some(command)
    }
}

/// Where one call's result meets its caller.
#[derive(Default)]
pub(crate) struct CallSlot {
    state: Mutex<SlotState>,
    done: Condvar,
}

#[derive(Default)]
struct SlotState {
    result: Option<Result<(), TransactionError>>,
    /// The caller timed out and left: a result must stay with the transaction manager.
    abandoned: bool,
}

enum Offer {
    Delivered,
    NotReady,
    Abandoned,
}

impl CallSlot {
    pub(crate) fn new() -> Arc<CallSlot> {
        Arc::new(CallSlot::default())
    }

    /// Hands the caller what `take` yields, if the caller still waits; `take` runs only then,
    /// under the slot's lock, so a result is taken from the transaction manager only for a
    /// caller that will see it.
    fn offer(&self, take: impl FnOnce() -> Option<Result<(), TransactionError>>) -> Offer {
        let mut state = self.state.lock().expect("call slot lock");
        if state.abandoned {
            return Offer::Abandoned;
        }
        match take() {
            Some(result) => {
                state.result = Some(result);
                self.done.notify_all();
                Offer::Delivered
            }
            None => Offer::NotReady,
        }
    }

    /// Waits up to `timeout`; `None` when it passed (the slot is then abandoned).
    pub(crate) fn wait(&self, timeout: Duration) -> Option<Result<(), TransactionError>> {
        let state = self.state.lock().expect("call slot lock");
        let (mut state, _) = self
            .done
            .wait_timeout_while(state, timeout, |s| s.result.is_none())
            .expect("call slot lock");
        let result = state.result.take();
        if result.is_none() {
            state.abandoned = true;
        }
        result
    }
}

/// How the driver reaches the other shards.
pub(crate) trait TxnPeers {
    /// Queues `command` for `shard` (never this one).
    fn send_txn(&self, shard: usize, command: TxnCommand);
    fn shard_count(&self) -> usize;
    fn txn_status(&self) -> &TxnStatus;
}

/// One shard's transactional driver state.
pub(crate) struct TxnDriver {
    shard: usize,
    /// Participant: the newest barrier token dequeued from this shard's data queue.
    barrier_seen: u64,
    /// Participant: the state the call of `barrier_seen` moved the manager to.
    barrier_ending: &'static str,
    /// Participant: a flush waiting for its barrier (round, abort, barrier).
    deferred_flush: Option<(u64, bool, u64)>,
    /// Owner: calls waiting for their result.
    waiters: HashMap<TxnHandle, Arc<CallSlot>>,
    /// Owner: the barrier of the latest commit or abort call, named by the flush it starts.
    barrier: u64,
    /// Owner: the flush round in progress and which shards reported it.
    flush: Option<(u64, Vec<bool>)>,
    /// Owner: the check and handled barrier last published.
    published: Option<(Result<(), TransactionError>, u64, Ongoing)>,
}

impl TxnDriver {
    pub(crate) fn new(shard: usize) -> Self {
        TxnDriver {
            shard,
            barrier_seen: 0,
            barrier_ending: "",
            deferred_flush: None,
            waiters: HashMap::new(),
            barrier: 0,
            flush: None,
            published: None,
        }
    }

    /// Participant: a barrier came through the data queue.
    pub(crate) fn on_barrier(
        &mut self,
        token: u64,
        commit: bool,
        engine: &mut Engine<DeliveryHandle>,
    ) {
        if let Some((round, abort)) = self.barrier_arrived(token, commit) {
            engine.txn_flush(round, abort);
        }
    }

    /// Notes a barrier; the flush it releases, if one waited for it.
    fn barrier_arrived(&mut self, token: u64, commit: bool) -> Option<(u64, bool)> {
        if token > self.barrier_seen {
            self.barrier_seen = token;
            self.barrier_ending = ending_state(commit);
        }
        let (round, abort, barrier) = self.deferred_flush?;
        if self.barrier_seen < barrier {
            return None;
        }
        self.deferred_flush = None;
        Some((round, abort))
    }

    /// Participant: whether a record that passed [`TxnStatus::check_send`] with barrier token
    /// `checked_at` may be appended. A barrier dequeued before it belongs to a commit or abort
    /// that began after the check: the record is not in that call's flush, and its
    /// transaction is over or ending, so it is refused unsent.
    pub(crate) fn admit(&self, checked_at: u64) -> Result<(), ProduceError> {
        if checked_at < self.barrier_seen {
            return Err(ProduceError::Transaction(TransactionError::InvalidState {
                operation: "send",
                state: self.barrier_ending,
            }));
        }
        Ok(())
    }

    /// Handles a command from the control queue (or from this shard itself).
    pub(crate) fn handle(
        &mut self,
        command: TxnCommand,
        engine: &mut Engine<DeliveryHandle>,
        peers: &impl TxnPeers,
    ) {
        match command {
            TxnCommand::Call { call, slot } => self.call(call, slot, engine, peers),
            TxnCommand::AddPartitions(partitions) => engine.txn_add_partitions(&partitions),
            TxnCommand::PartitionsAdded {
                partitions,
                transaction_v2,
            } => {
                engine.txn_set_transaction_v2(transaction_v2);
                engine.txn_partitions_added(&partitions)
            }
            TxnCommand::ProduceFailed {
                error,
                needs_bump,
                fatal,
            } => engine.txn_produce_failed(&error, needs_bump, fatal),
            TxnCommand::Abortable(error) => engine.txn_abortable(error),
            TxnCommand::Flush {
                round,
                abort,
                barrier,
            } => {
                if self.barrier_seen >= barrier {
                    engine.txn_flush(round, abort);
                } else {
                    self.deferred_flush = Some((round, abort, barrier));
                }
            }
            TxnCommand::Flushed { round, shard } => {
                if let Some((current, done)) = &mut self.flush {
                    if *current == round {
                        if let Some(d) = done.get_mut(shard) {
                            *d = true;
                        }
                        if done.iter().all(|d| *d) {
                            self.flush = None;
                            engine.txn_all_flushed(round);
                        }
                    }
                }
            }
            TxnCommand::Ended => engine.txn_ended(),
            TxnCommand::Fatal(error) => engine.txn_fatal(error),
        }
    }

    /// Owner: an application call. The status `send` checks is published before the caller
    /// can learn the result, so its next send sees the state the call left.
    fn call(
        &mut self,
        call: TxnCall,
        slot: Arc<CallSlot>,
        engine: &mut Engine<DeliveryHandle>,
        peers: &impl TxnPeers,
    ) {
        let started = match call {
            TxnCall::Init => engine.init_transactions().map(Some),
            TxnCall::Begin => engine.begin_transaction().map(|()| None),
            TxnCall::SendOffsets { offsets, group } => {
                engine.send_offsets_to_transaction(offsets, group).map(Some)
            }
            TxnCall::Commit { barrier } => {
                self.barrier = self.barrier.max(barrier);
                engine.commit_transaction().map(Some)
            }
            TxnCall::Abort { barrier } => {
                self.barrier = self.barrier.max(barrier);
                engine.abort_transaction().map(Some)
            }
        };
        self.publish_status(engine, peers);
        match started {
            Err(err) => {
                slot.offer(|| Some(Err(err)));
            }
            Ok(None) => {
                slot.offer(|| Some(Ok(())));
            }
            Ok(Some(handle)) => {
                // A call repeated after a timeout may find its result already there.
                if let Offer::NotReady = slot.offer(|| self.take_result(handle, engine, peers)) {
                    self.waiters.insert(handle, slot);
                }
            }
        }
    }

    /// Routes one action the engine emitted. `publish_identity` puts a new identity on the
    /// ticket ring (and adopts it here).
    pub(crate) fn route(
        &mut self,
        action: TxnAction,
        engine: &mut Engine<DeliveryHandle>,
        peers: &impl TxnPeers,
        publish_identity: &mut impl FnMut(
            &mut Engine<DeliveryHandle>,
            crate::engine::ProducerIdAndEpoch,
            crate::engine::ProducerIdAndEpoch,
        ),
    ) {
        match action {
            TxnAction::AddPartitions { partitions } => {
                self.send_to_owner(TxnCommand::AddPartitions(partitions), engine, peers)
            }
            TxnAction::ProduceFailed {
                error,
                needs_bump,
                fatal,
            } => self.send_to_owner(
                TxnCommand::ProduceFailed {
                    error,
                    needs_bump,
                    fatal,
                },
                engine,
                peers,
            ),
            TxnAction::Flushed { round } => self.send_to_owner(
                TxnCommand::Flushed {
                    round,
                    shard: self.shard,
                },
                engine,
                peers,
            ),
            TxnAction::PartitionsAdded { partitions } => {
                // Read when the owner emitted it: the protocol of the transaction in progress.
                let transaction_v2 = engine.txn_transaction_v2();
                self.send_to_all(
                    || TxnCommand::PartitionsAdded {
                        partitions: partitions.clone(),
                        transaction_v2,
                    },
                    engine,
                    peers,
                )
            }
            TxnAction::Abortable { error } => {
                self.send_to_all(|| TxnCommand::Abortable(error.clone()), engine, peers)
            }
            TxnAction::Flush { round, abort } => {
                self.flush = Some((round, vec![false; peers.shard_count()]));
                let barrier = self.barrier;
                self.send_to_all(
                    || TxnCommand::Flush {
                        round,
                        abort,
                        barrier,
                    },
                    engine,
                    peers,
                );
            }
            TxnAction::Ended => self.send_to_all(|| TxnCommand::Ended, engine, peers),
            TxnAction::Fatal { error } => {
                self.send_to_all(|| TxnCommand::Fatal(error.clone()), engine, peers)
            }
            TxnAction::IdentityReplaced { from, to } => publish_identity(engine, from, to),
            TxnAction::Completed { handle } => {
                self.publish_status(engine, peers);
                if let Some(slot) = self.waiters.remove(&handle) {
                    if let Offer::NotReady = slot.offer(|| self.take_result(handle, engine, peers))
                    {
                        self.waiters.insert(handle, slot);
                    }
                }
            }
        }
    }

    /// Owner: takes a call's result for its caller. Taking it ends the pending operation,
    /// which `send` checks (`send` is refused while a call is pending), so the status is
    /// published again here, before the caller (woken only after this returns) can send.
    fn take_result(
        &mut self,
        handle: TxnHandle,
        engine: &mut Engine<DeliveryHandle>,
        peers: &impl TxnPeers,
    ) -> Option<Result<(), TransactionError>> {
        let result = engine.txn_result(handle);
        if result.is_some() {
            self.publish_status(engine, peers);
        }
        result
    }

    fn send_to_owner(
        &mut self,
        command: TxnCommand,
        engine: &mut Engine<DeliveryHandle>,
        peers: &impl TxnPeers,
    ) {
        if self.shard == OWNER {
            self.handle(command, engine, peers);
        } else {
            peers.send_txn(OWNER, command);
        }
    }

    /// Every shard, this one last (its effects then come with its next poll).
    fn send_to_all(
        &mut self,
        command: impl Fn() -> TxnCommand,
        engine: &mut Engine<DeliveryHandle>,
        peers: &impl TxnPeers,
    ) {
        for shard in (0..peers.shard_count()).filter(|&s| s != self.shard) {
            peers.send_txn(shard, command());
        }
        self.handle(command(), engine, peers);
    }

    /// Owner: publishes what `send` checks when it changed.
    pub(crate) fn publish_status(
        &mut self,
        engine: &Engine<DeliveryHandle>,
        peers: &impl TxnPeers,
    ) {
        if engine.transaction_manager().is_none() {
            return;
        }
        let ongoing = Ongoing::of(engine.transaction_manager().map(|tm| tm.state()));
        let check = (engine.txn_check_send(), self.barrier, ongoing);
        if self.published.as_ref() != Some(&check) {
            peers
                .txn_status()
                .publish(check.0.clone(), check.1, check.2);
            self.published = Some(check);
        }
    }

    /// The shard stops: every waiting caller learns it.
    pub(crate) fn close(&mut self) {
        self.fail_calls(TransactionError::Closed);
    }

    /// Answers every call still waiting here with `error` (the shard is stopping).
    pub(crate) fn fail_calls(&mut self, error: TransactionError) {
        for (_, slot) in self.waiters.drain() {
            slot.offer(|| Some(Err(error.clone())));
        }
    }
}

#[cfg(test)]
mod tests {
    //! The interleavings of a `send` (check, then queue on its shard) with a commit or abort
    //! called from another thread (token, barrier on every shard, call on the owner), each
    //! played in one order.
    use super::*;

    const IN_TRANSACTION: Result<(), TransactionError> = Ok(());

    fn refused(state: &'static str) -> TransactionError {
        TransactionError::InvalidState {
            operation: "send",
            state,
        }
    }

    fn open_transaction() -> (TxnStatus, TxnDriver) {
        let status = TxnStatus::default();
        status.publish(IN_TRANSACTION, 0, Ongoing::Open);
        (status, TxnDriver::new(1))
    }

    #[test]
    fn a_record_checked_before_a_commit_and_queued_before_its_barrier_is_in_the_commit() {
        let (status, mut shard) = open_transaction();
        let checked_at = status.check_send().expect("open transaction");
        let token = status.begin_ending(true);
        // Queue order: the record, then the barrier.
        assert_eq!(shard.admit(checked_at), Ok(()));
        assert_eq!(shard.barrier_arrived(token, true), None);
    }

    #[test]
    fn a_record_checked_before_a_commit_and_queued_after_its_barrier_is_refused_unsent() {
        let (status, mut shard) = open_transaction();
        let checked_at = status.check_send().expect("open transaction");
        let token = status.begin_ending(true);
        assert_eq!(shard.barrier_arrived(token, true), None);
        assert_eq!(
            shard.admit(checked_at),
            Err(ProduceError::Transaction(refused("COMMITTING_TRANSACTION")))
        );
    }

    #[test]
    fn a_send_after_a_commit_began_is_refused_before_the_owner_has_handled_it() {
        let (status, _) = open_transaction();
        let token = status.begin_ending(false);
        // The owner still publishes IN_TRANSACTION: it has not seen the call.
        assert_eq!(status.check_send(), Err(refused("ABORTING_TRANSACTION")));
        status.publish(IN_TRANSACTION, token - 1, Ongoing::Open);
        assert_eq!(status.check_send(), Err(refused("ABORTING_TRANSACTION")));
        // Handled: the owner's own check decides again.
        status.publish(
            Err(refused("ABORTING_TRANSACTION")),
            token,
            Ongoing::Aborting,
        );
        assert_eq!(status.check_send(), Err(refused("ABORTING_TRANSACTION")));
        status.publish(Err(refused("READY")), token, Ongoing::None);
        assert_eq!(status.check_send(), Err(refused("READY")));
    }

    #[test]
    fn a_record_of_the_next_transaction_carries_the_new_token_and_is_admitted() {
        let (status, mut shard) = open_transaction();
        let token = status.begin_ending(true);
        shard.barrier_arrived(token, true);
        status.publish(IN_TRANSACTION, token, Ongoing::Open);
        let checked_at = status.check_send().expect("the next transaction");
        assert_eq!(checked_at, token);
        assert_eq!(shard.admit(checked_at), Ok(()));
    }

    #[test]
    fn a_commit_that_never_reached_the_owner_gives_its_token_back() {
        let (status, _) = open_transaction();
        let token = status.begin_ending(true);
        status.settle(token);
        assert_eq!(status.check_send(), Ok(token));
    }

    #[test]
    fn a_flush_deferred_for_its_barrier_starts_when_the_barrier_arrives() {
        let (status, mut shard) = open_transaction();
        let token = status.begin_ending(false);
        shard.deferred_flush = Some((3, true, token));
        assert_eq!(shard.barrier_arrived(token, false), Some((3, true)));
        assert_eq!(shard.deferred_flush, None);
    }
}
