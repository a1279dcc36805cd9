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
    pub group: &'static str,
    pub name: &'static str,
    /// `client-id` first, then the group's own tag, if any.
    pub tags: Vec<(&'static str, String)>,
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
    let p = GROUP_PRODUCER;
    let c = |v: u64| v as f64;
    push(p, "record-send-total", client(), c(m.record_send_total));
    push(p, "record-send-rate", client(), m.record_send_rate());
    push(p, "record-error-total", client(), c(m.record_error_total));
    push(p, "record-error-rate", client(), m.record_error_rate());
    push(p, "record-retry-total", client(), c(m.record_retry_total));
    push(p, "record-retry-rate", client(), m.record_retry_rate());
    push(p, "batch-send-total", client(), c(m.batch_send_total));
    push(p, "request-total", client(), c(m.produce_request_total));
    push(p, "request-rate", client(), m.rate(m.produce_request_total));
    push(p, "batch-size-avg", client(), m.batch_size_avg);
    push(p, "batch-size-max", client(), m.batch_size_max);
    push(
        p,
        "records-per-request-avg",
        client(),
        m.records_per_request_avg,
    );
    push(
        p,
        "record-queue-time-avg",
        client(),
        m.record_queue_time_avg,
    );
    push(
        p,
        "record-queue-time-max",
        client(),
        m.record_queue_time_max,
    );
    push(p, "request-latency-avg", client(), m.request_latency_avg);
    push(p, "request-latency-max", client(), m.request_latency_max);
    push(
        p,
        "produce-throttle-time-avg",
        client(),
        m.produce_throttle_time_avg,
    );
    push(
        p,
        "produce-throttle-time-max",
        client(),
        m.produce_throttle_time_max,
    );
    push(p, "buffer-total-bytes", client(), c(m.buffer_total_bytes));
    push(
        p,
        "buffer-available-bytes",
        client(),
        c(m.buffer_available_bytes),
    );
    push(
        p,
        "bufferpool-wait-time-ns-total",
        client(),
        c(m.bufferpool_wait_time_ns_total),
    );
    push(
        p,
        "bufferpool-wait-ratio",
        client(),
        m.bufferpool_wait_ratio(),
    );
    push(
        p,
        "txn-init-time-ns-total",
        client(),
        c(m.txn_init_time_ns_total),
    );
    push(
        p,
        "txn-begin-time-ns-total",
        client(),
        c(m.txn_begin_time_ns_total),
    );
    push(
        p,
        "txn-send-offsets-time-ns-total",
        client(),
        c(m.txn_send_offsets_time_ns_total),
    );
    push(
        p,
        "txn-commit-time-ns-total",
        client(),
        c(m.txn_commit_time_ns_total),
    );
    push(
        p,
        "txn-abort-time-ns-total",
        client(),
        c(m.txn_abort_time_ns_total),
    );
    push(p, "flush-time-ns-total", client(), c(m.flush_time_ns_total));

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
