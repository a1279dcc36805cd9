//! The shard's broker connections: one slot per node, the events its connection tasks send
//! back (connected, a response frame, closed), and the engine's actions that act on them
//! (connect, write, disconnect).
//!
//! Invariant: a slot is only ever replaced or removed by an event or action naming its own
//! generation: news about an older socket must not touch a newer one.

use std::collections::HashMap;
use std::rc::Rc;

use futures_lite::future;
use glommio::channels::local_channel::{self, LocalReceiver};
use glommio::Task;

use crate::engine::{Engine, NodeId};
use crate::protocol::wire::Frame;
use crate::runtime::connection::{
    spawn_connect, ConnectionEvent, ConnectionSetup, ConnectionTasks,
};
use crate::runtime::delivery_handle::DeliveryHandle;
use crate::runtime::stats::{ConnectionError, ConnectionFailure, ConnectionReport};

use super::ShardContext;

struct ConnectionSlot {
    generation: u64,
    _connect: Option<Task<()>>,
    live: Option<ConnectionTasks>,
    requests_written: u64,
    responses_read: u64,
}

/// The shard's connections, by node, and the channel their tasks report on.
pub(super) struct Connections {
    /// Declared first, so dropped first: the tasks are cancelled while the channel they
    /// report on still exists.
    slots: HashMap<NodeId, ConnectionSlot>,
    /// Something a report shows changed since the last one was published.
    changed: bool,
    shard: usize,
    setup: ConnectionSetup,
    events: LocalReceiver<ConnectionEvent>,
}

impl Connections {
    pub(super) fn new(shard: usize, ctx: &ShardContext) -> Connections {
        let (events_tx, events) = local_channel::new_unbounded::<ConnectionEvent>();
        let setup = ConnectionSetup {
            events: Rc::new(events_tx),
            counters: ctx.counters.clone(),
            connect_timeout: ctx.connection_setup_timeout,
            max_frame: ctx.max_frame,
            rotation: Rc::default(),
            tls: ctx.tls.clone(),
        };
        Connections {
            slots: HashMap::new(),
            changed: false,
            shard,
            setup,
            events,
        }
    }

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

    /// Closes every socket and cancels every task (the shard is closing).
    pub(super) fn close_all(&mut self) {
        self.slots.clear();
        self.changed = true;
    }

    /// Whether something a report shows changed since the last [`take_report`](Self::take_report).
    pub(super) fn changed(&self) -> bool {
        self.changed
    }

    /// The connections as a report shows them, by node.
    pub(super) fn take_report(&mut self) -> Vec<ConnectionReport> {
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
        self.changed = false;
        report
    }

    /// An event already waiting, if any (never waits).
    pub(super) async fn ready_event(&self) -> Option<ConnectionEvent> {
        future::poll_once(self.events.recv()).await.flatten()
    }

    /// The next event, once one comes.
    pub(super) async fn next_event(&self) -> Option<ConnectionEvent> {
        self.events.recv().await
    }

    /// Hands `event` to the engine, and to the slot it names if that is still current.
    pub(super) fn on_event(
        &mut self,
        engine: &mut Engine<DeliveryHandle>,
        ctx: &ShardContext,
        event: ConnectionEvent,
        now: u64,
    ) {
        let shard = self.shard;
        match event {
            ConnectionEvent::Connected {
                node,
                generation,
                tasks,
            } => {
                // A connection nobody waits for any more is dropped here, closing it.
                if let Some(slot) = self.current(node, generation) {
                    tracing::debug!(target: "kacrab::connection", shard, node, generation, "connection up");
                    slot.live = Some(tasks);
                    self.changed = true;
                    engine.on_connected(now, node, generation);
                }
            }
            ConnectionEvent::Frame {
                node,
                generation,
                body,
            } => {
                if let Some(slot) = self.current(node, generation) {
                    slot.responses_read += 1;
                    self.changed = true;
                }
                engine.on_frame(now, node, generation, body);
            }
            ConnectionEvent::Closed {
                node,
                generation,
                error,
            } => self.on_closed(engine, ctx, node, generation, error, now),
        }
    }

    fn on_closed(
        &mut self,
        engine: &mut Engine<DeliveryHandle>,
        ctx: &ShardContext,
        node: NodeId,
        generation: u64,
        error: ConnectionError,
        now: u64,
    ) {
        // A refused TLS handshake is fatal, as a refused SASL authentication is.
        let tls_refusal = match &error {
            ConnectionError::Tls { reason } => Some(reason.clone()),
            _ => None,
        };
        if self.current(node, generation).is_some() {
            tracing::info!(
                target: "kacrab::connection",
                shard = self.shard,
                node,
                generation,
                error = %error,
                "connection down"
            );
            ctx.counters.record_failure(ConnectionFailure {
                shard: self.shard,
                node,
                generation,
                error,
            });
            self.remove(node, generation);
        }
        match tls_refusal {
            Some(reason) => engine.on_tls_refused(now, node, generation, reason),
            None => engine.on_disconnected(now, node, generation),
        }
    }

    /// `Action::Connect`: opens a connection of `generation` to `node`, replacing (and so
    /// closing) any older one.
    pub(super) fn connect(&mut self, node: NodeId, generation: u64, address: String) {
        tracing::debug!(target: "kacrab::connection", shard = self.shard, node, generation, %address, "connecting");
        let task = spawn_connect(node, generation, address, &self.setup);
        self.slots.insert(
            node,
            ConnectionSlot {
                generation,
                _connect: Some(task),
                live: None,
                requests_written: 0,
                responses_read: 0,
            },
        );
        self.changed = true;
    }

    /// `Action::Write`: hands `frame` to the writer of the connection it was built for.
    pub(super) fn write(
        &mut self,
        engine: &mut Engine<DeliveryHandle>,
        node: NodeId,
        generation: u64,
        frame: Frame,
        now: u64,
    ) {
        match self.current(node, generation) {
            Some(slot) => {
                // A writer that is gone queued its `Closed` event before it went: the engine
                // learns of the loss from that event, with its reason, and this request
                // fails with the others in flight there (outcome unknown).
                let sent = slot
                    .live
                    .as_ref()
                    .is_some_and(|live| live.writer.try_send(frame).is_ok());
                slot.requests_written += u64::from(sent);
                self.changed |= sent;
            }
            // No socket of that generation: the engine is behind; this tells it.
            None => engine.on_disconnected(now, node, generation),
        }
    }

    /// `Action::Disconnect`: the engine gave up on the connection; its socket closes and its
    /// tasks are cancelled.
    pub(super) fn abandon(&mut self, ctx: &ShardContext, node: NodeId, generation: u64) {
        if let Some(slot) = self.current(node, generation) {
            let established = slot.live.is_some();
            tracing::info!(
                target: "kacrab::connection",
                shard = self.shard,
                node,
                generation,
                established,
                "connection abandoned (request timeout or protocol violation)"
            );
            ctx.counters.record_failure(ConnectionFailure {
                shard: self.shard,
                node,
                generation,
                error: ConnectionError::Abandoned { established },
            });
            self.remove(node, generation);
        }
    }
}
