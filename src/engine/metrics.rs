//! The engine's counters behind Kafka's `producer-metrics`, `producer-topic-metrics` and
//! `producer-node-metrics` groups. Plain integers the engine owns and writes (no atomic, no
//! clock: times come from the `now` the driver hands the engine); the driver copies them out
//! and publishes them ([`crate::metrics`]).
//!
//! Counted where Java's `Sender` counts (`SenderMetricsRegistry`, `Sender.SenderMetrics`):
//! sends per batch in each produce request (so a retried batch counts again), retries when a
//! batch is re-enqueued, errors when a record's delivery fails, latency and throttle time per
//! produce answer. Nothing here is touched per record on the success path.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{Micros, NodeId};

/// A running sum, count and maximum (Java's `Avg` and `Max` stats, over the producer's life
/// rather than a sample window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    pub count: u64,
    pub sum: u64,
    pub max: u64,
}

impl Stat {
    pub fn record(&mut self, value: u64) {
        self.count += 1;
        self.sum = self.sum.saturating_add(value);
        self.max = self.max.max(value);
    }

    /// Adds another shard's `Stat` into this one.
    pub fn merge(&mut self, other: &Stat) {
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }

    /// The mean, or NaN with no sample (as Java reports an empty `Avg`).
    pub fn avg(&self) -> f64 {
        if self.count == 0 {
            f64::NAN
        } else {
            self.sum as f64 / self.count as f64
        }
    }
}

/// One topic's counters (`producer-topic-metrics`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicCounters {
    /// Records in produce requests, every attempt (`record-send-total`).
    pub records_sent: u64,
    /// Batch bytes in produce requests, every attempt (`byte-total`).
    pub bytes_sent: u64,
    /// Records whose delivery failed (`record-error-total`).
    pub records_failed: u64,
    /// Records of batches re-enqueued for another attempt (`record-retry-total`).
    pub records_retried: u64,
}

impl TopicCounters {
    pub fn merge(&mut self, other: &TopicCounters) {
        self.records_sent += other.records_sent;
        self.bytes_sent += other.bytes_sent;
        self.records_failed += other.records_failed;
        self.records_retried += other.records_retried;
    }
}

/// One broker's counters (`producer-node-metrics`): every request on the connection, and the
/// latency of produce requests (Java's Sender records latency for produce answers only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeCounters {
    pub requests: u64,
    pub request_bytes: u64,
    pub request_size_max: u64,
    pub responses: u64,
    pub response_bytes: u64,
    /// Produce request to its answer, in microseconds.
    pub latency_us: Stat,
}

impl NodeCounters {
    pub fn merge(&mut self, other: &NodeCounters) {
        self.requests += other.requests;
        self.request_bytes += other.request_bytes;
        self.request_size_max = self.request_size_max.max(other.request_size_max);
        self.responses += other.responses;
        self.response_bytes += other.response_bytes;
        self.latency_us.merge(&other.latency_us);
    }
}

/// One engine's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineMetrics {
    /// Produce requests written.
    pub produce_requests: u64,
    /// Batches in produce requests, every attempt.
    pub batches_sent: u64,
    /// Records in produce requests, every attempt (`record-send-total`).
    pub records_sent: u64,
    pub records_failed: u64,
    pub records_retried: u64,
    /// Bytes of each batch sent (`batch-size-avg/max`).
    pub batch_size: Stat,
    /// Records in each produce request (`records-per-request-avg`).
    pub records_per_request: Stat,
    /// From a batch's creation to each of its drains, microseconds (`record-queue-time`).
    pub queue_time_us: Stat,
    /// Produce request to answer, microseconds (`request-latency-avg/max`).
    pub request_latency_us: Stat,
    /// `throttle_time_ms` of each produce answer (`produce-throttle-time-avg/max`).
    pub throttle_time_ms: Stat,
    /// By topic, in the order topics were first seen; `slot_topic` maps a partition slot to
    /// its index here, so a batch's topic is found without hashing its name.
    pub topics: Vec<(Arc<str>, TopicCounters)>,
    pub nodes: BTreeMap<NodeId, NodeCounters>,
    slot_topic: Vec<usize>,
    topic_index: HashMap<Arc<str>, usize>,
}

impl EngineMetrics {
    /// The engine made partition slot `slot` (slots are numbered from 0 and never removed).
    pub(crate) fn add_slot(&mut self, slot: usize, topic: &Arc<str>) {
        debug_assert_eq!(slot, self.slot_topic.len());
        let index = self.topic_index_of(topic);
        self.slot_topic.push(index);
    }

    fn topic_index_of(&mut self, topic: &Arc<str>) -> usize {
        if let Some(&i) = self.topic_index.get(topic) {
            return i;
        }
        self.topics.push((topic.clone(), TopicCounters::default()));
        self.topic_index
            .insert(topic.clone(), self.topics.len() - 1);
        self.topics.len() - 1
    }

