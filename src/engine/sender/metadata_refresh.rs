//! Cluster metadata for the engine: topics asked for by the application, the periodic and
//! on-demand refresh (`metadata.max.age.ms`, a retriable error that calls for fresh
//! metadata), and applying an answer to the partitions' leaders (Java's `Metadata` and
//! `Sender`'s metadata updates). When no broker can be reached for a refresh, `rebootstrap`
//! decides whether to start again from `bootstrap.servers`. The refresh's own state, which
//! request is in flight and when the next may go out, is [`MetadataRefresh`].

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
use super::super::{Action, Delivery, Micros, NodeId};
use super::{earliest_after, Engine, RequestBody};

/// The metadata refresh: Java's `Metadata` update state (`requestUpdate`, `updateRequested`,
/// `lastRefreshMs`) and `NetworkClient.DefaultMetadataUpdater`'s (its one request in flight,
/// `metadataAttemptStartMs`). At most one Metadata request is in flight; a refresh wanted
/// meanwhile goes out after its answer.
#[derive(Debug)]
pub(super) struct MetadataRefresh {
    state: RefreshState,
    /// Java's `Metadata.updateRequested`: a refresh is wanted. Cleared when a request goes
    /// out; set again while it is in flight, it asks for one more after it.
    needed: bool,
    /// Java's `lastRefreshMs`: when an answer was last applied; `metadata.max.age.ms` counts
    /// from it. `None` before the first.
    last_refresh: Option<Micros>,
    /// Java's `metadataAttemptStartMs`: since when metadata has been wanted and no answer with
    /// brokers came; `None` while the last attempt succeeded (KIP-1102).
    attempt_start: Option<Micros>,
    /// A Metadata answer said REBOOTSTRAP_REQUIRED: rebootstrap at the next poll.
    rebootstrap_required: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RefreshState {
    /// No request in flight; one may go out as soon as a refresh is needed.
    Idle,
    /// The one Metadata request is in flight on the connection to `node`.
    InFlight { node: NodeId },
    /// An answer came: the next request waits for `retry.backoff.ms` after it, until `until`,
    /// unless a refresh is urged (`request_update_now`).
    Backoff { until: Micros },
}

impl MetadataRefresh {
    /// A new engine knows nothing yet: a refresh is needed at once.
    pub(super) fn new() -> Self {
        MetadataRefresh {
            state: RefreshState::Idle,
            needed: true,
            last_refresh: None,
            attempt_start: None,
            rebootstrap_required: false,
        }
    }

    /// Java's `Metadata.requestUpdate`: a refresh is wanted, under the usual backoff.
    pub(super) fn request_update(&mut self) {
        self.needed = true;
    }

    /// A refresh is wanted without waiting out the backoff (a new topic, a leader that moved,
    /// a rebootstrap; Java's `requestUpdateForNewTopics` skips it the same way). A request in
    /// flight is not doubled: the refresh goes out after its answer.
    pub(super) fn request_update_now(&mut self) {
        self.needed = true;
        if let RefreshState::Backoff { .. } = self.state {
            self.state = RefreshState::Idle;
        }
    }

    #[cfg(test)]
    pub(super) fn needed(&self) -> bool {
        self.needed
    }

    /// Whether a request may go out now: one is needed, none is in flight, and the backoff
    /// after the last answer is over.
    pub(super) fn may_send(&self, now: Micros) -> bool {
        self.needed
            && match self.state {
                RefreshState::Idle => true,
                RefreshState::InFlight { .. } => false,
                RefreshState::Backoff { until } => now >= until,
            }
    }

    /// `metadata.max.age.ms` ran out since the last answer: a refresh is due.
    pub(super) fn note_age(&mut self, now: Micros, max_age: Micros) {
        if self.last_refresh.is_some_and(|last| now >= last + max_age) {
            self.needed = true;
        }
    }

    /// A refresh was found due at `now`: the KIP-1102 trigger counts from the first such
    /// attempt that no answer with brokers followed.
    pub(super) fn attempt_started(&mut self, now: Micros) {
        self.attempt_start.get_or_insert(now);
    }

    /// The request went out on `node`.
    pub(super) fn sent(&mut self, node: NodeId) {
        debug_assert!(!matches!(self.state, RefreshState::InFlight { .. }));
        self.state = RefreshState::InFlight { node };
        self.needed = false;
    }

    /// The request brought no usable answer (its connection closed, or the answer could not
    /// be read): the refresh it stood for is still owed, with no backoff.
    pub(super) fn lost(&mut self) {
        self.state = RefreshState::Idle;
        self.needed = true;
    }

    /// An answer was read: the next request waits until `until`.
    pub(super) fn answered(&mut self, until: Micros) {
        self.state = RefreshState::Backoff { until };
    }

    /// The answer was applied at `now`; `with_brokers`: it named brokers, which ends the
    /// KIP-1102 attempt.
    pub(super) fn applied(&mut self, now: Micros, with_brokers: bool) {
        self.last_refresh = Some(now);
        if with_brokers {
            self.attempt_start = None;
        }
    }

    /// The answer said REBOOTSTRAP_REQUIRED: the refresh is owed again, after the rebootstrap
    /// the next poll makes.
    pub(super) fn require_rebootstrap(&mut self) {
        self.needed = true;
        self.rebootstrap_required = true;
    }

    /// Whether a REBOOTSTRAP_REQUIRED answer is waiting to be acted on; taking it clears it.
    pub(super) fn take_rebootstrap_required(&mut self) -> bool {
        std::mem::take(&mut self.rebootstrap_required)
    }

