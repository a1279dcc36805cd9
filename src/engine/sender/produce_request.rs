//! The Produce request (`Sender.sendProduceRequest`, `Sender.handleProduceResponse`): the drained
//! batches of one node in one request, and its answer routed per partition to
//! `complete_batch`; a partition the answer leaves out is of unknown outcome.

use bytes::Bytes;
use kafka_protocol::messages::ProduceResponse;

use crate::protocol::api::ApiKey;
use crate::protocol::error_code::code;
use crate::protocol::produce_request::{
    encode_produce_request, ProducePartition, ProduceRequestHead,
};
use crate::protocol::wire::{self, Frame, WireError};

use super::super::batch::ProducerBatch;
use super::super::connection::InFlightHeader;
use super::super::{Action, Delivery, Micros, NodeId};
use super::{Engine, RequestBody};

impl<D: Delivery> Engine<D> {
    pub(super) fn send_produce(
        &mut self,
        now: Micros,
        node: NodeId,
        version: i16,
        batches: Vec<(usize, ProducerBatch<D>)>,
    ) {
        self.stats.produce_requests += 1;
        self.stats.batches_sent += batches.len() as u64;
        let mut records = 0u64;
        for (slot_index, batch) in &batches {
            records += batch.record_count as u64;
            self.metrics.batch_sent(
                *slot_index,
                batch.record_count as u64,
                batch.size_in_bytes() as u64,
                now.saturating_sub(batch.created),
            );
        }
        self.metrics.produce_request_sent(records);
        let correlation_id = self.take_correlation_id(node);
        let frame = self.encode_produce(version, correlation_id, &batches);
        if self.config.acks == 0 {
            // No response will come: the request being written is all the confirmation acks=0
            // gives (Java completes with offset -1).
            if let Ok(frame) = frame {
                self.metrics.request_sent(node, frame.len() as u64);
                let conn = self.connections.get(&node).expect("known");
                self.actions.push_back(Action::Write {
                    node,
                    generation: conn.generation,
                    frame,
                });
            }
            for (slot_index, batch) in batches {
                self.partitions[slot_index].on_wire -= 1;
                self.complete_success(slot_index, batch, -1, -1);
            }
            return;
        }
        self.send_frame(
            now,
            node,
            ApiKey::Produce,
            version,
            correlation_id,
            frame,
            RequestBody::Produce(batches),
        );
    }

    /// The Produce request of these (stamped or finished) batches: each batch's bytes go into
    /// the frame as their own segment, not copied.
    fn encode_produce(
        &self,
        version: i16,
        correlation_id: i32,
        batches: &[(usize, ProducerBatch<D>)],
    ) -> Result<Frame, WireError> {
        let partitions: Vec<ProducePartition<'_>> = batches
            .iter()
            .map(|(slot_index, batch)| {
                let tp = &self.partitions[*slot_index].tp;
                ProducePartition {
                    topic: &tp.topic,
                    partition: tp.partition,
                    records: batch.bytes(),
                }
            })
            .collect();
        encode_produce_request(
            &ProduceRequestHead {
                version,
                correlation_id,
                client_id: &self.client_id,
                transactional_id: self.config.transactional_id.as_deref(),
                acks: self.config.acks,
                timeout_ms: produce_timeout_ms(self.config.request_timeout),
            },
            &partitions,
        )
    }

    pub(super) fn handle_produce(
        &mut self,
        now: Micros,
        node: NodeId,
        header: InFlightHeader,
        body: Bytes,
        batches: Vec<(usize, ProducerBatch<D>)>,
    ) -> Result<(), WireError> {
        let response: ProduceResponse =
            match wire::decode_response::<ProduceResponse>(ApiKey::Produce, header.version, body) {
                Ok(r) => r,
                Err(e) => {
                    // The batches' fate is unknown; treat them as a lost connection would.
                    self.fail_request_on_disconnect(now, header, RequestBody::Produce(batches));
                    return Err(e);
                }
            };
        self.metrics.produce_answered(
            node,
            now.saturating_sub(header.sent_at),
            response.throttle_time_ms,
        );
        for (slot_index, batch) in batches {
            self.partitions[slot_index].on_wire -= 1;
            let tp = self.partitions[slot_index].tp.clone();
            let partition_response = response
                .responses
                .iter()
                .filter(|t| t.name.0.as_str() == &*tp.topic)
                .flat_map(|t| t.partition_responses.iter())
                .find(|p| p.index == tp.partition);
            match partition_response {
                Some(p) => self.complete_batch(
                    now,
                    slot_index,
                    batch,
                    p.error_code,
                    p.base_offset,
                    p.log_append_time_ms,
                    p.log_start_offset,
                    p.error_message.as_ref().map(|m| m.to_string()),
                ),
                // A response that leaves out a partition it was sent: its fate is unknown.
                None => {
                    self.retry_or_fail(now, slot_index, batch, code::NETWORK_EXCEPTION, true, None)
                }
            }
        }
        Ok(())
    }
}

/// A produce request's `timeout_ms` (an i32 of milliseconds) for a request timeout in
/// microseconds: converted first, then clamped, so a long timeout never wraps negative.
fn produce_timeout_ms(request_timeout: Micros) -> i32 {
    (request_timeout / 1_000).min(i32::MAX as u64) as i32
}
