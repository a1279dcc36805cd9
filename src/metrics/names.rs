//! The snapshot as entries under Kafka's metric names, groups and tags.

use super::ProducerMetrics;

/// The Java producer's producer-wide group (tag `client-id`).
pub const GROUP_PRODUCER: &str = "producer-metrics";
/// Per topic (tags `client-id`, `topic`).
pub const GROUP_TOPIC: &str = "producer-topic-metrics";
/// Per broker (tags `client-id`, `node-id` = `node-<id>`).
pub const GROUP_NODE: &str = "producer-node-metrics";
/// kacrab's own, per shard (tags `client-id`, `shard`).
pub const GROUP_SHARD: &str = "kacrab-shard-metrics";

/// One metric: Kafka's group and name, its tags, its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// The group ([`GROUP_PRODUCER`], [`GROUP_TOPIC`], [`GROUP_NODE`] or [`GROUP_SHARD`]).
    pub group: &'static str,
    /// Kafka's name for it, e.g. `record-send-total`.
    pub name: &'static str,
    /// `client-id` first, then the group's own tag, if any.
    pub tags: Vec<(&'static str, String)>,
    /// Its value (`NaN` for an average or a maximum of no samples, as Java reports it).
    pub value: f64,
}

impl Metric {
    /// A monotonic count (its name ends in `-total`); the others are gauges.
    pub fn is_counter(&self) -> bool {
        self.name.ends_with("-total")
    }

    /// `group:name:{tag=value,...}`, as Kafka's tools print a metric.
    pub fn display_name(&self) -> String {
        let tags: Vec<String> = self.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}:{}:{{{}}}", self.group, self.name, tags.join(","))
    }
}

