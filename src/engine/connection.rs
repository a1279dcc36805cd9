//! Per-broker connection state as the engine sees it: lifecycle, version negotiation and the
//! requests in flight, answered in order.

use std::collections::VecDeque;

use crate::protocol::api::{ApiKey, NegotiatedVersions};
use crate::protocol::sasl::SaslClient;

use super::{Micros, NodeId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionState {
    /// No socket; may reconnect at `retry_at`.
    Idle {
        retry_at: Micros,
    },
    /// `Action::Connect` issued.
    Connecting {
        since: Micros,
    },
    /// Connected; ApiVersions at `version` outstanding.
    Negotiating {
        version: i16,
    },
    /// Versions known; the SASL exchange is under way and nothing else may be sent.
    Authenticating,
    /// The SASL session ends soon (KIP-368 `session_lifetime_ms`): nothing new is sent; once
    /// its answers are in, the connection re-authenticates (back to `Authenticating`).
    Expiring,
    Ready,
}

/// A request written on a connection and not yet answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlightHeader {
    pub correlation_id: i32,
    pub api: ApiKey,
    pub version: i16,
    pub sent_at: Micros,
}

pub struct Connection<R> {
    pub node: NodeId,
    pub state: ConnectionState,
    /// Changes whenever a socket is replaced, so events about an old socket are dropped.
    pub generation: u64,
    pub versions: NegotiatedVersions,
    /// In write order; Kafka answers requests on one connection in order.
    pub in_flight: VecDeque<(InFlightHeader, R)>,
    pub next_correlation_id: i32,
    /// Consecutive failed connection attempts, for the reconnect backoff.
    pub failures: u32,
    /// The SASL exchange of the current socket, while `Authenticating`.
    pub sasl: Option<SaslClient>,
    /// When a `Ready` connection starts `Expiring`: before the broker's SASL session ends.
    pub session_reauthenticate_at: Option<Micros>,
    /// The last time the socket came up, carried a request or an answer: the start of its
    /// idle time (`connections.max.idle.ms`).
    pub last_activity: Micros,
}

impl<R> Connection<R> {
    pub fn new(node: NodeId) -> Self {
        Connection {
            node,
            state: ConnectionState::Idle { retry_at: 0 },
            generation: 0,
            versions: NegotiatedVersions::default(),
            in_flight: VecDeque::new(),
            next_correlation_id: 0,
            failures: 0,
            sasl: None,
            session_reauthenticate_at: None,
            last_activity: 0,
        }
    }

    pub fn is_ready(&self) -> bool {
        self.state == ConnectionState::Ready
    }

    pub fn take_correlation_id(&mut self) -> i32 {
        let id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1) & i32::MAX;
        id
    }

    /// Number of produce requests awaiting a response.
    pub fn produce_in_flight(&self) -> usize {
        self.in_flight
            .iter()
            .filter(|(h, _)| h.api == ApiKey::Produce)
            .count()
    }
}