    fn slot(&mut self, slot: usize) -> &mut TopicCounters {
        &mut self.topics[self.slot_topic[slot]].1
    }

    /// A batch of partition slot `slot` goes out in a produce request.
    pub(crate) fn batch_sent(&mut self, slot: usize, records: u64, bytes: u64, queue_time: Micros) {
        self.batches_sent += 1;
        self.records_sent += records;
        self.batch_size.record(bytes);
        self.queue_time_us.record(queue_time);
        let topic = self.slot(slot);
        topic.records_sent += records;
        topic.bytes_sent += bytes;
    }

    /// A produce request of `records` records went out.
    pub(crate) fn produce_request_sent(&mut self, records: u64) {
        self.produce_requests += 1;
        self.records_per_request.record(records);
    }

    pub(crate) fn records_retried(&mut self, slot: usize, records: u64) {
        self.records_retried += records;
        self.slot(slot).records_retried += records;
    }

    pub(crate) fn records_failed(&mut self, slot: usize, records: u64) {
        if records > 0 {
            self.records_failed += records;
            self.slot(slot).records_failed += records;
        }
    }

    /// A record failed before it had a partition slot (refused at append).
    pub(crate) fn record_failed_in(&mut self, topic: &Arc<str>) {
        self.records_failed_in(topic, 1);
    }

    pub(crate) fn records_failed_in(&mut self, topic: &Arc<str>, records: u64) {
        self.records_failed += records;
        let index = self.topic_index_of(topic);
        self.topics[index].1.records_failed += records;
    }

    pub(crate) fn request_sent(&mut self, node: NodeId, bytes: u64) {
        let n = self.nodes.entry(node).or_default();
        n.requests += 1;
        n.request_bytes += bytes;
        n.request_size_max = n.request_size_max.max(bytes);
    }

    pub(crate) fn response_received(&mut self, node: NodeId, bytes: u64) {
        let n = self.nodes.entry(node).or_default();
        n.responses += 1;
        n.response_bytes += bytes;
    }

    /// A produce answer came `latency` after its request, asking for `throttle_ms` of quiet.
    pub(crate) fn produce_answered(&mut self, node: NodeId, latency: Micros, throttle_ms: i32) {
        self.request_latency_us.record(latency);
        self.throttle_time_ms.record(throttle_ms.max(0) as u64);
        self.nodes
            .entry(node)
            .or_default()
            .latency_us
            .record(latency);
    }

    /// Adds another shard's counters into this one (topics and nodes matched by name and id).
    pub fn merge(&mut self, other: &EngineMetrics) {
        self.produce_requests += other.produce_requests;
        self.batches_sent += other.batches_sent;
        self.records_sent += other.records_sent;
        self.records_failed += other.records_failed;
        self.records_retried += other.records_retried;
        self.batch_size.merge(&other.batch_size);
        self.records_per_request.merge(&other.records_per_request);
        self.queue_time_us.merge(&other.queue_time_us);
        self.request_latency_us.merge(&other.request_latency_us);
        self.throttle_time_ms.merge(&other.throttle_time_ms);
        for (topic, counters) in &other.topics {
            let index = self.topic_index_of(topic);
            self.topics[index].1.merge(counters);
        }
        for (node, counters) in &other.nodes {
            self.nodes.entry(*node).or_default().merge(counters);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_two_shards_sums_counts_keeps_the_larger_max_and_joins_topics_by_name() {
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        let mut one = EngineMetrics::default();
        one.add_slot(0, &a);
        one.batch_sent(0, 3, 100, 7);
        one.produce_request_sent(3);
        one.request_sent(1, 150);
        let mut two = EngineMetrics::default();
        two.add_slot(0, &b);
        two.add_slot(1, &a);
        two.batch_sent(1, 2, 60, 9);
        two.records_retried(1, 2);
        two.records_failed(0, 4);
        two.produce_request_sent(2);
        two.request_sent(1, 90);
        let mut total = EngineMetrics::default();
        total.merge(&one);
        total.merge(&two);
        assert_eq!(total.records_sent, 5);
        assert_eq!(total.records_retried, 2);
        assert_eq!(total.records_failed, 4);
        assert_eq!(
            total.batch_size,
            Stat {
                count: 2,
                sum: 160,
                max: 100
            }
        );
        assert_eq!(total.queue_time_us.max, 9);
        assert_eq!(total.records_per_request.avg(), 2.5);
        let topic = |name: &str| &total.topics.iter().find(|(t, _)| &**t == name).unwrap().1;
        assert_eq!(topic("a").records_sent, 5);
        assert_eq!(topic("a").bytes_sent, 160);
        assert_eq!(topic("a").records_retried, 2);
        assert_eq!(topic("b").records_failed, 4);
        let node = &total.nodes[&1];
        assert_eq!(
            (node.requests, node.request_bytes, node.request_size_max),
            (2, 240, 150)
        );
    }
}
