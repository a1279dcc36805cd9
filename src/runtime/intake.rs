//! A shard's intake: the partition queues it knows have batches for it (`producer::accumulator`),
//! and the step that moves their batches into the engine.
//!
//! Each turn the shard takes every closed batch of every listed queue, and each open batch whose
//! linger has run out (Java's `RecordAccumulator.ready` for an open batch: `linger.ms` after its
//! first record). A `flush`, a transaction's barrier, a purge and a `close` take the open
//! batches too, before the command is handled, so the command is behind every record sent
//! before it. A queue left with nothing leaves the list; its next batch notices the shard again.
//! The shard's sleep is bounded by the earliest open batch's linger (`next_due`).
//!
//! An open batch also goes before its linger when its partition's broker is about to get a
//! request anyway (`Engine::drain_ready_nodes`: another partition it leads has a batch ready):
//! Java's drain takes the first batch of every partition of a ready broker, open or not, so
//! one request carries them all instead of one request per batch as each fills or lingers.
//! (Each shard drains its own partitions over its own connections: only partitions of one
//! shard travel together.)
//! `Shard::take_batches` takes in two passes for it: the closed and due batches, then the open
//! ones of the brokers those made ready.
//!
//! A due open batch whose partition still has a batch in the engine waiting for the wire (all
//! of the connection's requests in flight, say) is *held*: it stays open, and the records sent
//! meanwhile join it instead of each opening a batch of its own. This is Java's accumulator,
//! whose last batch of a partition takes records until a drain takes it. Without it, a
//! producer at `linger.ms=0` that the network holds up turns each record into a batch, each
//! with its buffer, request share and completion, just when it is behind. A held batch sets no
//! timer (it is past due); the shard takes it in the same turn, after the engine has drained
//! (`take_held`), or at the next turn.
//!
//! Invariant: a queue is on the list exactly while its `listed` flag is raised, and a queue
//! whose batches the shard must take is either listed or has its notice in the inbox. A shard
//! that stops shuts every listed queue (`shut_all`), and a notice dropped unread shuts its queue,
//! so no batch is left where nobody takes it.

use std::sync::Arc;

use crate::engine::{Engine, Micros, NodeId};
use crate::error::ProduceError;

use super::delivery_handle::DeliveryHandle;
use super::partition_queue::{fail_batch, ClosedBatch, Left, PartitionQueue};
use super::txn_driver::TxnDriver;

pub(crate) struct Intake {
    listed: Vec<Arc<PartitionQueue>>,
    linger_us: u64,
    /// The earliest linger expiry of an open batch left behind by the last take.
    next_due: Option<u64>,
    /// The last take held a due open batch back (its partition had a batch to drain).
    held: bool,
    /// Reused between takes.
    taken: Vec<ClosedBatch>,
}

impl Intake {
    pub(crate) fn new(linger_us: u64) -> Intake {
        Intake {
            listed: Vec::new(),
            linger_us,
            next_due: None,
            held: false,
            taken: Vec::new(),
        }
    }

    /// Lists `queue` (a notice from the inbox).
    pub(crate) fn notice(&mut self, queue: Arc<PartitionQueue>) {
        if queue.list() {
            self.listed.push(queue);
        }
        // Its open batch may be due before anything the shard waits for.
        self.next_due = Some(0);
    }

    /// Whether a take now would find something due: a listed queue's open batch whose linger
    /// ran out, or one noticed since the last take. Closed batches come with a wake
    /// (`ShardInbox::nudge`), which makes the shard take.
    pub(crate) fn next_due(&self) -> Option<u64> {
        self.next_due
    }

    /// Whether the last take held a due open batch back: the shard takes again once the
    /// engine has drained.
    pub(crate) fn held(&self) -> bool {
        self.held
    }

    /// True when no queue is listed.
    pub(crate) fn is_empty(&self) -> bool {
        self.listed.is_empty()
    }

    /// Moves every closed batch, and every open one due at `now` (or every open one, with
    /// `take_open`; or the open one of a partition led by one of `open_for`, unless the
    /// partition has a batch in the engine still to drain), into `engine`, in each queue's
    /// order. A batch whose records were checked before a transaction barrier this shard has
    /// seen is refused (`TxnDriver::admit`).
    pub(crate) fn take_into(
        &mut self,
        engine: &mut Engine<DeliveryHandle>,
        txn: &TxnDriver,
        now: Micros,
        take_open: bool,
        open_for: &[NodeId],
    ) {
        let mut next_due: Option<u64> = None;
        let mut held = false;
        let mut taken = std::mem::take(&mut self.taken);
        let linger_us = self.linger_us;
        self.listed.retain(|queue| {
            let undrained = !take_open && engine.has_undrained(&queue.tp);
            let open_now = take_open
                || (!undrained
                    && !open_for.is_empty()
                    && engine
                        .leader_of(&queue.tp)
                        .is_some_and(|leader| open_for.contains(&leader)));
            let left = queue.take(now, linger_us, open_now, undrained, &mut taken);
            for mut closed in taken.drain(..) {
                if let Err(err) = txn.admit(closed.txn_barrier) {
                    fail_batch(closed.batch, &err);
                    continue;
                }
                for run in closed.batch.records.iter_mut() {
                    run.delivery.entering_engine();
                }
                engine.append_batch(now, &queue.tp, closed.batch);
            }
            match left {
                Left::Nothing => false,
                Left::DueAt(due) => {
                    next_due = Some(next_due.map_or(due, |d| d.min(due)));
                    true
                }
                Left::Held => {
                    held = true;
                    true
                }
            }
        });
        self.taken = taken;
        self.next_due = next_due;
        self.held = held;
    }

    /// The shard is stopping: every listed queue is shut, its batches fail with `error` (none
    /// reached the engine), and so do later appends to it.
    pub(crate) fn shut_all(&mut self, error: &ProduceError) {
        for queue in self.listed.drain(..) {
            queue.shut(error.clone());
        }
        self.next_due = None;
        self.held = false;
    }
}

impl Drop for Intake {
    fn drop(&mut self) {
        self.shut_all(&ProduceError::Closed);
    }
}