pub(super) fn entries(m: &ProducerMetrics) -> Vec<Metric> {
    let mut out = Vec::with_capacity(40 + 8 * m.topics.len() + 10 * m.nodes.len());
    let client = || vec![("client-id", m.client_id.clone())];
    let mut push = |group, name, tags: Vec<(&'static str, String)>, value: f64| {
        out.push(Metric {
            group,
            name,
            tags,
            value,
        })
    };
    let c = |v: u64| v as f64;
    let rate = |v: u64| m.rate(v);
    let producer: [(&'static str, f64); 41] = [
        ("record-send-total", c(m.record_send_total)),
        ("record-send-rate", rate(m.record_send_total)),
        ("record-error-total", c(m.record_error_total)),
        ("record-error-rate", rate(m.record_error_total)),
        ("record-retry-total", c(m.record_retry_total)),
        ("record-retry-rate", rate(m.record_retry_total)),
        ("batch-size-avg", m.batch_size_avg),
        ("batch-size-max", m.batch_size_max),
        ("records-per-request-avg", m.records_per_request_avg),
        ("record-queue-time-avg", m.record_queue_time_avg),
        ("record-queue-time-max", m.record_queue_time_max),
        ("request-latency-avg", m.request_latency_avg),
        ("request-latency-max", m.request_latency_max),
        ("produce-throttle-time-avg", m.produce_throttle_time_avg),
        ("produce-throttle-time-max", m.produce_throttle_time_max),
        ("request-total", c(m.request_total)),
        ("request-rate", rate(m.request_total)),
        ("response-total", c(m.response_total)),
        ("response-rate", rate(m.response_total)),
        ("outgoing-byte-total", c(m.outgoing_byte_total)),
        ("outgoing-byte-rate", rate(m.outgoing_byte_total)),
        ("incoming-byte-total", c(m.incoming_byte_total)),
        ("incoming-byte-rate", rate(m.incoming_byte_total)),
        ("connection-count", c(m.connection_count)),
        ("connection-creation-total", c(m.connection_creation_total)),
        (
            "connection-creation-rate",
            rate(m.connection_creation_total),
        ),
        ("connection-close-total", c(m.connection_close_total)),
        ("connection-close-rate", rate(m.connection_close_total)),
        ("buffer-total-bytes", c(m.buffer_total_bytes)),
        ("buffer-available-bytes", c(m.buffer_available_bytes)),
        (
            "bufferpool-wait-time-ns-total",
            c(m.bufferpool_wait_time_ns_total),
        ),
        ("bufferpool-wait-ratio", m.bufferpool_wait_ratio()),
        ("buffer-exhausted-total", c(m.buffer_exhausted_total)),
        ("buffer-exhausted-rate", rate(m.buffer_exhausted_total)),
        ("waiting-threads", c(m.waiting_threads)),
        ("txn-init-time-ns-total", c(m.txn_init_time_ns_total)),
        ("txn-begin-time-ns-total", c(m.txn_begin_time_ns_total)),
        (
            "txn-send-offsets-time-ns-total",
            c(m.txn_send_offsets_time_ns_total),
        ),
        ("txn-commit-time-ns-total", c(m.txn_commit_time_ns_total)),
        ("txn-abort-time-ns-total", c(m.txn_abort_time_ns_total)),
        ("flush-time-ns-total", c(m.flush_time_ns_total)),
    ];
    for (name, value) in producer {
        push(GROUP_PRODUCER, name, client(), value);
    }

    for t in &m.topics {
        let tags = || {
            vec![
                ("client-id", m.client_id.clone()),
                ("topic", t.topic.to_string()),
            ]
        };
        let g = GROUP_TOPIC;
        push(g, "record-send-total", tags(), c(t.record_send_total));
        push(g, "record-send-rate", tags(), m.rate(t.record_send_total));
        push(g, "byte-total", tags(), c(t.byte_total));
        push(g, "byte-rate", tags(), m.rate(t.byte_total));
        push(g, "record-error-total", tags(), c(t.record_error_total));
        push(g, "record-error-rate", tags(), m.rate(t.record_error_total));
        push(g, "record-retry-total", tags(), c(t.record_retry_total));
        push(g, "record-retry-rate", tags(), m.rate(t.record_retry_total));
    }

    for n in &m.nodes {
        let tags = || {
            vec![
                ("client-id", m.client_id.clone()),
                ("node-id", format!("node-{}", n.node)),
            ]
        };
        let g = GROUP_NODE;
        push(g, "request-total", tags(), c(n.request_total));
        push(g, "request-rate", tags(), m.rate(n.request_total));
        push(g, "request-size-avg", tags(), n.request_size_avg);
        push(g, "request-size-max", tags(), n.request_size_max);
        push(g, "outgoing-byte-total", tags(), c(n.outgoing_byte_total));
        push(
            g,
            "outgoing-byte-rate",
            tags(),
            m.rate(n.outgoing_byte_total),
        );
        push(g, "response-total", tags(), c(n.response_total));
        push(g, "response-rate", tags(), m.rate(n.response_total));
        push(g, "incoming-byte-total", tags(), c(n.incoming_byte_total));
        push(
            g,
            "incoming-byte-rate",
            tags(),
            m.rate(n.incoming_byte_total),
        );
        push(g, "request-latency-avg", tags(), n.request_latency_avg);
        push(g, "request-latency-max", tags(), n.request_latency_max);
    }

    for s in &m.shards {
        let tags = || {
            vec![
                ("client-id", m.client_id.clone()),
                ("shard", s.shard.to_string()),
            ]
        };
        let g = GROUP_SHARD;
        let k = &s.counters;
        let run = k.busy_ns + k.parked_ns;
        push(g, "busy-time-ns-total", tags(), c(k.busy_ns));
        push(g, "parked-time-ns-total", tags(), c(k.parked_ns));
        push(
            g,
            "busy-ratio",
            tags(),
            if run == 0 {
                0.0
            } else {
                k.busy_ns as f64 / run as f64
            },
        );
        push(g, "park-total", tags(), c(k.parks));
        push(g, "ring-ticket-total", tags(), c(k.ring_tickets));
        push(g, "handoff-total", tags(), c(k.handoffs));
        push(g, "handoff-command-total", tags(), c(k.handoff_commands));
        push(
            g,
            "handoff-depth-avg",
            tags(),
            if k.handoffs == 0 {
                f64::NAN
            } else {
                k.handoff_commands as f64 / k.handoffs as f64
            },
        );
        push(g, "handoff-depth-max", tags(), c(k.handoff_depth_max));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::engine::metrics::EngineMetrics;
    use crate::metrics::{ProducerCounters, ProducerMetrics, ShardCounters, ShardMetrics};

    use super::*;

    fn snapshot() -> ProducerMetrics {
        let topic: Arc<str> = Arc::from("t");
        let mut engine = EngineMetrics::default();
        engine.add_slot(0, &topic);
        engine.batch_sent(0, 4, 200, 3_000);
        engine.produce_request_sent(4);
        engine.request_sent(2, 260);
        engine.response_received(2, 60);
        engine.produce_answered(2, 1_500, 7);
        ProducerMetrics::build(
            "c".to_string(),
            Duration::from_secs(2),
            engine,
            vec![ShardMetrics {
                shard: 0,
                counters: ShardCounters {
                    busy_ns: 1,
                    parked_ns: 3,
                    ..ShardCounters::default()
                },
            }],
            ProducerCounters {
                buffer_total_bytes: 100,
                buffer_available_bytes: 40,
                bufferpool_wait_time_ns_total: 500_000_000,
                buffer_exhausted_total: 0,
                waiting_threads: 0,
                connection_count: 1,
                connection_creation_total: 1,
                connection_close_total: 0,
                txn_init_time_ns_total: 0,
                txn_begin_time_ns_total: 0,
                txn_send_offsets_time_ns_total: 0,
                txn_commit_time_ns_total: 0,
                txn_abort_time_ns_total: 0,
                flush_time_ns_total: 0,
            },
        )
    }

    fn find<'a>(entries: &'a [Metric], group: &str, name: &str) -> &'a Metric {
        entries
            .iter()
            .find(|e| e.group == group && e.name == name)
            .unwrap_or_else(|| panic!("{group}:{name} missing"))
    }

    #[test]
    fn entries_carry_the_java_producers_names_groups_tags_and_units() {
        let entries = snapshot().entries();
        let v = |group, name| find(&entries, group, name).value;
        assert_eq!(v(GROUP_PRODUCER, "record-send-total"), 4.0);
        // Rates are over the snapshot's elapsed time (2 s).
        assert_eq!(v(GROUP_PRODUCER, "record-send-rate"), 2.0);
        assert_eq!(v(GROUP_PRODUCER, "batch-size-avg"), 200.0);
        assert_eq!(v(GROUP_PRODUCER, "records-per-request-avg"), 4.0);
        // Microseconds in the engine, milliseconds under Kafka's names.
        assert_eq!(v(GROUP_PRODUCER, "record-queue-time-max"), 3.0);
        assert_eq!(v(GROUP_PRODUCER, "request-latency-avg"), 1.5);
        assert_eq!(v(GROUP_PRODUCER, "produce-throttle-time-max"), 7.0);
        assert_eq!(v(GROUP_PRODUCER, "buffer-available-bytes"), 40.0);
        assert_eq!(v(GROUP_PRODUCER, "bufferpool-wait-ratio"), 0.25);
        assert_eq!(v(GROUP_PRODUCER, "request-total"), 1.0);
        assert_eq!(v(GROUP_TOPIC, "byte-total"), 200.0);
        assert_eq!(v(GROUP_NODE, "request-latency-max"), 1.5);
        assert_eq!(v(GROUP_NODE, "incoming-byte-total"), 60.0);
        assert_eq!(v(GROUP_SHARD, "busy-ratio"), 0.25);
        for name in [
            "record-error-rate",
            "record-retry-rate",
            "request-latency-max",
            "record-queue-time-avg",
            "produce-throttle-time-avg",
            "txn-init-time-ns-total",
            "txn-begin-time-ns-total",
            "txn-send-offsets-time-ns-total",
            "txn-commit-time-ns-total",
            "txn-abort-time-ns-total",
        ] {
            find(&entries, GROUP_PRODUCER, name);
        }
        let node = find(&entries, GROUP_NODE, "request-total");
        assert_eq!(
            node.tags,
            vec![
                ("client-id", "c".to_string()),
                ("node-id", "node-2".to_string())
            ]
        );
        assert_eq!(
            node.display_name(),
            "producer-node-metrics:request-total:{client-id=c,node-id=node-2}"
        );
        assert!(node.is_counter());
        assert!(!find(&entries, GROUP_PRODUCER, "record-send-rate").is_counter());
    }
}
