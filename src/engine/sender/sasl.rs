//! SASL authentication of a new connection, after ApiVersions and before anything else goes
//! on it (Java's `SaslClientAuthenticator`): SaslHandshake v1 names the mechanism, then
//! SaslAuthenticate carries the mechanism's messages until it is done.
//!
//! A refusal (wrong credentials, a mechanism the broker does not enable, a server that fails
//! SCRAM's checks) is fatal, as Java's `SaslAuthenticationException` is: the producer stops,
//! every waiting record fails with [`ProduceError::Authentication`], and no connection is
//! opened again, so a broker sees one attempt, not a reconnect storm. An answer that does not
//! parse is a broken peer: the connection closes and is retried, as for any malformed answer.
//!
//! KIP-368 re-authentication: a broker that announces a session lifetime closes a connection
//! whose session ended at its next request other than SaslHandshake. Before that, kacrab
//! re-authenticates on the same connection: it stops writing new requests on it
//! (`Expiring`), waits for the answers in flight, then runs SaslHandshake and SaslAuthenticate
//! again (asking an OAUTHBEARER provider for a new token) and resumes. Java's
//! `KafkaChannel` instead starts re-authenticating at once and holds back any answer to an
//! earlier request that arrives during the exchange, to hand it over afterwards; draining
//! first costs a short pause in sending but keeps every answer in order with its request, so
//! no record can be lost or written twice by the exchange. A failed re-authentication is fatal,
//! as a failed authentication is.

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::config::SaslMechanism;
use crate::error::{ErrorCause, ProduceError};
use crate::protocol::api::ApiKey;
use crate::protocol::error_code::{self, code};
use crate::protocol::sasl::{client_nonce, SaslClient, SaslClientError, SaslStep};
use crate::protocol::sasl_oauthbearer::client_initial_response;
use crate::protocol::wire::{self, WireError};

use super::super::connection::{ConnectionState, InFlightHeader};
use super::super::{Action, Delivery, Micros, NodeId};
use super::{Engine, RequestBody};

/// Where in a SASL session's lifetime the connection re-authenticates (KIP-368).
const REAUTHENTICATE_AT_PERCENT: u64 = 90;

impl<D: Delivery> Engine<D> {
    /// Whether connections authenticate before they are ready.
    pub(super) fn uses_sasl(&self) -> bool {
        self.config.sasl.is_some()
    }

    /// The engine is stopped by an authentication failure (SASL, or a refused TLS handshake):
    /// it opens no more connections.
    pub(super) fn authentication_failed(&self) -> bool {
        matches!(
            self.fatal,
            Some(ProduceError::Authentication { .. } | ProduceError::Tls { .. })
        )
    }

    /// `node`'s TLS handshake was refused (the runtime's `ConnectionError::Tls`): fatal, as a
    /// refused SASL authentication is, so each broker sees one attempt and every waiting
    /// record fails with [`ProduceError::Tls`].
    pub fn on_tls_refused(&mut self, now: Micros, node: NodeId, generation: u64, reason: String) {
        let current = self
            .connections
            .get(&node)
            .is_some_and(|conn| conn.generation == generation);
        self.on_disconnected(now, node, generation);
        if !current || self.fatal.is_some() {
            return;
        }
        let err = ProduceError::Tls {
            broker: self.broker_name(node),
            reason,
        };
        tracing::error!(target: "kacrab::connection", node, error = %err, "TLS refused");
        self.become_fatal(err);
    }

    /// The broker as errors name it: by id and address, or as a bootstrap entry.
    fn broker_name(&self, node: NodeId) -> String {
        let address = self
            .metadata
            .nodes
            .get(&node)
            .cloned()
            .unwrap_or_else(|| "unknown address".to_string());
        if node < 0 {
            // Bootstrap entries have no broker id yet.
            format!("bootstrap server {address}")
        } else {
            format!("broker {node} ({address})")
        }
    }

