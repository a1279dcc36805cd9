//! Producer metrics under Kafka's names: a typed snapshot ([`ProducerMetrics`], from
//! [`Producer::metrics`](crate::Producer::metrics)), the same values as
//! `(group, name, tags, value)` entries in the Java producer's groups (`producer-metrics`,
//! `producer-topic-metrics`, `producer-node-metrics`) plus kacrab's own per shard
//! (`kacrab-shard-metrics`), and their publication through the `metrics` crate
//! facade, so that any exporter installed in the application (Prometheus, StatsD...) sees
//! them.
//!
//! How they are counted: every shard counts into plain integers only it writes, per batch and
//! per request where Java counts that way (never per record on the success path), and copies
//! them to a slot of its own every [`PUBLISH_INTERVAL`], on request and as it stops; a snapshot
//! sums the slots. `Producer::metrics` first asks every shard to publish, so its snapshot
//! counts everything the shards had done when they answered: after a record's delivery
//! completed, or `flush` returned, it counts that record. (Called on a shard's thread, in a
//! delivery callback, it cannot wait for the shards and takes the slots as they are, at most
//! [`PUBLISH_INTERVAL`] old; shard 0's facade snapshots are the same.)
//!
//! Totals (`*-total`) count from the producer's start. Java's `*-rate`, `*-avg` and `*-max`
//! are over a 30-second sample window; here they are over the producer's life: a rate is its
//! total divided by [`ProducerMetrics::elapsed`], an average and a maximum are over every
//! sample since the start. For rates over an interval, take the difference of two snapshots'
//! totals (exporters do this with the `*-total` counters).

mod board;
mod facade;
mod names;

use std::sync::Arc;
use std::time::Duration;

use crate::engine::metrics::{EngineMetrics, NodeCounters, Stat, TopicCounters};
use crate::engine::NodeId;

pub(crate) use board::{CallTimes, MetricsBoard, ReadSharedGauges, ShardPublisher, SharedGauges};
pub use board::{ShardCounters, FACADE_INTERVAL, PUBLISH_INTERVAL};
pub use names::{Metric, GROUP_NODE, GROUP_PRODUCER, GROUP_SHARD, GROUP_TOPIC};

/// A snapshot of the producer's metrics, summed over every shard.
///
/// Field names are Kafka's metric names in snake_case; [`entries`](Self::entries) gives them
/// under Kafka's own names with their group and tags. Times are milliseconds where Kafka's
/// are (`*-avg`, `*-max`), nanoseconds where Kafka's name says `-ns-`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProducerMetrics {
    /// The producer's `client.id` (every entry's `client-id` tag).
    pub client_id: String,
    /// Time since the producer started: the window of every rate, average and maximum.
    pub elapsed: Duration,
    /// `record-send-total`: records in produce requests, every attempt (a retried record
    /// counts once per attempt, as in Java, where it is recorded per drained batch).
    pub record_send_total: u64,
    /// `record-error-total`: records the engine completed with an error (rejected, timed
    /// out, of unknown outcome, failed with the producer, refused at append as it closed or
    /// after it failed). Records refused before they reached the engine (by `send` itself, by
    /// a transaction barrier, or left in a shard's queue at close) are not counted.
    pub record_error_total: u64,
    /// `record-retry-total`: records of batches put back for another attempt.
    pub record_retry_total: u64,
    /// Batches in produce requests, every attempt (the count behind `batch-size-avg`; no
    /// entry of its own, Java has none).
    pub batch_send_total: u64,
    /// Produce requests written (the count behind `records-per-request-avg`; no entry of its
    /// own).
    pub produce_request_total: u64,
    /// `request-total`, `response-total`, `outgoing-byte-total`, `incoming-byte-total`:
    /// requests of every API and their answers, over every broker (sums of [`nodes`](Self::nodes)).
    pub request_total: u64,
    /// `response-total`.
    pub response_total: u64,
    /// `outgoing-byte-total`.
    pub outgoing_byte_total: u64,
    /// `incoming-byte-total`.
    pub incoming_byte_total: u64,
    /// `connection-count`: broker sockets open now.
    pub connection_count: u64,
    /// `connection-creation-total`: connections established.
    pub connection_creation_total: u64,
    /// `connection-close-total`: connections lost or closed by the producer (not counting
    /// those closed at `close`).
    pub connection_close_total: u64,
    /// `batch-size-avg` / `batch-size-max`: bytes per batch sent.
    pub batch_size_avg: f64,
    /// `batch-size-max`.
    pub batch_size_max: f64,
    /// `records-per-request-avg`.
    pub records_per_request_avg: f64,
    /// `record-queue-time-avg` / `-max`: milliseconds from a batch's first record to each of
    /// its drains.
    pub record_queue_time_avg: f64,
    /// `record-queue-time-max`.
    pub record_queue_time_max: f64,
    /// `request-latency-avg` / `-max`: milliseconds from a produce request to its answer.
    pub request_latency_avg: f64,
    /// `request-latency-max`.
    pub request_latency_max: f64,
    /// `produce-throttle-time-avg` / `-max`: the brokers' `throttle_time_ms`, milliseconds.
    pub produce_throttle_time_avg: f64,
    /// `produce-throttle-time-max`.
    pub produce_throttle_time_max: f64,
    /// `buffer-total-bytes`: `buffer.memory`.
    pub buffer_total_bytes: u64,
    /// `buffer-available-bytes`: `buffer.memory` less the bytes of records not yet completed.
    pub buffer_available_bytes: u64,
    /// `bufferpool-wait-time-ns-total`: time senders waited for room in `buffer.memory`.
    pub bufferpool_wait_time_ns_total: u64,
    /// `buffer-exhausted-total`: sends that failed waiting for room.
    pub buffer_exhausted_total: u64,
    /// `waiting-threads`: threads blocked in `send` waiting for room now.
    pub waiting_threads: u64,
    /// `txn-init-time-ns-total` ... `txn-abort-time-ns-total`, `flush-time-ns-total`: time
    /// spent in those calls, whatever their result.
    pub txn_init_time_ns_total: u64,
    /// `txn-begin-time-ns-total`.
    pub txn_begin_time_ns_total: u64,
    /// `txn-send-offsets-time-ns-total`.
    pub txn_send_offsets_time_ns_total: u64,
    /// `txn-commit-time-ns-total`.
    pub txn_commit_time_ns_total: u64,
    /// `txn-abort-time-ns-total`.
    pub txn_abort_time_ns_total: u64,
    /// `flush-time-ns-total`.
    pub flush_time_ns_total: u64,
    /// `producer-topic-metrics`, by topic, in the order the shards first saw them.
    pub topics: Vec<TopicMetrics>,
    /// `producer-node-metrics`, by node id (negative ids are bootstrap addresses).
    pub nodes: Vec<NodeMetrics>,
    /// `kacrab-shard-metrics`, by shard index.
    pub shards: Vec<ShardMetrics>,
}

