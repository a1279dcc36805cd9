//! Cluster metadata for the engine: topics asked for by the application, the periodic and
//! on-demand refresh (`metadata.max.age.ms`, a retriable error that calls for fresh
//! metadata), and applying an answer to the partitions' leaders (Java's `Metadata` and
//! `Sender`'s metadata updates). When no broker can be reached for a refresh, `rebootstrap`
//! decides whether to start again from `bootstrap.servers`.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::protocol::api::ApiKey;
use crate::protocol::error_code::code;
use crate::protocol::wire::{self, WireError};

use super::super::connection::InFlightHeader;
use super::super::{Action, Delivery, Micros};
use super::{Engine, RequestBody};

impl<D: Delivery> Engine<D> {
    /// Asks for a topic's metadata (the caller's partitioner needs its partition count).
    pub fn request_topic(&mut self, topic: &str) {
        if let Some(at) = self.topic_requested_at.get_mut(topic) {
            *at = None;
        }
        if !self.metadata.interest.contains(topic) {
            let topic: Arc<str> = Arc::from(topic);
            self.metadata.interest.insert(topic.clone());
            self.topic_requested_at.insert(topic, None);
            self.metadata_refresh_needed = true;
            self.metadata_retry_at = 0;
        } else if let Some(count) = self.metadata.partition_count(topic) {
            self.actions.push_back(Action::TopicMetadata {
                topic: Arc::from(topic),
                partition_count: count,
                error_code: code::NONE,
            });
        } else {
            self.metadata_refresh_needed = true;
        }
    }

    pub(super) fn maybe_refresh_metadata(&mut self, now: Micros) {
        if let Some(last) = self.last_metadata_refresh {
            if now >= last + self.config.metadata_max_age {
                self.metadata_refresh_needed = true;
            }
        }
        if !self.metadata_refresh_needed || self.metadata_in_flight || now < self.metadata_retry_at
        {
            return;
        }
        // Java's `metadataAttemptStartMs`: the KIP-1102 trigger counts from the first attempt
        // that found a refresh due.
        self.metadata_attempt_start.get_or_insert(now);
        let Some(node) = self.least_loaded_ready() else {
            self.maybe_rebootstrap_unreachable(now);
            self.ensure_some_connection(now);
            return;
        };
        let version = match self.connections[&node].versions.version(ApiKey::Metadata) {
            Ok(v) => v,
            Err(_) => return,
        };
        self.expire_idle_topics(now);
        let topics = self
            .metadata
            .interest
            .iter()
            .map(|t| {
                MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
            })
            .collect();
        // As Java's producer (`ProducerMetadata`): the broker's `auto.create.topics.enable`
        // decides whether a topic it does not have is created; the producer does not veto it.
        let request = MetadataRequest::default()
            .with_topics(Some(topics))
            .with_allow_auto_topic_creation(true);
        self.metadata_in_flight = true;
        self.metadata_refresh_needed = false;
        self.send_request(
            now,
            node,
            ApiKey::Metadata,
            version,
            &request,
            RequestBody::Metadata,
        );
    }

    /// Java's `ProducerMetadata.retainTopic` (`metadata.max.idle.ms`): the topics fetched are
    /// those asked for by `request_topic`, or appended to, within the idle time, and those
    /// whose partitions still hold batches. Any other is dropped with its cached partitions; a
    /// record sent to it later brings it back (its partitions keep their last leaders until
    /// then, so the record goes out at once).
    fn expire_idle_topics(&mut self, now: Micros) {
        let idle = self.config.metadata_max_idle;
        let recent = |at: Micros| now < at.saturating_add(idle);
        let mut in_use = BTreeSet::new();
        for (topic, at) in &mut self.topic_requested_at {
            let at = *at.get_or_insert(now);
            if recent(at) {
                in_use.insert(topic.clone());
            }
        }
        for slot in &self.partitions {
            if !slot.deque.is_empty() || slot.on_wire > 0 || recent(slot.last_append) {
                in_use.insert(slot.tp.topic.clone());
            }
        }
        for topic in self.metadata.interest.difference(&in_use) {
            tracing::debug!(target: "kacrab::metadata", %topic, "topic unused for metadata.max.idle.ms; no longer fetched");
            self.metadata.topics.remove(topic);
            self.topic_requested_at.remove(topic);
        }
        self.metadata.interest = in_use;
    }

    pub(super) fn handle_metadata(
        &mut self,
        now: Micros,
        header: InFlightHeader,
        body: Bytes,
    ) -> Result<(), WireError> {
        self.metadata_in_flight = false;
        let response =
            match wire::decode_response::<MetadataResponse>(ApiKey::Metadata, header.version, body)
            {
                Ok(response) => response,
                Err(e) => {
                    // The refresh this request stood for is still owed.
                    self.metadata_refresh_needed = true;
                    return Err(e);
                }
            };
        self.metadata_retry_at = now + self.config.retry_backoff;
        // KIP-1102: a broker that knows the client's metadata is stale says so in the
        // top-level error (v13 and later). Under `rebootstrap` nothing else in the answer is
        // applied; under `none` it is taken as any answer is, as Java does.
        if header.version >= 13
            && response.error_code == code::REBOOTSTRAP_REQUIRED
            && self.config.rebootstrap_trigger.is_some()
        {
            self.metadata_refresh_needed = true;
            self.rebootstrap_required = true;
            return Ok(());
        }
        self.last_metadata_refresh = Some(now);
        if !response.brokers.is_empty() {
            self.metadata_attempt_start = None;
        }
        let changed = self.metadata.update(&response);
        for topic in &response.topics {
            let Some(name) = &topic.name else { continue };
            let name: Arc<str> = Arc::from(name.0.as_str());
            if topic.error_code != code::NONE {
                // Keep asking while someone waits for the topic.
                self.metadata_refresh_needed = true;
            }
            let partition_count = self.metadata.partition_count(&name).unwrap_or(0);
            if changed.contains(&name) || topic.error_code != code::NONE {
                self.actions.push_back(Action::TopicMetadata {
                    topic: name,
                    partition_count,
                    error_code: topic.error_code,
                });
            }
        }
        // Update the leaders of our partitions; a higher leader epoch lets a waiting retry skip
        // its backoff (KIP-951).
        for slot in &mut self.partitions {
            if !self.metadata.interest.contains(&slot.tp.topic) {
                // Idle (`metadata.max.idle.ms`): not asked about, so not missing.
                continue;
            }
            let Some(leader) = self.metadata.leader(&slot.tp.topic, slot.tp.partition) else {
                self.metadata_refresh_needed = true;
                continue;
            };
            if leader.leader_epoch > slot.leader_epoch {
                for batch in slot.deque.iter_mut().filter(|b| b.attempts > 0) {
                    batch.backoff_skip = true;
                }
            }
            if leader.leader.is_none() {
                self.metadata_refresh_needed = true;
            }
            slot.leader = leader.leader;
            slot.leader_epoch = leader.leader_epoch;
        }
        Ok(())
    }

    /// Invalidates this partition's leader so the retry waits for fresh metadata and is
    /// routed to the new leader; other partitions keep theirs.
    pub(super) fn invalidate_leader(&mut self, now: Micros, slot_index: usize) {
        let slot = &mut self.partitions[slot_index];
        slot.leader = None;
        self.metadata_refresh_needed = true;
        self.metadata_retry_at = self.metadata_retry_at.min(now);
    }
}

#[cfg(test)]
mod tests;
