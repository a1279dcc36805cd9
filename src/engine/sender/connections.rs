//! Connections to brokers: connecting with backoff, the ApiVersions handshake (then SASL, in
//! `sasl`), sending a
//! request on a ready connection, choosing the least-loaded node, and the connection-setup and
//! request timeouts (Java's `NetworkClient`). A connection is known by its generation: an event
//! about an older one is dropped. Requests lost with a connection go to the coordinator's
//! `fail_request_on_disconnect`.

use bytes::Bytes;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::error::{ErrorCause, ProduceError};
use crate::protocol::api::{api_versions_fallback, ApiKey, NegotiatedVersions};
use crate::protocol::error_code::{self, code};
use crate::protocol::wire::{self, Frame, WireError};

use super::super::connection::{Connection, ConnectionState, InFlightHeader};
use super::super::{Action, Delivery, Micros, NodeId};
use super::{exponential_backoff, Engine, RequestBody};

impl<D: Delivery> Engine<D> {
    pub fn on_connected(&mut self, now: Micros, node: NodeId, generation: u64) {
        let Some(conn) = self.connections.get_mut(&node) else {
            return;
        };
        if conn.generation != generation
            || !matches!(conn.state, ConnectionState::Connecting { .. })
        {
            return;
        }
        conn.failures = 0;
        conn.last_activity = now;
        self.send_api_versions(now, node, ApiKey::ApiVersions.supported().max);
    }

    /// The connection is gone (or never came up). Requests on it have unknown outcomes.
    pub fn on_disconnected(&mut self, now: Micros, node: NodeId, generation: u64) {
        let Some(conn) = self.connections.get_mut(&node) else {
            return;
        };
        if conn.generation != generation || matches!(conn.state, ConnectionState::Idle { .. }) {
            return;
        }
        self.stats.disconnects += 1;
        // A lost connection, or one that never came up, may mean the broker died and its
        // partitions have new leaders: ask for fresh metadata (Java's NetworkClient does on
        // every disconnect and failed connect), under the usual metadata backoff. Without it
        // a partition with nothing in flight keeps its dead leader until
        // `metadata.max.age.ms`, and its next records time out reconnecting to it.
        self.metadata_refresh.request_update();
        conn.failures = conn.failures.saturating_add(1);
        let backoff = exponential_backoff(
            self.config.reconnect_backoff,
            self.config.reconnect_backoff_max,
            conn.failures,
        );
        conn.state = ConnectionState::Idle {
            retry_at: now + backoff,
        };
        let requests: Vec<_> = conn.in_flight.drain(..).collect();
        for (header, body) in requests {
            self.fail_request_on_disconnect(now, header, body);
        }
    }

    pub(super) fn protocol_violation(&mut self, now: Micros, node: NodeId, generation: u64) {
        self.stats.protocol_errors += 1;
        self.actions
            .push_back(Action::Disconnect { node, generation });
        self.on_disconnected(now, node, generation);
    }

    fn send_api_versions(&mut self, now: Micros, node: NodeId, version: i16) {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("kacrab"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        if let Some(conn) = self.connections.get_mut(&node) {
            conn.state = ConnectionState::Negotiating { version };
        }
        self.send_request(
            now,
            node,
            ApiKey::ApiVersions,
            version,
            &request,
            RequestBody::ApiVersions,
        );
    }

    pub(super) fn send_request<
        R: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::HeaderVersion,
    >(
        &mut self,
        now: Micros,
        node: NodeId,
        api: ApiKey,
        version: i16,
        request: &R,
        body: RequestBody<D>,
    ) {
        let correlation_id = self.take_correlation_id(node);
        let frame = wire::encode_request(api, version, correlation_id, &self.client_id, request);
        self.send_frame(now, node, api, version, correlation_id, frame, body);
    }

    /// The next correlation id of the connection to `node`.
    pub(super) fn take_correlation_id(&mut self, node: NodeId) -> i32 {
        self.connections
            .get_mut(&node)
            .expect("sending on a known connection")
            .take_correlation_id()
    }

    /// Sends a request encoded with a correlation id from `take_correlation_id` and records it
    /// in flight with `body`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_frame(
        &mut self,
        now: Micros,
        node: NodeId,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        frame: Result<Frame, WireError>,
        body: RequestBody<D>,
    ) {
        match frame {
            Ok(frame) => {
                self.metrics.request_sent(node, frame.len() as u64);
                let conn = self
                    .connections
                    .get_mut(&node)
                    .expect("sending on a known connection");
                conn.last_activity = now;
                conn.in_flight.push_back((
                    InFlightHeader {
                        correlation_id,
                        api,
                        version,
                        sent_at: now,
                    },
                    body,
                ));
                self.actions.push_back(Action::Write {
                    node,
                    generation: conn.generation,
                    frame,
                });
            }
            Err(err) => {
                // Our own encoder refused the message: a bug, not a network fault. Fail the
                // producer loudly rather than spin.
                self.become_fatal(ProduceError::Fatal(ErrorCause::other(err.to_string())));
            }
        }
    }

