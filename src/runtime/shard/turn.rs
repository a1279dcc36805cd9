//! The steps of one turn of the driver loop: the commands (control first, then the inbox's),
//! the connection events, the batches due, the engine and its actions, and what the turn
//! publishes.

use crate::engine::{Action, ProducerIdAndEpoch};
use crate::runtime::buffer_memory::release_sink;
use crate::runtime::command::ShardCommand;
use crate::runtime::metadata_snapshot::TopicInfo;
use crate::runtime::ticket_ring::Ticket;
use crate::runtime::txn_driver::TxnCommand;

use super::tickets::adopt_tickets;
use super::{Shard, ShardContext, ShardState};

/// Commands handled per turn before the engine gets to send (keeps latency bounded under a
/// flood of appends).
const COMMANDS_PER_TURN: usize = 8192;

/// Rounds of `Engine::poll` and its actions per turn. Carrying out actions can give the engine
/// more to do at once (an identity adopted from the ring, a transactional action handled by
/// this shard's own engine); the bound keeps a turn finite, so commands and events get theirs.
const ENGINE_ROUNDS: usize = 8;

impl Shard<'_> {
    /// Handles a command taken from the control queue, then every other waiting there.
    pub(super) fn handle_control(&mut self, cmd: TxnCommand) {
        self.state.txn.handle(cmd, &mut self.state.engine, self.ctx);
        self.drain_control();
    }

    /// Handles every command waiting on the control queue. Control commands go first, and
    /// again before each data command: one queued before a data command (say `Ended` before a
    /// record of the next transaction) is handled before it.
    fn drain_control(&mut self) {
        while let Some(cmd) = self.control.try_recv() {
            self.state.txn.handle(cmd, &mut self.state.engine, self.ctx);
        }
    }

    /// Handles the control commands, then up to [`COMMANDS_PER_TURN`] of the inbox's; what
    /// is left of them waits for the next turn, and no more is taken from the inbox until it
    /// is handled. Records appended now are stamped `append_at`.
    pub(super) fn take_commands(&mut self, append_at: u64) {
        self.drain_control();
        if self.state.local.is_empty() {
            self.inbox.take_all(&mut self.state.local);
            self.metrics.handoff(self.state.local.len());
        }
        for _ in 0..COMMANDS_PER_TURN {
            let Some(cmd) = self.state.local.pop_front() else {
                break;
            };
            if self.control.has_waiting() {
                self.drain_control();
            }
            self.handle_command(cmd, append_at);
        }
    }

    fn handle_command(&mut self, cmd: ShardCommand, append_at: u64) {
        let ShardState {
            engine,
            intake,
            flushes,
            closing,
            metric_requests,
            txn,
            ..
        } = &mut *self.state;
        // A command that must come after every record sent before it takes the open batches
        // first.
        if matches!(
            cmd,
            ShardCommand::Flush(_)
                | ShardCommand::Purge(_)
                | ShardCommand::TxnBarrier { .. }
                | ShardCommand::Close
        ) {
            intake.take_into(engine, txn, append_at, true, &[]);
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
    }

    /// Hands the engine every connection event already waiting.
    pub(super) async fn take_events(&mut self) {
        while let Some(event) = self.connections.ready_event().await {
            let now = self.now();
            self.connections
                .on_event(&mut self.state.engine, self.ctx, event, now);
        }
    }

    /// Moves the batches that are ready, and the open ones whose linger ran out (all of them
    /// while closing), into the engine; then the open ones of the partitions whose broker the
    /// engine will send to now, which go in the same request (`runtime::intake`).
    pub(super) fn take_batches(&mut self) {
        let now = self.now();
        let state = &mut *self.state;
        state
            .intake
            .take_into(&mut state.engine, &state.txn, now, state.closing, &[]);
        if state.closing || state.intake.is_empty() {
            return;
        }
        let ready = state.engine.drain_ready_nodes(now);
        if !ready.is_empty() {
            state
                .intake
                .take_into(&mut state.engine, &state.txn, now, false, &ready);
        }
    }

    /// Brings the identity up to date with the ring, then polls the engine and carries out its
    /// actions, for up to [`ENGINE_ROUNDS`] rounds while actions keep coming.
    pub(super) fn drive_engine(&mut self) {
        if self.replica.flush(&self.ctx.tickets) {
            self.ctx.nudge_peers(self.index);
        }
        adopt_tickets(&self.ctx.tickets, &mut self.replica, &mut self.state.engine);
        for _ in 0..ENGINE_ROUNDS {
            let now = self.now();
            let engine = &mut self.state.engine;
            engine.poll(now);
            if !engine.has_actions() && !engine.has_txn_actions() {
                break;
            }
            let actions: Vec<Action> = engine.take_actions().collect();
            for action in actions {
                self.carry_out(action);
            }
            self.route_txn_actions();
        }
    }

    /// Carries out one of the engine's actions. The identity is producer-wide: a producer id
    /// assigned, or an epoch bump asked for, goes to the ticket ring, from which every shard,
    /// this one included, adopts it in one order.
    fn carry_out(&mut self, action: Action) {
        match action {
            Action::ProducerIdAssigned(assigned) => self.publish_ticket(Ticket::Install {
                producer_id: assigned.producer_id,
                epoch: assigned.epoch,
            }),
            Action::RequestEpochBump { observed } => self.request_epoch_bump(observed),
            Action::Connect {
                node,
                generation,
                address,
            } => self.connections.connect(node, generation, address),
            Action::Write {
                node,
                generation,
                frame,
            } => {
                let now = self.now();
                self.connections
                    .write(&mut self.state.engine, node, generation, frame, now);
            }
            Action::Disconnect { node, generation } => {
                self.connections.abandon(self.ctx, node, generation);
            }
            Action::TopicMetadata {
                topic,
                partition_count,
                error_code,
            } => {
                tracing::debug!(
                    target: "kacrab::metadata",
                    shard = self.index,
                    topic = &*topic,
                    partition_count,
                    error_code,
                    "topic metadata"
                );
                let info = TopicInfo {
                    partition_count,
                    error_code,
                };
                self.ctx.metadata.publish(topic, info);
            }
        }
    }

    fn request_epoch_bump(&mut self, observed: ProducerIdAndEpoch) {
        tracing::info!(
            target: "kacrab::epoch",
            shard = self.index,
            producer_id = observed.producer_id,
            epoch = observed.epoch,
            "epoch bump requested: a batch's sequence state is unresolved"
        );
        self.publish_ticket(Ticket::Bump {
            producer_id: observed.producer_id,
            epoch: observed.epoch,
        });
    }

    fn publish_ticket(&mut self, ticket: Ticket) {
        self.ctx.publish_ticket(
            self.index,
            &mut self.replica,
            &mut self.state.engine,
            ticket,
        );
    }

    /// Hands the engine's transactional actions to the transactional driver; an identity it
    /// replaces goes to the ring.
    fn route_txn_actions(&mut self) {
        let Shard {
            index,
            state,
            ctx,
            replica,
            ..
        } = self;
        let ShardState { engine, txn, .. } = &mut **state;
        for action in engine.take_txn_actions() {
            txn.route(action, engine, *ctx, &mut |engine, from, to| {
                ctx.publish_ticket(*index, replica, engine, Ticket::Replace { from, to })
            });
        }
    }

    /// What a turn publishes: the transactional status, a fatal error, the memory freed, the
    /// metrics, the flushes done and the shard's report.
    pub(super) fn finish_turn(&mut self) {
        let now = self.now();
        self.loads.publish(&self.state.engine, now);
        let ShardState {
            engine,
            flushes,
            metric_requests,
            txn,
            ..
        } = &mut *self.state;
        let ctx: &ShardContext = self.ctx;
        txn.publish_status(engine, ctx);
        if let Some(err) = engine.fatal_error() {
            if ctx.metadata.fatal().is_none() {
                tracing::error!(target: "kacrab::producer", shard = self.index, error = %err, "producer fatal");
            }
            ctx.metadata.publish_fatal(err.clone());
        }
        // What this turn's completions freed, in one release, before any flush is reported
        // done: once `flush` returns, its records hold no buffer memory.
        release_sink::flush_to(&ctx.memory);
        self.metrics.maybe_publish(
            engine.metrics(),
            self.replica.applied(),
            !metric_requests.is_empty(),
        );
        // Each request's count goes down as it drops.
        metric_requests.clear();
        flushes.retain(|(token, _)| !engine.flush_done(*token));
        self.publish_report();
    }

    /// Publishes the shard's report when something in it changed.
    pub(super) fn publish_report(&mut self) {
        let engine = &self.state.engine;
        let identity = Some(engine.identity());
        let report = &mut self.report;
        if !self.connections.changed()
            && report.engine == *engine.stats()
            && report.identity == identity
            && report.identity_tickets == self.replica.applied()
        {
            return;
        }
        report.engine = engine.stats().clone();
        report.identity = identity;
        report.identity_tickets = self.replica.applied();
        report.connections = self.connections.take_report();
        self.ctx.counters.publish_shard(self.index, report);
    }
}
