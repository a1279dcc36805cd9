//! InitProducerId for the idempotent, non-transactional producer
//! (`TransactionManager.InitProducerIdHandler`, docs/java-rules.md §5.2): sent by the engine
//! that owns the identity when none is in force, retried with backoff. A success is emitted as
//! `Action::ProducerIdAssigned`; the engine adopts the identity only when the driver installs
//! it through `on_identity`.

use bytes::Bytes;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};

use crate::error::ProduceError;
use crate::protocol::api::ApiKey;
use crate::protocol::error_code::{self, code};
use crate::protocol::wire::{self, WireError};

use super::super::connection::InFlightHeader;
use super::super::identity::ProducerIdAndEpoch;
use super::super::txn_requests::is_init_producer_id_authorization_failure;
use super::super::{Action, Delivery, Micros};
use super::{Engine, RequestBody};

impl<D: Delivery> Engine<D> {
    pub(super) fn maybe_init_producer_id(&mut self, now: Micros) {
        if !self.config.owns_identity
            || !self.config.idempotent
            || self.config.transactional_id.is_some()
            || self.identity.is_valid()
            || self.init_producer_id_in_flight
            || now < self.init_producer_id_retry_at
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
        self.init_producer_id_in_flight = true;
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
        self.init_producer_id_in_flight = false;
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
                self.init_producer_id_retry_at = now + self.config.retry_backoff;
            }
            e if is_init_producer_id_authorization_failure(e) => {
                // docs/java-rules.md §5.2 / §9 item 18: fail the batches, stay uninitialized and
                // try again (the transactional producer follows the same rule, `sender/txn.rs`, but
                // waits for the application's next `init_transactions`).
                let err = ProduceError::Fatal(format!(
                    "InitProducerId failed: {}",
                    error_code::name(response.error_code)
                ));
                // A queued batch is usually unsent and fails definitely. But after a bump at
                // epoch 32767 dropped the producer id, batches stamped under the old id may be
                // queued: one waiting to retry an attempt of unknown outcome may be in the log,
                // so it fails as of unknown outcome; and each stamped one leaves its partition's
                // in-flight list, or it would hold back the partition's next batches for good.
                let reason = err.to_string();
                for slot_index in 0..self.partitions.len() {
                    self.fail_queued(slot_index, &err, &reason);
                }
                self.init_producer_id_retry_at = now + self.config.retry_backoff;
            }
            code::UNSUPPORTED_VERSION
            | code::INVALID_PRODUCER_ID_MAPPING
            | code::PRODUCER_FENCED => {
                self.become_fatal(ProduceError::Fatal(format!(
                    "InitProducerId failed: {}",
                    error_code::name(response.error_code)
                )));
            }
            _ => {
                // Retriable (COORDINATOR_*, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS, ...).
                self.init_producer_id_retry_at = now + self.config.retry_backoff;
            }
        }
        Ok(())
    }
}