    pub(super) fn rebootstrap_required(&self) -> bool {
        self.rebootstrap_required
    }

    /// Java's `DefaultMetadataUpdater.rebootstrap`: metadata is wanted at once, and the
    /// trigger's clock starts again.
    pub(super) fn rebootstrapped(&mut self, now: Micros) {
        self.attempt_start = Some(now);
        self.request_update_now();
    }

    /// Whether metadata has been wanted for longer than `trigger` with no answer carrying
    /// brokers (Java compares `now - start > trigger`: strictly after).
    pub(super) fn attempt_timed_out(&self, now: Micros, trigger: Micros) -> bool {
        self.attempt_start
            .is_some_and(|start| now.saturating_sub(start) > trigger)
    }

    /// When the KIP-1102 trigger fires if no answer comes first (`None` when it cannot).
    pub(super) fn rebootstrap_trigger_at(&self, trigger: Option<Micros>) -> Option<Micros> {
        Some(self.attempt_start? + trigger? + 1)
    }

    /// The earliest time after `now` at which the refresh has something to do by time alone:
    /// the end of the backoff of a refresh that is needed, `metadata.max.age.ms` after the
    /// last answer, the KIP-1102 trigger.
    pub(super) fn next_wakeup(
        &self,
        now: Micros,
        max_age: Micros,
        rebootstrap_trigger: Option<Micros>,
    ) -> Option<Micros> {
        let backoff_end = match self.state {
            RefreshState::Backoff { until } if self.needed => Some(until),
            _ => None,
        };
        earliest_after(
            now,
            [
                backoff_end,
                self.last_refresh.map(|last| last + max_age),
                self.rebootstrap_trigger_at(rebootstrap_trigger),
            ],
        )
    }

    /// `in_flight`: the nodes whose connection holds a Metadata request. At most one request
    /// is in flight, and it is the one this refresh sent. The refresh may wait for a request
    /// that is not listed only once the engine has `stopped` (see `Engine::assert_invariants`).
    pub(super) fn assert_invariants(&self, in_flight: &[NodeId], stopped: bool) {
        assert!(
            in_flight.len() <= 1,
            "more than one Metadata request in flight: {in_flight:?}"
        );
        match (self.state, in_flight.first()) {
            (RefreshState::InFlight { node }, Some(&listed)) => assert_eq!(
                node, listed,
                "the Metadata request in flight is not the one the refresh sent"
            ),
            (RefreshState::InFlight { node }, None) => assert!(
                stopped,
                "the refresh waits for a Metadata request to {node} that is not in flight"
            ),
            (state, Some(node)) => {
                panic!("a Metadata request to {node} is in flight, but the refresh is {state:?}")
            }
            (_, None) => {}
        }
    }
}

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
            self.metadata_refresh.request_update_now();
        } else if let Some(count) = self.metadata.partition_count(topic) {
            self.actions.push_back(Action::TopicMetadata {
                topic: Arc::from(topic),
                partition_count: count,
                error_code: code::NONE,
            });
        } else {
            self.metadata_refresh.request_update();
        }
    }

    pub(super) fn maybe_refresh_metadata(&mut self, now: Micros) {
        self.metadata_refresh
            .note_age(now, self.config.metadata_max_age);
        if !self.metadata_refresh.may_send(now) {
            return;
        }
        self.metadata_refresh.attempt_started(now);
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
        self.metadata_refresh.sent(node);
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
        let response =
            match wire::decode_response::<MetadataResponse>(ApiKey::Metadata, header.version, body)
            {
                Ok(response) => response,
                Err(e) => {
                    // The refresh this request stood for is still owed.
                    self.metadata_refresh.lost();
                    return Err(e);
                }
            };
        self.metadata_refresh
            .answered(now + self.config.retry_backoff);
        // KIP-1102: a broker that knows the client's metadata is stale says so in the
        // top-level error (v13 and later). Under `rebootstrap` nothing else in the answer is
        // applied; under `none` it is taken as any answer is, as Java does.
        if header.version >= 13
            && response.error_code == code::REBOOTSTRAP_REQUIRED
            && self.config.rebootstrap_trigger.is_some()
        {
            self.metadata_refresh.require_rebootstrap();
            return Ok(());
        }
        self.metadata_refresh
            .applied(now, !response.brokers.is_empty());
        let changed = self.metadata.update(&response);
        for topic in &response.topics {
            let Some(name) = &topic.name else { continue };
            let name: Arc<str> = Arc::from(name.0.as_str());
            if topic.error_code != code::NONE {
                // Keep asking while someone waits for the topic.
                self.metadata_refresh.request_update();
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
                self.metadata_refresh.request_update();
                continue;
            };
            if leader.leader_epoch > slot.leader_epoch {
                for batch in slot.deque.iter_mut().filter(|b| b.attempts > 0) {
                    batch.backoff_skip = true;
                }
            }
            if leader.leader.is_none() {
                self.metadata_refresh.request_update();
            }
            slot.leader = leader.leader;
            slot.leader_epoch = leader.leader_epoch;
        }
        Ok(())
    }

    /// Invalidates this partition's leader so the retry waits for fresh metadata and is
    /// routed to the new leader; other partitions keep theirs.
    pub(super) fn invalidate_leader(&mut self, slot_index: usize) {
        self.partitions[slot_index].leader = None;
        self.metadata_refresh.request_update_now();
    }
}

#[cfg(test)]
mod tests;