/// One topic's `producer-topic-metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetrics {
    /// The topic (the `topic` tag).
    pub topic: Arc<str>,
    /// `record-send-total`.
    pub record_send_total: u64,
    /// `byte-total`: batch bytes sent, every attempt.
    pub byte_total: u64,
    /// `record-error-total`.
    pub record_error_total: u64,
    /// `record-retry-total`.
    pub record_retry_total: u64,
}

/// One broker's `producer-node-metrics` (tag `node-id` = `node-<id>`, as Java's).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeMetrics {
    /// The broker's node id (negative: a bootstrap address).
    pub node: NodeId,
    /// `request-total`: requests of every API written to the node.
    pub request_total: u64,
    /// `outgoing-byte-total`: their bytes.
    pub outgoing_byte_total: u64,
    /// `request-size-avg` / `-max`, bytes.
    pub request_size_avg: f64,
    /// `request-size-max`.
    pub request_size_max: f64,
    /// `response-total`.
    pub response_total: u64,
    /// `incoming-byte-total`.
    pub incoming_byte_total: u64,
    /// `request-latency-avg` / `-max` of produce requests, milliseconds.
    pub request_latency_avg: f64,
    /// `request-latency-max`.
    pub request_latency_max: f64,
}

/// One shard's `kacrab-shard-metrics` (tag `shard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardMetrics {
    /// The shard's index (the `shard` tag).
    pub shard: usize,
    /// What the shard counted.
    pub counters: ShardCounters,
}

/// What the producer counts outside the shards.
pub(crate) struct ProducerCounters {
    pub buffer_total_bytes: u64,
    pub buffer_available_bytes: u64,
    pub bufferpool_wait_time_ns_total: u64,
    pub buffer_exhausted_total: u64,
    pub waiting_threads: u64,
    pub connection_count: u64,
    pub connection_creation_total: u64,
    pub connection_close_total: u64,
    pub txn_init_time_ns_total: u64,
    pub txn_begin_time_ns_total: u64,
    pub txn_send_offsets_time_ns_total: u64,
    pub txn_commit_time_ns_total: u64,
    pub txn_abort_time_ns_total: u64,
    pub flush_time_ns_total: u64,
}

/// A `Stat` of microseconds as Java's milliseconds.
fn ms_avg(s: &Stat) -> f64 {
    s.avg() / 1_000.0
}

fn ms_max(s: &Stat) -> f64 {
    if s.count == 0 {
        f64::NAN
    } else {
        s.max as f64 / 1_000.0
    }
}

fn max_of(s: &Stat) -> f64 {
    if s.count == 0 {
        f64::NAN
    } else {
        s.max as f64
    }
}

