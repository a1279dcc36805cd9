//! SASL authentication of a new connection, after ApiVersions and before anything else goes
//! on it (Java's `SaslClientAuthenticator`): SaslHandshake v1 names the mechanism, then
//! SaslAuthenticate carries the mechanism's messages until it is done.
//!
//! A refusal (wrong credentials, a mechanism the broker does not enable, a server that fails
//! SCRAM's checks) is fatal, as Java's `SaslAuthenticationException` is: the producer stops,
//! every waiting record fails with [`ProduceError::Authentication`], and no connection is
//! opened again, so a broker sees one attempt, not a reconnect storm. An answer that does not
//! parse is a broken peer: the connection closes and is retried, as for any malformed answer.

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::ProduceError;
use crate::protocol::api::ApiKey;
use crate::protocol::error_code::{self, code};
use crate::protocol::sasl::{client_nonce, SaslClient, SaslClientError, SaslStep};
use crate::protocol::wire::{self, WireError};

use super::super::connection::{ConnectionState, InFlightHeader};
use super::super::{Action, Delivery, Micros, NodeId};
use super::{Engine, RequestBody};

impl<D: Delivery> Engine<D> {
    /// Whether connections authenticate before they are ready.
    pub(super) fn uses_sasl(&self) -> bool {
        self.config.sasl.is_some()
    }

    /// The engine is stopped by an authentication failure: it opens no more connections.
    pub(super) fn authentication_failed(&self) -> bool {
        matches!(self.fatal, Some(ProduceError::Authentication { .. }))
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
        let nonce = match client_nonce() {
            Ok(nonce) => nonce,
            Err(reason) => {
                self.fatal = Some(ProduceError::Fatal(reason));
                return Ok(());
            }
        };
        let (client, first) =
            SaslClient::start(sasl.mechanism, &sasl.username, &sasl.password, nonce);
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
        let address = self
            .metadata
            .nodes
            .get(&node)
            .cloned()
            .unwrap_or_else(|| "unknown address".to_string());
        let broker = if node < 0 {
            // Bootstrap entries have no broker id yet.
            format!("bootstrap server {address}")
        } else {
            format!("broker {node} ({address})")
        };
        let err = ProduceError::Authentication {
            broker,
            mechanism: mechanism.to_string(),
            reason,
        };
        tracing::error!(target: "kacrab::connection", node, error = %err, "authentication failed");
        self.txn_report_failure(&err, true);
        self.fatal = Some(err);
    }
}

fn sasl_malformed(version: i16, reason: &str) -> WireError {
    WireError::Malformed {
        api: ApiKey::SaslAuthenticate,
        version,
        reason: reason.to_string(),
    }
}
