//! One shard: a pinned glommio executor that owns an [`Engine`] for its partitions, that
//! engine's broker connections, and its timer. The driver loop feeds the engine commands from
//! application threads, connection events and time, and carries out its actions.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::{future, FutureExt};
use glommio::channels::local_channel;
use glommio::Task;

use crate::engine::buffer_pool::BufferPool;
use crate::engine::{Action, Engine, EngineConfig, NodeId};
use crate::error::{ProduceError, TransactionError};
use crate::metrics::{MetricsBoard, ShardPublisher};

use super::buffer_memory::{release_sink, BufferMemory};
use super::command::{CloseDeadline, Countdown, Latch, ShardCommand};
use super::delivery_handle::DeliveryHandle;
use super::metadata_snapshot::{MetadataSnapshot, TopicInfo};

use super::connection::{spawn_connect, ConnectionEvent, ConnectionSetup, ConnectionTasks};
use super::identity_replica::IdentityReplica;
use super::inbox::ShardInbox;
use super::intake::Intake;
use super::stats::{
    ConnectionError, ConnectionFailure, ConnectionReport, RuntimeCounters, ShardReport,
};
use super::ticket_ring::{Attachment, Ticket, TicketRing};
use super::txn_driver::{
    ControlReceiver, ControlSender, TxnCommand, TxnDriver, TxnPeers, TxnStatus,
};

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
}

impl ShardContext {
    /// Wakes every peer to read the ticket ring.
    fn nudge_peers(&self, shard: usize) {
        for (index, peer) in self.inboxes.iter().enumerate() {
            if index != shard {
                // Wakes it only if it sleeps; awake, it reads the ring on every loop.
                peer.nudge();
            }
        }
    }

    /// Publishes `ticket` for every shard, applies what the ring holds to this shard's
    /// replica and engine, and wakes the peers.
    fn publish_ticket(
        &self,
        shard: usize,
        replica: &mut IdentityReplica,
        engine: &mut Engine<DeliveryHandle>,
        ticket: Ticket,
    ) {
        if replica.publish(&self.tickets, ticket) {
            self.nudge_peers(shard);
        }
        adopt_tickets(&self.tickets, replica, engine);
    }
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

/// Applies the ring's unread tickets to `replica` and hands a changed identity to the engine,
/// which keeps batches already sent under the old epoch until they resolve.
fn adopt_tickets(
    ring: &TicketRing,
    replica: &mut IdentityReplica,
    engine: &mut Engine<DeliveryHandle>,
) {
    if let Some(identity) = replica.catch_up(ring) {
        let old = engine.identity();
        tracing::info!(
            target: "kacrab::epoch",
            shard = replica.shard(),
            old_producer_id = old.producer_id,
            old_epoch = old.epoch,
            producer_id = identity.producer_id,
            epoch = identity.epoch,
            "producer identity adopted"
        );
        engine.on_identity(identity);
    }
}

struct ConnectionSlot {
    generation: u64,
    _connect: Option<Task<()>>,
    live: Option<ConnectionTasks>,
    requests_written: u64,
    responses_read: u64,
}

/// The driver's connections, by node. A slot is only ever replaced or removed by an event or
/// action naming its own generation: news about an older socket must not touch a newer one.
#[derive(Default)]
struct Connections {
    slots: HashMap<NodeId, ConnectionSlot>,
    /// Something a report shows changed since the last one was published.
    changed: bool,
}

impl Connections {
    fn current(&mut self, node: NodeId, generation: u64) -> Option<&mut ConnectionSlot> {
        self.slots
            .get_mut(&node)
            .filter(|s| s.generation == generation)
    }

    /// Drops the slot (closing its socket and cancelling its tasks) if it is `generation`'s.
    fn remove(&mut self, node: NodeId, generation: u64) {
        if self.current(node, generation).is_some() {
            self.slots.remove(&node);
            self.changed = true;
        }
    }