    /// Starts authenticating `node`'s connection, whose ApiVersions answer has just arrived.
    pub(super) fn start_sasl(&mut self, now: Micros, node: NodeId) {
        let Some(sasl) = &self.config.sasl else {
            return;
        };
        let mechanism = sasl.mechanism;
        let conn = self.connections.get_mut(&node).expect("known");
        // Both versions were negotiated with the broker's ApiVersions answer: a broker without
        // them has no SASL listener here, which no retry changes.
        let handshake = conn.versions.version(ApiKey::SaslHandshake);
        let authenticate = conn.versions.version(ApiKey::SaslAuthenticate);
        let (handshake, _) = match (handshake, authenticate) {
            (Ok(h), Ok(a)) => (h, a),
            (Err(err), _) | (_, Err(err)) => {
                return self.fail_authentication(now, node, mechanism.as_str(), err.to_string());
            }
        };
        conn.state = ConnectionState::Authenticating;
        let request = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(mechanism.as_str()));
        self.send_request(
            now,
            node,
            ApiKey::SaslHandshake,
            handshake,
            &request,
            RequestBody::SaslHandshake,
        );
    }

    pub(super) fn handle_sasl_handshake(
        &mut self,
        now: Micros,
        node: NodeId,
        header: InFlightHeader,
        body: Bytes,
    ) -> Result<(), WireError> {
        let response: SaslHandshakeResponse =
            wire::decode_response(ApiKey::SaslHandshake, header.version, body)?;
        let Some(sasl) = self.config.sasl.clone() else {
            return Ok(());
        };
        let mechanism = sasl.mechanism.as_str();
        if response.error_code != code::NONE {
            let enabled: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
            let reason = if response.error_code == code::UNSUPPORTED_SASL_MECHANISM {
                format!(
                    "the broker does not enable {mechanism} (UNSUPPORTED_SASL_MECHANISM); it \
                     enables [{}]",
                    enabled.join(", ")
                )
            } else {
                format!(
                    "SaslHandshake answered {}",
                    error_code::name(response.error_code)
                )
            };
            self.fail_authentication(now, node, mechanism, reason);
            return Ok(());
        }
        let (client, first) = match sasl.mechanism {
            SaslMechanism::OAuthBearer => {
                // The provider is asked once per authentication, on this shard's thread.
                let Some(provider) = &sasl.token_provider else {
                    return Ok(());
                };
                let first = provider.token_isolated().and_then(|token| {
                    client_initial_response(
                        &token.value,
                        token.principal.as_deref(),
                        &token.extensions,
                    )
                    .map_err(|reason| format!("the token provider failed: {reason}"))
                });
                match first {
                    Ok(first) => SaslClient::oauthbearer(first),
                    Err(reason) => {
                        self.fail_authentication(now, node, mechanism, reason);
                        return Ok(());
                    }
                }
            }
            // PLAIN has no nonce.
            SaslMechanism::Plain => SaslClient::start(
                sasl.mechanism,
                &sasl.username,
                &sasl.password,
                String::new(),
            ),
            // SCRAM's nonce comes from the operating system's CSPRNG.
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => match client_nonce() {
                Ok(nonce) => {
                    SaslClient::start(sasl.mechanism, &sasl.username, &sasl.password, nonce)
                }
                Err(reason) => {
                    self.become_fatal(ProduceError::Fatal(ErrorCause::other(reason)));
                    return Ok(());
                }
            },
        };
        self.connections.get_mut(&node).expect("known").sasl = Some(client);
        self.send_sasl_authenticate(now, node, first);
        Ok(())
    }

    fn send_sasl_authenticate(&mut self, now: Micros, node: NodeId, auth_bytes: Vec<u8>) {
        let Ok(version) = self.connections[&node]
            .versions
            .version(ApiKey::SaslAuthenticate)
        else {
            return;
        };
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(auth_bytes));
        self.send_request(
            now,
            node,
            ApiKey::SaslAuthenticate,
            version,
            &request,
            RequestBody::SaslAuthenticate,
        );
    }

    pub(super) fn handle_sasl_authenticate(
        &mut self,
        now: Micros,
        node: NodeId,
        header: InFlightHeader,
        body: Bytes,
    ) -> Result<(), WireError> {
        let response: SaslAuthenticateResponse =
            wire::decode_response(ApiKey::SaslAuthenticate, header.version, body)?;
        let Some(sasl) = &self.config.sasl else {
            return Ok(());
        };
        let mechanism = sasl.mechanism.as_str();
        if response.error_code != code::NONE {
            let message = response
                .error_message
                .as_ref()
                .map(|m| format!(": {}", m.as_str()))
                .unwrap_or_default();
            let reason = format!(
                "SaslAuthenticate answered {}{message}",
                error_code::name(response.error_code)
            );
            self.fail_authentication(now, node, mechanism, reason);
            return Ok(());
        }
        let conn = self.connections.get_mut(&node).expect("known");
        let Some(client) = conn.sasl.as_mut() else {
            return Err(sasl_malformed(
                header.version,
                "an answer before the handshake",
            ));
        };
        match client.on_server_message(&response.auth_bytes) {
            Ok(SaslStep::Send(next)) => self.send_sasl_authenticate(now, node, next),
            Ok(SaslStep::Done) => {
                conn.sasl = None;
                conn.state = ConnectionState::Ready;
                // KIP-368: Java re-authenticates at a random point between 85% and 95% of the
                // lifetime (spreading renewals out); the engine is deterministic (the simulator
                // replays a seed exactly) and takes no randomness, so it uses the middle, 90%.
                // What is left leaves time to drain the answers in flight before the end.
                conn.session_reauthenticate_at = (response.session_lifetime_ms > 0).then(|| {
                    let lifetime = response
                        .session_lifetime_ms
                        .unsigned_abs()
                        .saturating_mul(1000);
                    now.saturating_add(lifetime / 100 * REAUTHENTICATE_AT_PERCENT)
                });
                tracing::debug!(
                    target: "kacrab::connection",
                    node,
                    mechanism,
                    "authenticated"
                );
            }
            Err(SaslClientError::Malformed(reason)) => {
                return Err(sasl_malformed(header.version, &reason));
            }
            Err(SaslClientError::Failed(reason)) => {
                self.fail_authentication(now, node, mechanism, reason);
            }
        }
        Ok(())
    }

    /// Ready connections whose SASL session ends soon stop taking requests; those with no
    /// answer outstanding re-authenticate on the same connection (see the module comment).
    pub(super) fn reauthenticate_expiring_sessions(&mut self, now: Micros) {
        let mut renew = Vec::new();
        for conn in self.connections.values_mut() {
            if conn.state == ConnectionState::Ready
                && conn.session_reauthenticate_at.is_some_and(|at| now >= at)
            {
                conn.state = ConnectionState::Expiring;
            }
            if conn.state == ConnectionState::Expiring && conn.in_flight.is_empty() {
                conn.session_reauthenticate_at = None;
                renew.push(conn.node);
            }
        }
        for node in renew {
            tracing::debug!(
                target: "kacrab::connection",
                node,
                "SASL session ends soon: re-authenticating"
            );
            self.start_sasl(now, node);
        }
    }

    /// Makes the producer fatal with the typed error naming the broker and what failed.
    /// The connection is closed, as Kafka's broker closes it after a failed authentication.
    fn fail_authentication(&mut self, now: Micros, node: NodeId, mechanism: &str, reason: String) {
        let generation = self.connections[&node].generation;
        self.actions
            .push_back(Action::Disconnect { node, generation });
        self.on_disconnected(now, node, generation);
        if self.fatal.is_some() {
            return;
        }
        let err = ProduceError::Authentication {
            broker: self.broker_name(node),
            mechanism: mechanism.to_string(),
            reason,
        };
        tracing::error!(target: "kacrab::connection", node, error = %err, "authentication failed");
        self.become_fatal(err);
    }
}