impl ProducerMetrics {
    pub(crate) fn build(
        client_id: String,
        elapsed: Duration,
        engine: EngineMetrics,
        shards: Vec<ShardMetrics>,
        p: ProducerCounters,
    ) -> ProducerMetrics {
        let topics = engine
            .topics
            .iter()
            .map(|(topic, c): &(Arc<str>, TopicCounters)| TopicMetrics {
                topic: topic.clone(),
                record_send_total: c.records_sent,
                byte_total: c.bytes_sent,
                record_error_total: c.records_failed,
                record_retry_total: c.records_retried,
            })
            .collect();
        let nodes: Vec<NodeMetrics> = engine
            .nodes
            .iter()
            .map(|(&node, c): (&NodeId, &NodeCounters)| NodeMetrics {
                node,
                request_total: c.requests,
                outgoing_byte_total: c.request_bytes,
                request_size_avg: if c.requests == 0 {
                    f64::NAN
                } else {
                    c.request_bytes as f64 / c.requests as f64
                },
                request_size_max: c.request_size_max as f64,
                response_total: c.responses,
                incoming_byte_total: c.response_bytes,
                request_latency_avg: ms_avg(&c.latency_us),
                request_latency_max: ms_max(&c.latency_us),
            })
            .collect();
        ProducerMetrics {
            client_id,
            elapsed,
            record_send_total: engine.records_sent,
            record_error_total: engine.records_failed,
            record_retry_total: engine.records_retried,
            batch_send_total: engine.batches_sent,
            produce_request_total: engine.produce_requests,
            request_total: nodes.iter().map(|n| n.request_total).sum(),
            response_total: nodes.iter().map(|n| n.response_total).sum(),
            outgoing_byte_total: nodes.iter().map(|n| n.outgoing_byte_total).sum(),
            incoming_byte_total: nodes.iter().map(|n| n.incoming_byte_total).sum(),
            connection_count: p.connection_count,
            connection_creation_total: p.connection_creation_total,
            connection_close_total: p.connection_close_total,
            batch_size_avg: engine.batch_size.avg(),
            batch_size_max: max_of(&engine.batch_size),
            records_per_request_avg: engine.records_per_request.avg(),
            record_queue_time_avg: ms_avg(&engine.queue_time_us),
            record_queue_time_max: ms_max(&engine.queue_time_us),
            request_latency_avg: ms_avg(&engine.request_latency_us),
            request_latency_max: ms_max(&engine.request_latency_us),
            produce_throttle_time_avg: engine.throttle_time_ms.avg(),
            produce_throttle_time_max: max_of(&engine.throttle_time_ms),
            buffer_total_bytes: p.buffer_total_bytes,
            buffer_available_bytes: p.buffer_available_bytes,
            bufferpool_wait_time_ns_total: p.bufferpool_wait_time_ns_total,
            buffer_exhausted_total: p.buffer_exhausted_total,
            waiting_threads: p.waiting_threads,
            txn_init_time_ns_total: p.txn_init_time_ns_total,
            txn_begin_time_ns_total: p.txn_begin_time_ns_total,
            txn_send_offsets_time_ns_total: p.txn_send_offsets_time_ns_total,
            txn_commit_time_ns_total: p.txn_commit_time_ns_total,
            txn_abort_time_ns_total: p.txn_abort_time_ns_total,
            flush_time_ns_total: p.flush_time_ns_total,
            topics,
            nodes,
            shards,
        }
    }

    /// `total` per second of [`elapsed`](Self::elapsed).
    pub fn rate(&self, total: u64) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            total as f64 / secs
        } else {
            0.0
        }
    }

    /// `record-send-rate`: records sent per second since the start.
    pub fn record_send_rate(&self) -> f64 {
        self.rate(self.record_send_total)
    }

    /// `record-error-rate`.
    pub fn record_error_rate(&self) -> f64 {
        self.rate(self.record_error_total)
    }

    /// `record-retry-rate`.
    pub fn record_retry_rate(&self) -> f64 {
        self.rate(self.record_retry_total)
    }

    /// `bufferpool-wait-ratio`: the share of the producer's life senders spent waiting for
    /// room in `buffer.memory` (summed over threads, so it can pass 1 with many senders).
    pub fn bufferpool_wait_ratio(&self) -> f64 {
        let elapsed = self.elapsed.as_nanos() as f64;
        if elapsed > 0.0 {
            self.bufferpool_wait_time_ns_total as f64 / elapsed
        } else {
            0.0
        }
    }

    /// One topic's metrics.
    pub fn topic(&self, topic: &str) -> Option<&TopicMetrics> {
        self.topics.iter().find(|t| &*t.topic == topic)
    }

    /// One broker's metrics.
    pub fn node(&self, node: NodeId) -> Option<&NodeMetrics> {
        self.nodes.iter().find(|n| n.node == node)
    }

    /// Every metric under Kafka's name, with its group and tags (`client-id` on all, plus
    /// `topic`, `node-id` or `shard`), in group order.
    pub fn entries(&self) -> Vec<Metric> {
        names::entries(self)
    }

    /// Hands this snapshot to the `metrics` facade: `*-total` entries as counters (set with
    /// `absolute`), the others as gauges; named by Kafka's name, labelled with the entry's
    /// tags and `group`. [`Producer::metrics`](crate::Producer::metrics) calls it, and shard 0
    /// every [`FACADE_INTERVAL`]. Without an installed recorder it costs next to nothing.
    pub fn publish(&self) {
        facade::publish(self);
    }
}