    fn report(&self) -> Vec<ConnectionReport> {
        let mut report: Vec<ConnectionReport> = self
            .slots
            .iter()
            .map(|(&node, slot)| ConnectionReport {
                node,
                generation: slot.generation,
                established: slot.live.is_some(),
                requests_written: slot.requests_written,
                responses_read: slot.responses_read,
            })
            .collect();
        report.sort_by_key(|c| c.node);
        report
    }
}

/// The longest a shard sleeps before looking at its work again, even with nothing due.
///
/// glommio 0.9.0 can park an executor while one of its tasks is runnable: `run_task_queues`
/// takes a preemption already pending when it starts (the 100 ms preempt timer expired while
/// the thread was descheduled, as happens on an oversubscribed host) for "nothing to run", and
/// the executor then sleeps until its next I/O completion or timer (fixed in the community
/// fork, glommio/glommio PR #53, not released). A shard without a near timer of its own would
/// sit on queued records until a request timeout. Capping every sleep turns such a stall into
/// a delay of at most this long; an idle shard wakes this often and finds nothing to do.
///
/// The other glommio timer trap, the first sleep of a process taking some 10 ms longer
/// (membarrier registration), only delays; deadlines are recomputed from the clock on every
/// wake, so a late timer never skips one.
const MAX_PARK: Duration = Duration::from_millis(50);

/// Commands handled per loop before the engine gets to send (keeps latency bounded under a
/// flood of appends).
const COMMANDS_PER_TURN: usize = 8192;

enum Wake {
    /// The inbox has commands (or a peer nudged this shard to read the ticket ring).
    Inbox,
    Control(Option<TxnCommand>),
    Event(Option<ConnectionEvent>),
    Timer,
}

thread_local! {
    /// Set on a shard's thread: code there (a delivery callback) must not wait for a shard.
    static ON_SHARD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True on a shard's thread, where waiting for a shard could wait for itself.
pub(crate) fn on_shard_thread() -> bool {
    ON_SHARD.with(|on| on.get())
}

thread_local! {
    /// Set while an application's task (`Producer::spawn_on_shard`) is being polled.
    static IN_APPLICATION_TASK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `poll` marked as the poll of an application's task on this shard.
pub(crate) fn as_application_task<R>(poll: impl FnOnce() -> R) -> R {
    let outer = IN_APPLICATION_TASK.with(|on| on.replace(true));
    let result = poll();
    IN_APPLICATION_TASK.with(|on| on.set(outer));
    result
}

/// An application's task on this shard (`Producer::spawn_on_shard`): its handle, whether it
/// finished, and what answers its caller if the shard stops first.
pub(crate) struct ApplicationTask {
    pub done: std::rc::Rc<std::cell::Cell<bool>>,
    pub abandon: Box<dyn FnOnce()>,
    pub task: Task<()>,
}

thread_local! {
    /// The application's tasks on this shard, until they finish or the shard stops.
    static APPLICATION_TASKS: std::cell::RefCell<Vec<ApplicationTask>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Keeps `task` until it finishes or the shard stops (finished ones are let go here).
pub(crate) fn keep_application_task(task: ApplicationTask) {
    APPLICATION_TASKS.with(|tasks| {
        let mut tasks = tasks.borrow_mut();
        tasks.retain(|t| !t.done.get());
        tasks.push(task);
    });
}

/// The shard is stopping: every application task not finished is answered as abandoned and
/// cancelled. Its future may never be dropped by a stopped executor (a task asleep on a timer
/// is held only by the timer), so its caller is answered here rather than by the drop.
fn abandon_application_tasks() {
    let tasks = APPLICATION_TASKS.with(|tasks| std::mem::take(&mut *tasks.borrow_mut()));
    for task in tasks {
        if !task.done.get() {
            (task.abandon)();
        }
        drop(task.task);
    }
}

/// True while an application's task is polled on a shard: an await there lets the shard run,
/// so an async wait for room or metadata may wait (a blocking one still may not).
pub(crate) fn in_application_task() -> bool {
    IN_APPLICATION_TASK.with(|on| on.get())
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
    ON_SHARD.with(|on| on.set(true));
    // Completions on this thread return their memory through the sink; this returns it even
    // if the shard unwinds.
    let _release = release_sink::FlushOnDrop(&ctx.memory);
    let linger_us = config.linger;
    let mut state = ShardState {
        engine: Engine::new(config)
            .with_batch_memory(ctx.memory.clone())
            .with_buffer_pool(pool),
        intake: Intake::new(linger_us),
        local: VecDeque::new(),
        flushes: Vec::new(),
        closing: false,
        metric_requests: Vec::new(),
        txn: TxnDriver::new(shard),
    };
    let attachment = ctx.tickets.attach(shard);
    let driven = AssertUnwindSafe(drive(shard, &mut state, &inbox, &control, &ctx, attachment))
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

/// The shard's driver loop panicked (a bug of kacrab's own: application code that runs here
/// is isolated where it is called). Everything that waits on this shard is answered, so that
/// nothing hangs and no promise is broken: the producer becomes fatal with an error naming
/// the shard, later sends fail at once, each record completes as the engine knows it (never
/// sent: the error; an attempt may have landed: `OutcomeUnknown`), the queued commands and
/// every latch are answered, the transactional calls fail, and `buffer.memory` comes back.
/// The other shards go on with their records.
fn die(
    shard: usize,
    state: &mut ShardState,
    inbox: &ShardInbox,
    ctx: &ShardContext,
    panic: &(dyn std::any::Any + Send),
) {
    let message = crate::error::panic_message(panic);
    tracing::error!(target: "kacrab::producer", shard, panic = %message, "shard stopped: it panicked");
    let error = ProduceError::ShardPanicked { shard, message };
    ctx.metadata.publish_fatal(error.clone());
    // The engine may have been left mid-change by the panic. Should failing its records panic
    // too, the engine is dropped with them, and each record still in it completes as of
    // unknown outcome (`DeliveryHandle`'s drop), which is as honest, only less precise.
    let engine = &mut state.engine;
    let failed = std::panic::catch_unwind(AssertUnwindSafe(|| engine.abort_all(error.clone())));
    if failed.is_err() {
        tracing::error!(target: "kacrab::producer", shard, "failing the dead shard's records panicked too");
    }
    state.intake.shut_all(&error);
    state.local.extend(inbox.close());
    // A notice shuts its queue as it drops (its batches never reached the engine: `Closed`);
    // any other command's latch counts down.
    state.local.clear();
    state.flushes.clear();
    state.metric_requests.clear();
    state
        .txn
        .fail_calls(TransactionError::Fatal(error.to_string()));
}

/// Dropped last as the shard's future ends, whichever way: closed, dead of a panic [`die`]
/// answered, or dropped while unwinding from a panic that nothing here caught (the executor
/// dropping its tasks as its thread unwinds). It closes the inbox and answers what is still
/// queued there (a record as not in the log, any latch counted down), gives back the memory its
/// completions freed, and only then counts the producer's `stopped` latch down. One dropped by
/// an unwinding also makes the producer fatal, so that later sends fail at once; the records
/// its engine held have completed as of unknown outcome as they dropped before it.
struct Stopping<'a> {
    shard: usize,
    inbox: &'a ShardInbox,
    ctx: &'a ShardContext,
}

impl Drop for Stopping<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(target: "kacrab::producer", shard = self.shard, "shard stopped: a task of it panicked");
            self.ctx
                .metadata
                .publish_fatal(ProduceError::ShardPanicked {
                    shard: self.shard,
                    message: "a task of the shard panicked (its message is in the log)".into(),
                });
        }
        drop(self.inbox.close());
        abandon_application_tasks();
        release_sink::flush_to(&self.ctx.memory);
        self.ctx.stopped.count_down();
    }
}

/// The driver loop: until the shard has closed.
async fn drive(
    shard: usize,
    state: &mut ShardState,
    inbox: &ShardInbox,
    control: &ControlReceiver,
    ctx: &Arc<ShardContext>,
    attachment: Attachment<'_>,
) {
    let ShardState {
        engine,
        intake,
        local,
        flushes,
        closing,
        metric_requests,
        txn,
    } = state;
    // The inbox's clock: batches' creation times (`producer::accumulator`) and the shard's
    // park deadline are on it.
    let start = inbox.epoch();
    let now = move || start.elapsed().as_micros() as u64;
    let mut replica = IdentityReplica::new(shard);
    adopt_tickets(&ctx.tickets, &mut replica, engine);
    let (events_tx, events_rx) = local_channel::new_unbounded::<ConnectionEvent>();
    let setup = ConnectionSetup {
        events: Rc::new(events_tx),
        counters: ctx.counters.clone(),
        connect_timeout: ctx.connection_setup_timeout,
        max_frame: ctx.max_frame,
        rotation: Rc::default(),
        tls: ctx.tls.clone(),
    };
    let mut connections = Connections::default();
    let mut pending: Option<Wake> = None;
    let mut report = ShardReport::default();
    txn.publish_status(engine, &**ctx);
    let mut metrics = ShardPublisher::new(shard, ctx.metrics.clone());

    loop {
        // 1. What woke us, then everything else already waiting. One clock read serves every
        // record appended in this turn.
        let turn_now = now();
        let mut handled = 0usize;
        let handle_command = |cmd: ShardCommand,
                              append_at: u64,
                              engine: &mut Engine<DeliveryHandle>,
                              intake: &mut Intake,
                              txn: &mut TxnDriver,
                              flushes: &mut Vec<(u64, Countdown)>,
                              closing: &mut bool,
                              metric_requests: &mut Vec<Countdown>| {
            // A command that must come after every record sent before it takes the open
            // batches first.
            if matches!(
                cmd,
                ShardCommand::Flush(_)
                    | ShardCommand::Purge(_)
                    | ShardCommand::TxnBarrier { .. }
                    | ShardCommand::Close
            ) {
                intake.take_into(engine, txn, append_at, true);
            }
            match cmd {
                ShardCommand::Queue(notice) => intake.notice(notice.take()),
                ShardCommand::Spawn(spawn) => spawn.run(),
                ShardCommand::RequestTopic(topic) => engine.request_topic(&topic),
                ShardCommand::SendRefused { error, txn_barrier } => {
                    // A barrier before it: a commit or abort that began after the record was
                    // checked, and so never counted on it.
                    if txn.admit(txn_barrier).is_ok() {
                        engine.txn_send_refused(*error);
                    }
                }
                ShardCommand::Flush(latch) => flushes.push((engine.begin_flush(), latch)),
                ShardCommand::PublishMetrics(latch) => metric_requests.push(latch),
                ShardCommand::Purge(done) => {
                    let purged = engine.purge_unsent();
                    tracing::debug!(target: "kacrab::producer", purged, "purged unsent records");
                    drop(done);
                }
                ShardCommand::TxnBarrier { token, commit } => txn.on_barrier(token, commit, engine),
                #[cfg(feature = "testkit")]
                ShardCommand::Panic { in_task: false } => panic!("a panic injected by the testkit"),
                #[cfg(feature = "testkit")]
                ShardCommand::Panic { in_task: true } => {
                    drop(
                        glommio::spawn_local(async {
                            panic!("a panic injected by the testkit in a task of the shard")
                        })
                        .detach(),
                    );
                }
                ShardCommand::Close => {
                    engine.begin_close();
                    *closing = true;
                }
            }
        };
        // Control commands go first, and again before each data command: one queued before a
        // data command (say `Ended` before a record of the next transaction) is handled
        // before it.
        let drain_control = |engine: &mut Engine<DeliveryHandle>,
                             txn: &mut TxnDriver,
                             first: Option<TxnCommand>| {
            if let Some(cmd) = first {
                txn.handle(cmd, engine, &**ctx);
            }
            while let Some(cmd) = control.try_recv() {
                txn.handle(cmd, engine, &**ctx);
            }
        };
        match pending.take() {
            Some(Wake::Control(Some(cmd))) => drain_control(engine, txn, Some(cmd)),
            Some(Wake::Event(Some(event))) => {
                handle_event(shard, engine, &mut connections, ctx, event, now());
            }
            _ => {}
        }
        drain_control(engine, txn, None);
        if local.is_empty() {
            inbox.take_all(local);
            metrics.handoff(local.len());
        }
        while handled < COMMANDS_PER_TURN {
            let Some(cmd) = local.pop_front() else { break };
            if control.has_waiting() {
                drain_control(engine, txn, None);
            }
            handle_command(
                cmd,
                turn_now,
                engine,
                intake,
                txn,
                flushes,
                closing,
                metric_requests,
            );
            handled += 1;
        }
        while let Some(Some(event)) = future::poll_once(events_rx.recv()).await {
            handle_event(shard, engine, &mut connections, ctx, event, now());
        }
        // The batches that are ready, and the open ones whose linger ran out (all of them
        // while closing).
        intake.take_into(engine, txn, now(), *closing);

        // 2. The sender loop, and its actions, until it is quiet.
        if replica.flush(&ctx.tickets) {
            ctx.nudge_peers(shard);
        }
        adopt_tickets(&ctx.tickets, &mut replica, engine);
        for _ in 0..8 {
            engine.poll(now());
            if !engine.has_actions() && !engine.has_txn_actions() {
                break;
            }
            let actions: Vec<Action> = engine.take_actions().collect();
            for action in actions {
                match action {
                    // The identity is producer-wide: it changes only through the ring.
                    Action::ProducerIdAssigned(assigned) => ctx.publish_ticket(
                        shard,
                        &mut replica,
                        engine,
                        Ticket::Install {
                            producer_id: assigned.producer_id,
                            epoch: assigned.epoch,
                        },
                    ),
                    Action::RequestEpochBump { observed } => {
                        tracing::info!(
                            target: "kacrab::epoch",
                            shard,
                            producer_id = observed.producer_id,
                            epoch = observed.epoch,
                            "epoch bump requested: a batch's sequence state is unresolved"
                        );
                        ctx.publish_ticket(
                            shard,
                            &mut replica,
                            engine,
                            Ticket::Bump {
                                producer_id: observed.producer_id,
                                epoch: observed.epoch,
                            },
                        )
                    }
                    action => execute(shard, engine, &mut connections, ctx, &setup, action, now()),
                }
            }
            for action in engine.take_txn_actions() {
                txn.route(
                    action,
                    engine,
                    &**ctx,
                    &mut |engine: &mut Engine<DeliveryHandle>, from, to| {
                        ctx.publish_ticket(
                            shard,
                            &mut replica,
                            engine,
                            Ticket::Replace { from, to },
                        )
                    },
                );
            }
        }
        txn.publish_status(engine, &**ctx);
        if let Some(err) = engine.fatal_error() {
            if ctx.metadata.fatal().is_none() {
                tracing::error!(target: "kacrab::producer", shard, error = %err, "producer fatal");
            }
            ctx.metadata.publish_fatal(err.clone());
        }
        // What this turn's completions freed, in one release, before any flush is reported
        // done: once `flush` returns, its records hold no buffer memory.
        release_sink::flush_to(&ctx.memory);
        metrics.maybe_publish(
            engine.metrics(),
            replica.applied(),
            !metric_requests.is_empty(),
        );
        // Each request's count goes down as it drops.
        metric_requests.clear();
        flushes.retain(|(token, _)| !engine.flush_done(*token));
        publish_report(shard, engine, &replica, &mut connections, ctx, &mut report);
        if *closing {
            // Set before any `Close` is pushed.
            let deadline = ctx.close_by.get();
            if (engine.is_idle() && intake.is_empty())
                || deadline.is_none_or(|at| Instant::now() >= at)
            {
                intake.shut_all(&ProduceError::Closed);
                engine.abort_all(ProduceError::Closed);
                flushes.clear();
                // Close every socket and cancel every task before saying we are done.
                connections.slots.clear();
                connections.changed = true;
                publish_report(shard, engine, &replica, &mut connections, ctx, &mut report);
                metrics.maybe_publish(engine.metrics(), replica.applied(), true);
                // Publishers must not wait for a reader that is gone.
                attachment.detach();
                txn.close();
                // Nothing is queued behind `Close` (the inbox refuses pushes after it);
                // whatever is left is answered rather than left in a queue nobody reads.
                // A record's handle completes it with `Closed` as it drops, a latch counts
                // down. `Stopping` then gives back the memory and reports the shard stopped.
                local.extend(inbox.close());
                local.clear();
                return;
            }
        }
        if !local.is_empty() {
            glommio::executor().yield_task_queue_now().await;
            continue;
        }

        // 3. Sleep until a command, a connection event or the engine's next deadline, and
        // never longer than MAX_PARK.
        let t = now();
        let wakeup = match (engine.next_wakeup(t), intake.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sleep_for = match wakeup {
            Some(at) if at > t => Some(Duration::from_micros(at - t).min(MAX_PARK)),
            Some(_) => None,
            None => Some(MAX_PARK),
        };
        let timer = async move {
            if let Some(duration) = sleep_for {
                glommio::timer::sleep(duration).await;
            }
            Wake::Timer
        };
        let until = t + sleep_for.map_or(0, |d| d.as_micros() as u64);
        let command = async {
            inbox.parked(until).await;
            Wake::Inbox
        };
        let control_command = async { Wake::Control(control.recv().await) };
        let event = async { Wake::Event(events_rx.recv().await) };
        let parked_at = metrics.parking();
        pending = Some(
            future::or(
                control_command,
                future::or(command, future::or(event, timer)),
            )
            .await,
        );
        metrics.unparked(parked_at);
    }
}

/// Publishes the shard's report when something in it changed.
fn publish_report(
    shard: usize,
    engine: &Engine<DeliveryHandle>,
    replica: &IdentityReplica,
    connections: &mut Connections,
    ctx: &ShardContext,
    report: &mut ShardReport,
) {
    let identity = Some(engine.identity());
    if !connections.changed
        && report.engine == *engine.stats()
        && report.identity == identity
        && report.identity_tickets == replica.applied()
    {
        return;
    }
    report.engine = engine.stats().clone();
    report.identity = identity;
    report.identity_tickets = replica.applied();
    report.connections = connections.report();
    connections.changed = false;
    ctx.counters.publish_shard(shard, report);
}

fn handle_event(
    shard: usize,
    engine: &mut Engine<DeliveryHandle>,
    connections: &mut Connections,
    ctx: &ShardContext,
    event: ConnectionEvent,
    now: u64,
) {
    match event {
        ConnectionEvent::Connected {
            node,
            generation,
            tasks,
        } => {
            // A connection nobody waits for any more is dropped here, closing it.
            if let Some(slot) = connections.current(node, generation) {
                tracing::debug!(target: "kacrab::connection", shard, node, generation, "connection up");
                slot.live = Some(tasks);
                connections.changed = true;
                engine.on_connected(now, node, generation);
            }
        }
        ConnectionEvent::Frame {
            node,
            generation,
            body,
        } => {
            if let Some(slot) = connections.current(node, generation) {
                slot.responses_read += 1;
                connections.changed = true;
            }
            engine.on_frame(now, node, generation, body);
        }
        ConnectionEvent::Closed {
            node,
            generation,
            error,
        } => {
            // A refused TLS handshake is fatal, as a refused SASL authentication is.
            let tls_refusal = match &error {
                ConnectionError::Tls { reason } => Some(reason.clone()),
                _ => None,
            };
            if connections.current(node, generation).is_some() {
                tracing::info!(
                    target: "kacrab::connection",
                    shard,
                    node,
                    generation,
                    error = %error,
                    "connection down"
                );
                ctx.counters.record_failure(ConnectionFailure {
                    shard,
                    node,
                    generation,
                    error,
                });
                connections.remove(node, generation);
            }
            match tls_refusal {
                Some(reason) => engine.on_tls_refused(now, node, generation, reason),
                None => engine.on_disconnected(now, node, generation),
            }
        }
    }
}

fn execute(
    shard: usize,
    engine: &mut Engine<DeliveryHandle>,
    connections: &mut Connections,
    ctx: &ShardContext,
    setup: &ConnectionSetup,
    action: Action,
    now: u64,
) {
    match action {
        Action::Connect {
            node,
            generation,
            address,
        } => {
            tracing::debug!(target: "kacrab::connection", shard, node, generation, %address, "connecting");
            let task = spawn_connect(node, generation, address, setup);
            // Replaces (and so closes) any older connection to the node.
            connections.slots.insert(
                node,
                ConnectionSlot {
                    generation,
                    _connect: Some(task),
                    live: None,
                    requests_written: 0,
                    responses_read: 0,
                },
            );
            connections.changed = true;
        }
        Action::Write {
            node,
            generation,
            frame,
        } => match connections.current(node, generation) {
            Some(slot) => {
                // A writer that is gone queued its `Closed` event before it went: the engine
                // learns of the loss from that event, with its reason, and this request
                // fails with the others in flight there (outcome unknown).
                let sent = slot
                    .live
                    .as_ref()
                    .is_some_and(|live| live.writer.try_send(frame).is_ok());
                slot.requests_written += u64::from(sent);
                connections.changed |= sent;
            }
            // No socket of that generation: the engine is behind; this tells it.
            None => engine.on_disconnected(now, node, generation),
        },
        Action::Disconnect { node, generation } => {
            if let Some(slot) = connections.current(node, generation) {
                let established = slot.live.is_some();
                tracing::info!(
                    target: "kacrab::connection",
                    shard,
                    node,
                    generation,
                    established,
                    "connection abandoned (request timeout or protocol violation)"
                );
                ctx.counters.record_failure(ConnectionFailure {
                    shard,
                    node,
                    generation,
                    error: ConnectionError::Abandoned { established },
                });
                connections.remove(node, generation);
            }
        }
        Action::TopicMetadata {
            topic,
            partition_count,
            error_code,
        } => {
            tracing::debug!(
                target: "kacrab::metadata",
                shard,
                topic = &*topic,
                partition_count,
                error_code,
                "topic metadata"
            );
            ctx.metadata.publish(
                topic,
                TopicInfo {
                    partition_count,
                    error_code,
                },
            )
        }
        // Published to the ticket ring by the driver loop, never executed here.
        Action::ProducerIdAssigned(_) | Action::RequestEpochBump { .. } => {}
    }
}