fn sasl_malformed(version: i16, reason: &str) -> WireError {
    WireError::Malformed {
        api: ApiKey::SaslAuthenticate,
        version,
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{
        ApiVersionsResponse, ResponseHeader, SaslAuthenticateResponse, SaslHandshakeResponse,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use crate::engine::{Action, Engine, EngineConfig, RecordMetadata, TopicPartition};
    use crate::error::ProduceError;
    use crate::protocol::api::ApiKey;
    use crate::protocol::error_code::code;
    use crate::ProducerConfig;

    struct Quiet;

    impl crate::engine::Delivery for Quiet {
        fn complete(self, _: Result<RecordMetadata, ProduceError>) {}
    }

    /// A request the engine wrote: its API code, version and correlation id, and its bytes.
    struct Written {
        api: i16,
        version: i16,
        correlation_id: i32,
        bytes: Bytes,
    }

    struct Rig {
        engine: Engine<Quiet>,
        now: u64,
        generation: u64,
        connects: usize,
        disconnects: usize,
    }

    impl Rig {
        fn new(mechanism: &str, module: &str) -> Rig {
            let config = ProducerConfig::builder()
                .bootstrap_servers("broker:9092")
                // Without an identity to ask for, Metadata is the one request after SASL.
                .enable_idempotence(false)
                .set("security.protocol", "SASL_PLAINTEXT")
                .set("sasl.mechanism", mechanism)
                .set(
                    "sasl.jaas.config",
                    format!("{module} required username=\"user\" password=\"pw\";"),
                )
                .build()
                .unwrap();
            let mut engine = Engine::new(EngineConfig::from_producer_config(&config, true));
            engine.append(
                0,
                &TopicPartition::new("t", 0),
                0,
                None,
                Some(b"v"),
                &[],
                Quiet,
            );
            Rig {
                engine,
                now: 1,
                generation: 0,
                connects: 0,
                disconnects: 0,
            }
        }

        /// Polls and runs the actions: connects succeed at once; returns what was written.
        fn poll(&mut self) -> Vec<Written> {
            self.engine.poll(self.now);
            let mut written = Vec::new();
            let actions: Vec<Action> = self.engine.take_actions().collect();
            for action in actions {
                match action {
                    Action::Connect {
                        node, generation, ..
                    } => {
                        self.connects += 1;
                        self.generation = generation;
                        self.engine.on_connected(self.now, node, generation);
                        written.extend(self.poll());
                    }
                    Action::Write { frame, .. } => {
                        let bytes = frame.to_bytes();
                        written.push(Written {
                            api: i16::from_be_bytes([bytes[4], bytes[5]]),
                            version: i16::from_be_bytes([bytes[6], bytes[7]]),
                            correlation_id: i32::from_be_bytes([
                                bytes[8], bytes[9], bytes[10], bytes[11],
                            ]),
                            bytes,
                        });
                    }
                    Action::Disconnect { .. } => self.disconnects += 1,
                    _ => {}
                }
            }
            written
        }

        fn answer(&mut self, request: &Written, body: &impl Encodable) {
            let api = kafka_protocol::messages::ApiKey::try_from(request.api).unwrap();
            let header_version = if request.api == ApiKey::ApiVersions.code() {
                0
            } else {
                api.response_header_version(request.version)
            };
            let mut out = BytesMut::new();
            ResponseHeader::default()
                .with_correlation_id(request.correlation_id)
                .encode(&mut out, header_version)
                .unwrap();
            body.encode(&mut out, request.version).unwrap();
            self.engine
                .on_frame(self.now, -1, self.generation, out.freeze());
        }

        /// Connects and answers ApiVersions; returns the next request written.
        fn negotiate(&mut self) -> Written {
            let written = self.poll();
            assert_eq!(written.len(), 1);
            assert_eq!(written[0].api, ApiKey::ApiVersions.code());
            let ranges = [
                (ApiKey::Produce, 3, 11),
                (ApiKey::Metadata, 1, 12),
                (ApiKey::ApiVersions, 0, 3),
                (ApiKey::InitProducerId, 0, 4),
                (ApiKey::SaslHandshake, 0, 1),
                (ApiKey::SaslAuthenticate, 0, 2),
            ];
            let response = ApiVersionsResponse::default().with_api_keys(
                ranges
                    .iter()
                    .map(|&(api, min, max)| {
                        ApiVersion::default()
                            .with_api_key(api.code())
                            .with_min_version(min)
                            .with_max_version(max)
                    })
                    .collect(),
            );
            self.answer(&written[0], &response);
            self.single()
        }

        /// Polls and expects exactly one request written.
        fn single(&mut self) -> Written {
            let mut written = self.poll();
            assert_eq!(
                written.len(),
                1,
                "apis written: {:?}",
                written.iter().map(|w| w.api).collect::<Vec<_>>()
            );
            written.remove(0)
        }
    }

    const PLAIN: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
    const SCRAM: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

    #[test]
    fn nothing_but_the_sasl_exchange_goes_on_a_connection_before_it_is_authenticated() {
        let mut rig = Rig::new("PLAIN", PLAIN);
        let handshake = rig.negotiate();
        assert_eq!(
            (handshake.api, handshake.version),
            (ApiKey::SaslHandshake.code(), 1)
        );
        // A record waits for metadata and an identity; neither is asked for yet.
        assert!(rig.poll().is_empty());
        rig.answer(
            &handshake,
            &SaslHandshakeResponse::default()
                .with_mechanisms(vec![StrBytes::from_static_str("PLAIN")]),
        );
        let authenticate = rig.single();
        assert_eq!(
            (authenticate.api, authenticate.version),
            (ApiKey::SaslAuthenticate.code(), 2)
        );
        assert!(authenticate.bytes.windows(8).any(|w| w == b"\0user\0pw"));
        assert!(rig.poll().is_empty());
        rig.answer(&authenticate, &SaslAuthenticateResponse::default());
        let after: Vec<i16> = rig.poll().iter().map(|w| w.api).collect();
        assert!(after.contains(&ApiKey::Metadata.code()), "{after:?}");
        assert!(rig.engine.fatal_error().is_none());
    }

    // KIP-368: a session of 1 s stops taking requests at 900 ms; once the answer in flight is
    // in, the same connection runs SaslHandshake and SaslAuthenticate again, then resumes.
    #[test]
    fn a_connection_whose_sasl_session_ends_soon_drains_and_re_authenticates_in_place() {
        let mut rig = Rig::new("PLAIN", PLAIN);
        let handshake = rig.negotiate();
        rig.answer(&handshake, &SaslHandshakeResponse::default());
        let authenticate = rig.single();
        rig.answer(
            &authenticate,
            &SaslAuthenticateResponse::default().with_session_lifetime_ms(1000),
        );
        let authenticated_at = rig.now;
        let metadata = rig.single();
        assert_eq!(metadata.api, ApiKey::Metadata.code());
        rig.now = authenticated_at + 899_000;
        assert!(rig.poll().is_empty());
        rig.now = authenticated_at + 900_000;
        assert!(
            rig.poll().is_empty(),
            "nothing new goes on an expiring session, not even the handshake"
        );
        rig.answer(
            &metadata,
            &kafka_protocol::messages::MetadataResponse::default(),
        );
        let again = rig.single();
        assert_eq!(
            (again.api, again.version),
            (ApiKey::SaslHandshake.code(), 1)
        );
        assert!(rig.poll().is_empty(), "nothing else during the exchange");
        rig.answer(&again, &SaslHandshakeResponse::default());
        let authenticate = rig.single();
        assert_eq!(authenticate.api, ApiKey::SaslAuthenticate.code());
        rig.answer(
            &authenticate,
            &SaslAuthenticateResponse::default().with_session_lifetime_ms(1000),
        );
        // The record still needs its topic's metadata: asked on the renewed session once the
        // metadata backoff has passed.
        rig.now += 200_000;
        let resumed = rig.single();
        assert_eq!(resumed.api, ApiKey::Metadata.code());
        assert_eq!(
            (rig.connects, rig.disconnects),
            (1, 0),
            "the same connection"
        );
        assert_eq!(rig.engine.stats().disconnects, 0);
        assert!(rig.engine.fatal_error().is_none());
    }

    // A refused re-authentication is fatal, as a refused first authentication is.
    #[test]
    fn a_refused_re_authentication_is_fatal_and_nothing_reconnects() {
        let mut rig = Rig::new("PLAIN", PLAIN);
        let handshake = rig.negotiate();
        rig.answer(&handshake, &SaslHandshakeResponse::default());
        let authenticate = rig.single();
        rig.answer(
            &authenticate,
            &SaslAuthenticateResponse::default().with_session_lifetime_ms(1000),
        );
        let metadata = rig.single();
        rig.answer(
            &metadata,
            &kafka_protocol::messages::MetadataResponse::default(),
        );
        rig.now += 900_000;
        let again = rig
            .poll()
            .into_iter()
            .find(|w| w.api == ApiKey::SaslHandshake.code())
            .expect("re-authentication begins");
        rig.answer(&again, &SaslHandshakeResponse::default());
        let authenticate = rig.single();
        rig.answer(
            &authenticate,
            &SaslAuthenticateResponse::default().with_error_code(code::SASL_AUTHENTICATION_FAILED),
        );
        assert!(matches!(
            rig.engine.fatal_error(),
            Some(ProduceError::Authentication { .. })
        ));
        rig.now += 60_000_000;
        assert!(rig.poll().is_empty());
        assert_eq!((rig.connects, rig.disconnects), (1, 1));
    }

    #[test]
    fn illegal_sasl_state_is_a_fatal_authentication_error_and_nothing_reconnects() {
        let mut rig = Rig::new("PLAIN", PLAIN);
        let handshake = rig.negotiate();
        rig.answer(&handshake, &SaslHandshakeResponse::default());
        let authenticate = rig.single();
        rig.answer(
            &authenticate,
            &SaslAuthenticateResponse::default().with_error_code(code::ILLEGAL_SASL_STATE),
        );
        match rig.engine.fatal_error() {
            Some(ProduceError::Authentication {
                broker,
                mechanism,
                reason,
            }) => {
                assert_eq!(broker, "bootstrap server broker:9092");
                assert_eq!(mechanism, "PLAIN");
                assert!(reason.contains("ILLEGAL_SASL_STATE"), "{reason}");
            }
            other => panic!("expected an authentication error, got {other:?}"),
        }
        rig.now += 60_000_000;
        assert!(rig.poll().is_empty());
        assert_eq!((rig.connects, rig.disconnects), (1, 1));
    }

    #[test]
    fn a_malformed_scram_answer_closes_the_connection_and_reconnects() {
        let mut rig = Rig::new("SCRAM-SHA-256", SCRAM);
        let handshake = rig.negotiate();
        rig.answer(&handshake, &SaslHandshakeResponse::default());
        let first = rig.single();
        assert!(first.bytes.windows(9).any(|w| w == b"n,,n=user"));
        rig.answer(
            &first,
            &SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from_static(b"junk")),
        );
        assert!(rig.engine.fatal_error().is_none());
        assert_eq!(rig.engine.stats().protocol_errors, 1);
        rig.now += 10_000_000;
        let again = rig.poll();
        assert_eq!(rig.connects, 2, "the producer reconnects");
        assert_eq!(again[0].api, ApiKey::ApiVersions.code());
    }
}
