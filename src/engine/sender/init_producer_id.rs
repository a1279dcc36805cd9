//! InitProducerId for the idempotent, non-transactional producer
//! (`TransactionManager.InitProducerIdHandler`, docs/java-rules.md §5.2): sent by the engine
//! that owns the identity when none is in force, retried with backoff. A success is emitted as
//! `Action::ProducerIdAssigned`; the engine adopts the identity only when the driver installs
//! it through `on_identity`. Whether a request is in flight, or when the next may go out, is
//! [`ProducerIdRequest`].

use bytes::Bytes;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};

use crate::error::{ErrorCause, ProduceError};
use crate::protocol::api::ApiKey;
use crate::protocol::error_code::code;
use crate::protocol::wire::{self, WireError};

use super::super::connection::InFlightHeader;
use super::super::identity::ProducerIdAndEpoch;
use super::super::txn_requests::is_init_producer_id_authorization_failure;
use super::super::{Action, Delivery, Micros, NodeId};
use super::{earliest_after, Engine, RequestBody};

/// The idempotent producer's InitProducerId request (Java's `InitProducerIdHandler`, queued by
/// `TransactionManager.initializeTransactions` for an idempotent producer): at most one in
/// flight, and a pause after each answer that installed nothing yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ProducerIdRequest {
    /// None in flight; one may go out whenever no identity is in force.
    Idle,
    /// The one request is in flight on the connection to `node`.
    InFlight { node: NodeId },
    /// The last request was refused, lost with its connection, or answered with an identity
    /// the driver has not installed yet: the next may go out at this time
    /// (`retry.backoff.ms` after it).
    RetryAt(Micros),
}

impl ProducerIdRequest {
    /// Whether a request may go out now (if one is needed).
    pub(super) fn may_send(self, now: Micros) -> bool {
        match self {
            ProducerIdRequest::Idle => true,
            ProducerIdRequest::InFlight { .. } => false,
            ProducerIdRequest::RetryAt(at) => now >= at,
        }
    }

    /// When a request needed now can go out, if that is after `now`.
    pub(super) fn next_wakeup(self, now: Micros) -> Option<Micros> {
        match self {
            ProducerIdRequest::RetryAt(at) => earliest_after(now, [Some(at)]),
            _ => None,
        }
    }

    /// `in_flight`: the nodes whose connection holds an idempotent InitProducerId request. At
    /// most one, and it is the one this request sent; a request not listed is waited for only
    /// once the engine has `stopped` (see `Engine::assert_invariants`).
    pub(super) fn assert_invariants(self, in_flight: &[NodeId], stopped: bool) {
        assert!(
            in_flight.len() <= 1,
            "more than one InitProducerId request in flight: {in_flight:?}"
        );
        match (self, in_flight.first()) {
            (ProducerIdRequest::InFlight { node }, Some(&listed)) => assert_eq!(
                node, listed,
                "the InitProducerId request in flight is not the one the engine sent"
            ),
            (ProducerIdRequest::InFlight { node }, None) => assert!(
                stopped,
                "waiting for an InitProducerId request to {node} that is not in flight"
            ),
            (state, Some(node)) => {
                panic!(
                    "an InitProducerId request to {node} is in flight, but the engine is {state:?}"
                )
            }
            (_, None) => {}
        }
    }
}

impl<D: Delivery> Engine<D> {
    pub(super) fn maybe_init_producer_id(&mut self, now: Micros) {
        if !self.config.owns_identity
            || !self.config.idempotent
            || self.config.transactional_id.is_some()
            || self.identity.is_valid()
            || !self.producer_id_request.may_send(now)
            || self.fatal.is_some()
        {
            return;
        }
        let Some(node) = self.least_loaded_ready() else {
            self.ensure_some_connection(now);
            return;
        };
        let version = match self.connections[&node]
            .versions
            .version(ApiKey::InitProducerId)
        {
            Ok(v) => v,
            Err(_) => return,
        };
        let request = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(self.config.transaction_timeout_ms)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        self.producer_id_request = ProducerIdRequest::InFlight { node };
        self.send_request(
            now,
            node,
            ApiKey::InitProducerId,
            version,
            &request,
            RequestBody::InitProducerId,
        );
    }

