//! Idle connections closed by either side, as Kafka's `connections.max.idle.ms` does.
//!
//! - **The broker** (`IdleLimits::broker`, Kafka's default 10 minutes) closes a connection on
//!   which it has read or written nothing for that long: each `SocketServer` processor's
//!   `Selector` tracks every channel's last activity and closes the oldest one past the limit
//!   (`Selector.maybeCloseOldestConnection`). The world counts a connection active when it
//!   opens, when a request arrives and when an answer is delivered, and never closes one with
//!   an answer still to deliver (a request being served).
//! - **The client** (`IdleLimits::client`, Java's default 9 minutes, so that the client closes
//!   first) closes its own idle connections: that is the engine's `connections_max_idle`, set in
//!   its configuration before the engines are built.
//!
//! A broker's close can cross a request the client has just written: the broker never reads
//! it, and the client learns only that the connection went away with the request in flight.
//! Its outcome is unknown to the client, though it is not in the log; the retry must land it
//! once. The world counts such requests (`FaultCounts::idle_crossings`).

use crate::engine::Micros;

use super::super::rng::Rng;
use super::{ConnState, Event, Sim, MS};

/// The idle limits of a random plan (both off by default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdleLimits {
    /// The brokers' `connections.max.idle.ms`.
    pub broker: Option<Micros>,
    /// The producer's `connections.max.idle.ms`.
    pub client: Option<Micros>,
}

/// Salts the seed of the stream the idle limits are drawn from, so that the rest of a plan is
/// what it was without them.
const IDLE_SALT: u64 = 0x6964_6c65_636c_6f73;

impl IdleLimits {
    /// Draws each side's limit for a third of the plans, from tens of milliseconds (a close
    /// between most bursts of sends) to over a second (a close only in a long pause).
    pub fn draw(seed: u64) -> Self {
        let mut rng = Rng::new(seed ^ IDLE_SALT);
        let limit = |rng: &mut Rng| rng.chance(0.35).then(|| rng.range(20, 1_500) * MS);
        let broker = limit(&mut rng);
        let client = limit(&mut rng);
        IdleLimits { broker, client }
    }
}

impl Sim {
    /// Sets the brokers' `connections.max.idle.ms` (`None`: never close). Applies to the
    /// connections' next activity.
    pub fn set_connections_max_idle(&mut self, limit: Option<Micros>) {
        self.broker_idle_limit = limit;
    }

    /// When `broker` closes `shard`'s open connection to it if nothing happens on it before:
    /// `None` without a limit or such a connection.
    pub fn broker_idle_close_due(&self, shard: usize, broker: i32) -> Option<Micros> {
        let limit = self.broker_idle_limit?;
        self.conns
            .values()
            .filter(|c| c.engine == shard && c.broker == broker && c.state == ConnState::Open)
            .map(|c| c.last_activity + limit)
            .max()
    }

    /// Connections the producer's engines closed for idleness, every shard.
    pub fn producer_idle_closes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.engine.stats().idle_disconnects)
            .sum()
    }

    /// A connection's activity as the broker sees it: the idle clock restarts.
    pub(super) fn note_activity(&mut self, id: u64) {
        let Some(limit) = self.broker_idle_limit else {
            return;
        };
        let now = self.now;
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        conn.last_activity = now;
        if !conn.idle_check_pending {
            conn.idle_check_pending = true;
            self.schedule(now + limit, Event::IdleCheck(id));
        }
    }

    /// The broker looks at a connection whose idle time may have run out: it closes it if
    /// nothing happened on it for the limit and it owes no answer, or looks again when the
    /// limit runs out from its last activity.
    pub(super) fn idle_check(&mut self, id: u64) {
        let Some(limit) = self.broker_idle_limit else {
            return;
        };
        let now = self.now;
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        conn.idle_check_pending = false;
        // A stalled connection's path is dead: a close would reach nobody, and the client
        // ends the connection on its own request timeout.
        if conn.state != ConnState::Open {
            return;
        }
        let due = conn.last_activity + limit;
        if due > now {
            conn.idle_check_pending = true;
            self.schedule(due, Event::IdleCheck(id));
            return;
        }
        if !conn.answers.is_empty() {
            // Serving a request: the answer's delivery is activity and looks again.
            return;
        }
        conn.idle_closed = true;
        self.quiet.counts.idle_closes += 1;
        self.close_by_broker(id);
    }
}