    pub(super) fn handle_api_versions(
        &mut self,
        now: Micros,
        node: NodeId,
        header: InFlightHeader,
        body: Bytes,
    ) -> Result<(), WireError> {
        // A broker that does not support the version asked for answers UNSUPPORTED_VERSION in
        // the v0 body layout (Java's `ApiVersionsResponse.parse` falls back the same way).
        let response: ApiVersionsResponse = match wire::decode_response::<ApiVersionsResponse>(
            ApiKey::ApiVersions,
            header.version,
            body.clone(),
        ) {
            Ok(r) => r,
            Err(e) if header.version > 0 => {
                wire::decode_response::<ApiVersionsResponse>(ApiKey::ApiVersions, 0, body)
                    .map_err(|_| e)?
            }
            Err(e) => return Err(e),
        };
        if response.error_code == code::UNSUPPORTED_VERSION {
            // Use the broker's advertised ApiVersions range when its answer carries one; when
            // it cannot be read (brokers differ in how they lay out this error answer), v0,
            // which every broker supports.
            let version = api_versions_fallback(&response, header.version).unwrap_or(0);
            if version >= header.version {
                self.become_fatal(ProduceError::Fatal(ErrorCause::Other {
                    code: Some(code::UNSUPPORTED_VERSION),
                    reason: format!(
                        "broker {node} supports no ApiVersions version kacrab implements"
                    ),
                }));
                return Ok(());
            }
            self.send_api_versions(now, node, version);
            return Ok(());
        }
        if response.error_code != code::NONE {
            return Err(WireError::Malformed {
                api: ApiKey::ApiVersions,
                version: header.version,
                reason: format!("error {}", error_code::name(response.error_code)),
            });
        }
        let versions = NegotiatedVersions::from_response(&response);
        // The producer cannot work without these; Java treats UnsupportedVersion as fatal.
        let mut needed = vec![ApiKey::Metadata, ApiKey::Produce];
        if self.config.idempotent {
            needed.push(ApiKey::InitProducerId);
        }
        for api in needed {
            if let Err(error) = versions.version(api) {
                self.become_fatal(ProduceError::Fatal(ErrorCause::UnsupportedVersion {
                    broker: node,
                    error: error.to_string(),
                }));
                return Ok(());
            }
        }
        // The owner's transaction manager chooses the transaction protocol from what the
        // brokers say (Java's `ApiVersions.update`, `engine/transaction_version.rs`).
        if let Some(tm) = self.tm.as_mut() {
            tm.on_api_versions(node, &response, &versions);
        }
        let uses_sasl = self.uses_sasl();
        let conn = self.connections.get_mut(&node).expect("known");
        conn.versions = versions;
        if uses_sasl {
            self.start_sasl(now, node);
        } else {
            conn.state = ConnectionState::Ready;
        }
        Ok(())
    }

    /// A ready connection with the fewest requests in flight (Java's least-loaded node).
    pub(super) fn least_loaded_ready(&self) -> Option<NodeId> {
        self.connections
            .values()
            .filter(|c| c.is_ready())
            .min_by_key(|c| (c.in_flight.len(), c.node))
            .map(|c| c.node)
    }

    /// Makes sure some connection is coming up when none is ready.
    pub(super) fn ensure_some_connection(&mut self, now: Micros) {
        if self.connections.values().any(|c| {
            c.is_ready()
                || matches!(
                    c.state,
                    ConnectionState::Connecting { .. }
                        | ConnectionState::Negotiating { .. }
                        | ConnectionState::Authenticating
                        | ConnectionState::Expiring
                )
        }) {
            return;
        }
        let mut nodes: Vec<NodeId> = self.metadata.nodes.keys().copied().collect();
        nodes.sort_unstable();
        // Prefer the node whose backoff ends first.
        let candidate = nodes
            .into_iter()
            .min_by_key(|n| match self.connections.get(n) {
                Some(Connection {
                    state: ConnectionState::Idle { retry_at },
                    ..
                }) => *retry_at,
                _ => 0,
            });
        if let Some(node) = candidate {
            self.maybe_connect(now, node);
        }
    }