    pub(super) fn handle_init_producer_id(
        &mut self,
        now: Micros,
        header: InFlightHeader,
        body: Bytes,
    ) -> Result<(), WireError> {
        // Unless the answer says when to ask again, the next request may go out at once: one
        // that cannot be read, or a fatal error, leaves nothing to wait for.
        self.producer_id_request = ProducerIdRequest::Idle;
        let retry_at = ProducerIdRequest::RetryAt(now + self.config.retry_backoff);
        let response = wire::decode_response::<InitProducerIdResponse>(
            ApiKey::InitProducerId,
            header.version,
            body,
        )?;
        match response.error_code {
            code::NONE => {
                let identity =
                    ProducerIdAndEpoch::new(response.producer_id.0, response.producer_epoch);
                if identity.is_valid() {
                    self.actions.push_back(Action::ProducerIdAssigned(identity));
                }
                // Until the driver installs the identity and calls `on_identity`, the engine
                // still has none: without a pause, the next poll (which runs before the driver
                // sees this action) would ask again.
                self.producer_id_request = retry_at;
            }
            e if is_init_producer_id_authorization_failure(e) => {
                // docs/java-rules.md §5.2 / §9 item 18: fail the batches, stay uninitialized and
                // try again (the transactional producer follows the same rule, `sender/txn.rs`, but
                // waits for the application's next `init_transactions`).
                let err = ProduceError::Fatal(ErrorCause::Response {
                    request: "InitProducerId",
                    code: response.error_code,
                });
                // A queued batch is usually unsent and fails definitely. But after a bump at
                // epoch 32767 dropped the producer id, batches stamped under the old id may be
                // queued: one waiting to retry an attempt of unknown outcome may be in the log,
                // so it fails as of unknown outcome; and each stamped one leaves its partition's
                // in-flight list, or it would hold back the partition's next batches for good.
                let reason = err.to_string();
                for slot_index in 0..self.partitions.len() {
                    self.fail_queued(slot_index, &err, &reason);
                }
                self.producer_id_request = retry_at;
            }
            code::UNSUPPORTED_VERSION
            | code::INVALID_PRODUCER_ID_MAPPING
            | code::PRODUCER_FENCED => {
                self.become_fatal(ProduceError::Fatal(ErrorCause::Response {
                    request: "InitProducerId",
                    code: response.error_code,
                }));
            }
            _ => {
                // Retriable (COORDINATOR_*, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS, ...).
                self.producer_id_request = retry_at;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::ProducerIdRequest;

    #[test]
    fn a_request_goes_out_when_idle_or_once_its_retry_time_came() {
        assert!(ProducerIdRequest::Idle.may_send(0));
        assert!(!ProducerIdRequest::InFlight { node: 1 }.may_send(1_000));
        assert!(!ProducerIdRequest::RetryAt(100).may_send(99));
        assert!(ProducerIdRequest::RetryAt(100).may_send(100));
    }

    #[test]
    fn only_a_future_retry_time_is_a_wakeup() {
        assert_eq!(ProducerIdRequest::RetryAt(100).next_wakeup(99), Some(100));
        assert_eq!(ProducerIdRequest::RetryAt(100).next_wakeup(100), None);
        assert_eq!(ProducerIdRequest::Idle.next_wakeup(0), None);
        assert_eq!(ProducerIdRequest::InFlight { node: 1 }.next_wakeup(0), None);
    }

    #[test]
    fn invariants_tie_the_request_in_flight_to_its_connection() {
        ProducerIdRequest::InFlight { node: 1 }.assert_invariants(&[1], false);
        ProducerIdRequest::InFlight { node: 1 }.assert_invariants(&[], true);
        ProducerIdRequest::RetryAt(5).assert_invariants(&[], false);
    }

    #[test]
    #[should_panic(expected = "that is not in flight")]
    fn invariants_refuse_waiting_for_a_request_not_in_flight() {
        ProducerIdRequest::InFlight { node: 1 }.assert_invariants(&[], false);
    }

    #[test]
    #[should_panic(expected = "is in flight, but the engine is")]
    fn invariants_refuse_a_request_in_flight_the_engine_does_not_wait_for() {
        ProducerIdRequest::Idle.assert_invariants(&[2], false);
    }
}
