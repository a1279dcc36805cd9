//! One shard: a pinned glommio executor that owns an [`Engine`] for its partitions, that
//! engine's broker connections, and its timer. The driver loop feeds the engine commands from
//! application threads, connection events and time, and carries out its actions.
//!
//! One concept to a module:
//! - here: what the shards share ([`ShardContext`]), the entry ([`run_shard`]), what a shard
//!   owns that someone waits on (`ShardState`), and the driver loop's own state (`Shard`);
//! - `driver`: the loop, turn after turn, each followed by a sleep, until the shard has closed;
//! - `turn`: the steps of one turn: commands, connection events, the engine and its actions,
//!   and what the turn publishes;
//! - `sockets`: the broker connections, their events, and the actions that act on them;
//! - `tickets`: this shard's side of the ticket ring;
//! - `stop`: how a shard that stops, closed or dead, answers everything that waits on it;
//! - `thread`: what the shard's thread knows of itself.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;

use crate::engine::buffer_pool::BufferPool;
use crate::engine::transaction_version::TransactionVersion;
use crate::engine::{Engine, EngineConfig};
use crate::metrics::{MetricsBoard, ShardPublisher};
use crate::runtime::buffer_memory::{release_sink, BufferMemory};
use crate::runtime::command::{CloseDeadline, Countdown, Latch, ShardCommand};
use crate::runtime::delivery_handle::DeliveryHandle;
use crate::runtime::identity_replica::IdentityReplica;
use crate::runtime::inbox::ShardInbox;
use crate::runtime::intake::Intake;
use crate::runtime::metadata_snapshot::MetadataSnapshot;
use crate::runtime::stats::{RuntimeCounters, ShardReport};
use crate::runtime::ticket_ring::{Attachment, TicketRing};
use crate::runtime::txn_driver::{
    ControlReceiver, ControlSender, TxnCommand, TxnDriver, TxnPeers, TxnStatus,
};

mod driver;
mod sockets;
mod stop;
mod thread;
mod tickets;
mod turn;

pub(crate) use thread::{
    as_application_task, in_application_task, keep_application_task, on_shard_thread,
    ApplicationTask,
};

use driver::Wake;
use sockets::Connections;
use stop::{die, Stopping};

/// What every shard shares.
pub(crate) struct ShardContext {
    pub metadata: Arc<MetadataSnapshot>,
    /// Identity tickets, read by every shard in one order (consumer index = shard index).
    pub tickets: Arc<TicketRing>,
    /// Every shard's inbox, by shard index.
    pub inboxes: Vec<Arc<ShardInbox>>,
    /// The producer's `buffer.memory`, which this shard's completions give back to.
    pub memory: Arc<BufferMemory>,
    /// Each shard's control queue (transaction protocol messages), drained before every
    /// data command.
    pub control: Vec<ControlSender>,
    pub txn_status: Arc<TxnStatus>,
    pub max_frame: usize,
    pub connection_setup_timeout: Duration,
    /// `SSL` and `SASL_SSL`: the TLS configuration of every connection.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub counters: Arc<RuntimeCounters>,
    /// Where this shard publishes its metrics.
    pub metrics: Arc<MetricsBoard>,
    /// Counted down once by each shard as it stops, closed or dead: the producer waits on it.
    pub stopped: Arc<Latch>,
    /// When a closing shard fails what it still holds and stops.
    pub close_by: Arc<CloseDeadline>,
    /// `kacrab.transaction.version`, for the owner's transaction manager.
    pub transaction_version: TransactionVersion,
}

impl TxnPeers for ShardContext {
    fn send_txn(&self, shard: usize, command: TxnCommand) {
        // Fails only when that shard has stopped, and then nobody waits for the answer.
        let _ = self.control[shard].send(command);
    }

    fn shard_count(&self) -> usize {
        self.control.len()
    }

    fn txn_status(&self) -> &TxnStatus {
        &self.txn_status
    }
}

pub(crate) async fn run_shard(
    shard: usize,
    config: EngineConfig,
    pool: Arc<BufferPool>,
    inbox: Arc<ShardInbox>,
    control: ControlReceiver,
    ctx: Arc<ShardContext>,
) {
    // Declared first, so dropped last: after the engine's records and memory, and after the
    // running count, so that a `close` that returns sees this shard stopped.
    let _stopping = Stopping {
        shard,
        inbox: &inbox,
        ctx: &ctx,
    };
    let _running = ctx.counters.shard_guard();
    thread::mark_shard_thread();
    // Completions on this thread return their memory through the sink; this returns it even
    // if the shard unwinds.
    let _release = release_sink::FlushOnDrop(&ctx.memory);
    let linger_us = config.linger;
    let mut state = ShardState {
        engine: {
            let mut engine = Engine::new(config)
                .with_batch_memory(ctx.memory.clone())
                .with_buffer_pool(pool);
            engine.set_transaction_version(ctx.transaction_version);
            engine
        },
        intake: Intake::new(linger_us),
        local: VecDeque::new(),
        flushes: Vec::new(),
        closing: false,
        metric_requests: Vec::new(),
        txn: TxnDriver::new(shard),
    };
    let attachment = ctx.tickets.attach(shard);
    // The driver's own state (`Shard`) is built inside the guarded future, so that a panic
    // anywhere in the driver, its start included, reaches `die`.
    let driven = AssertUnwindSafe(driver::drive(
        shard, &mut state, &inbox, &control, &ctx, attachment,
    ))
    .catch_unwind()
    .await;
    if let Err(panic) = driven {
        die(shard, &mut state, &inbox, &ctx, panic.as_ref());
    }
}

/// What a shard owns that someone waits on: the engine with its records, the commands taken
/// from the inbox and not yet handled, and the latches and calls it has to answer. Kept
/// outside the driver loop's future, so that a shard that panics can still answer all of it
/// ([`die`]).
struct ShardState {
    engine: Engine<DeliveryHandle>,
    /// The partition queues with batches for this shard.
    intake: Intake,
    /// Commands taken from the inbox and not yet handled (at most one inbox's worth).
    local: VecDeque<ShardCommand>,
    flushes: Vec<(u64, Countdown)>,
    /// A `Close` is being carried out (until `ShardContext::close_by`).
    closing: bool,
    metric_requests: Vec<Countdown>,
    txn: TxnDriver,
}

/// The driver loop's own state, around the [`ShardState`] it drives. It lives in the loop's
/// future and goes with it; what someone waits on is in the `ShardState` it borrows, which a
/// panic in the loop leaves to [`die`].
struct Shard<'a> {
    /// This shard's index: its inbox, control queue and ticket ring consumer.
    index: usize,
    state: &'a mut ShardState,
    inbox: &'a ShardInbox,
    control: &'a ControlReceiver,
    ctx: &'a ShardContext,
    /// This shard's hold on the ticket ring, let go as the shard closes.
    attachment: Attachment<'a>,
    /// The inbox's clock: batches' creation times (`producer::accumulator`) and the shard's
    /// park deadline are on it.
    clock: Instant,
    replica: IdentityReplica,
    connections: Connections,
    /// What woke the shard from its last sleep, handled first in the next turn.
    pending: Option<Wake>,
    /// The report last published (`RuntimeStats`).
    report: ShardReport,
    metrics: ShardPublisher,
}