    pub(super) fn maybe_connect(&mut self, now: Micros, node: NodeId) {
        // After a refused authentication nothing is retried: one attempt per broker.
        if self.authentication_failed() {
            return;
        }
        let Some(address) = self.metadata.nodes.get(&node).cloned() else {
            return;
        };
        let generation = self.next_generation;
        let conn = self
            .connections
            .entry(node)
            .or_insert_with(|| Connection::new(node));
        match conn.state {
            ConnectionState::Idle { retry_at } if retry_at <= now => {}
            _ => return,
        }
        self.next_generation += 1;
        conn.generation = generation;
        conn.state = ConnectionState::Connecting { since: now };
        conn.versions = NegotiatedVersions::default();
        conn.sasl = None;
        conn.session_reauthenticate_at = None;
        self.actions.push_back(Action::Connect {
            node,
            generation,
            address,
        });
    }

    pub(super) fn check_connection_timeouts(&mut self, now: Micros) {
        let mut to_close = Vec::new();
        for conn in self.connections.values() {
            match conn.state {
                ConnectionState::Connecting { since }
                    if now >= since + self.config.connection_setup_timeout =>
                {
                    to_close.push((conn.node, conn.generation))
                }
                ConnectionState::Negotiating { .. }
                | ConnectionState::Authenticating
                | ConnectionState::Ready
                | ConnectionState::Expiring => {
                    if let Some((header, _)) = conn.in_flight.front() {
                        if now >= header.sent_at + self.config.request_timeout {
                            // Java's NetworkClient closes the connection on a request timeout;
                            // every request on it then has an unknown outcome.
                            to_close.push((conn.node, conn.generation));
                        }
                    }
                }
                _ => {}
            }
        }
        for (node, generation) in to_close {
            self.actions
                .push_back(Action::Disconnect { node, generation });
            self.on_disconnected(now, node, generation);
        }
        self.close_idle_connections(now);
        self.reauthenticate_expiring_sessions(now);
    }

    /// When a `Ready` connection with nothing in flight reaches `connections.max.idle.ms`.
    pub(super) fn idle_deadline(&self, conn: &Connection<RequestBody<D>>) -> Option<Micros> {
        let idle = self.config.connections_max_idle?;
        (conn.state == ConnectionState::Ready && conn.in_flight.is_empty())
            .then(|| conn.last_activity.saturating_add(idle))
    }

    /// Java's `Selector` closes a connection idle past `connections.max.idle.ms` (9 minutes
    /// for clients, under the broker's 10), so that the broker's own idle close never meets a
    /// request on the wire. Nothing is in flight, so nothing is lost or put in doubt; the next
    /// request connects again at once (no backoff: nothing failed), and no metadata refresh
    /// is asked for (the broker did not go away).
    fn close_idle_connections(&mut self, now: Micros) {
        let idle: Vec<(NodeId, u64)> = self
            .connections
            .values()
            .filter(|conn| self.idle_deadline(conn).is_some_and(|at| now >= at))
            .map(|conn| (conn.node, conn.generation))
            .collect();
        for (node, generation) in idle {
            self.actions
                .push_back(Action::Disconnect { node, generation });
            let conn = self.connections.get_mut(&node).expect("listed above");
            conn.state = ConnectionState::Idle { retry_at: now };
            self.stats.idle_disconnects += 1;
        }
    }

    pub(super) fn connect_to_needed_leaders(&mut self, now: Micros) {
        let mut needed: Vec<NodeId> = self
            .partitions
            .iter()
            .filter(|s| !s.deque.is_empty())
            .filter_map(|s| s.leader)
            .collect();
        needed.sort_unstable();
        needed.dedup();
        for node in needed {
            let state = self.connections.get(&node).map(|c| c.state.clone());
            if matches!(state, None | Some(ConnectionState::Idle { .. })) {
                self.maybe_connect(now, node);
            }
        }
    }
}

#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod tests;
