//! `Producer::metrics` after a known run against the reference cluster: records sent, retried
//! and failed are counted exactly, under Kafka's names, and reach a `metrics` facade recorder.
#![cfg(feature = "testkit")]

use std::time::Duration;

use bytes::Bytes;
use kacrab::metrics::{ProducerMetrics, GROUP_PRODUCER, GROUP_TOPIC};
use kacrab::testkit::broker::error_codes::{INVALID_RECORD, NOT_ENOUGH_REPLICAS};
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{ProduceError, Producer, ProducerRecord};
use kafka_protocol::messages::ApiKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

const TOPIC: &str = "counted";

/// One broker, one partition, one shard; every record waited for before the next is sent, so
/// each is alone in its batch and its produce request.
fn start() -> (ReferenceCluster, Producer) {
    start_with(&[])
}

fn start_with(extra: &[(&str, &str)]) -> (ReferenceCluster, Producer) {
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic(TOPIC, &[1]);
    let mut builder = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("client.id", "metered")
        .set("kacrab.shards", "1")
        .set("retry.backoff.ms", "10");
    for (key, value) in extra {
        builder = builder.set(key, *value);
    }
    (cluster, builder.build().expect("producer"))
}

fn send(producer: &Producer, i: u8) -> Result<kacrab::RecordMetadata, ProduceError> {
    producer
        .send(ProducerRecord::new(TOPIC, Bytes::from(vec![i; 10])))
        .wait()
}

/// 10 records sent once each, one sent twice (a retriable error on its first attempt), one
/// refused with a non-retriable error: 13 sends, 1 retry, 1 error.
fn known_run(cluster: &ReferenceCluster, producer: &Producer) -> ProducerMetrics {
    for i in 0..10 {
        send(producer, i).expect("a plain record");
    }
    cluster
        .faults()
        .inject_error(1, ApiKey::Produce, NOT_ENOUGH_REPLICAS, 1);
    send(producer, 10).expect("the record retried once");
    cluster
        .faults()
        .inject_error(1, ApiKey::Produce, INVALID_RECORD, 1);
    let refused = send(producer, 11);
    assert!(
        matches!(refused, Err(ProduceError::Rejected { .. })),
        "{refused:?}"
    );
    assert!(cluster.faults().wait_until_consumed(Duration::from_secs(5)));
    // A snapshot after `flush` returns covers every record the flush waited for.
    producer.flush();
    producer.metrics()
}

#[test]
fn metrics_after_a_known_run_count_sends_retries_and_errors_exactly() {
    let (cluster, producer) = start();
    let m = known_run(&cluster, &producer);

    assert_eq!(m.client_id, "metered");
    assert_eq!(m.record_send_total, 13, "{m:#?}");
    assert_eq!(m.record_retry_total, 1, "{m:#?}");
    assert_eq!(m.record_error_total, 1, "{m:#?}");
    assert_eq!(m.batch_send_total, 13);
    assert_eq!(m.produce_request_total, 13);
    assert_eq!(m.records_per_request_avg, 1.0);

    let topic = m.topic(TOPIC).expect("the topic's metrics");
    assert_eq!(topic.record_send_total, 13);
    assert_eq!(topic.record_retry_total, 1);
    assert_eq!(topic.record_error_total, 1);
    // Every batch holds one record of 10 bytes, so every batch is the same size.
    assert_eq!(topic.byte_total as f64, 13.0 * m.batch_size_avg);
    assert_eq!(m.batch_size_max, m.batch_size_avg);

    // The broker is node 1; its produce requests are among its requests, each answered.
    let node = m.node(1).expect("node 1's metrics");
    assert!(node.request_total >= 13, "{node:?}");
    assert!(node.response_total >= 13, "{node:?}");
    assert!(!node.request_latency_avg.is_nan() && node.request_latency_max >= 0.0);

    // Producer-wide requests are every node's, of every API.
    assert_eq!(
        m.request_total,
        m.nodes.iter().map(|n| n.request_total).sum::<u64>()
    );
    assert!(m.request_total >= 13 && m.connection_creation_total >= 1);

    // Nothing is buffered after the flush.
    assert_eq!(m.buffer_available_bytes, m.buffer_total_bytes);
    assert_eq!(m.shards.len(), 1);
    assert!(m.shards[0].counters.handoff_commands >= 12);

    // The same counts under Kafka's names, groups and tags.
    let entries = m.entries();
    let value = |group: &str, name: &str| {
        entries
            .iter()
            .find(|e| e.group == group && e.name == name)
            .unwrap_or_else(|| panic!("{group}:{name} missing"))
            .value
    };
    assert_eq!(value(GROUP_PRODUCER, "record-send-total"), 13.0);
    assert_eq!(value(GROUP_PRODUCER, "record-retry-total"), 1.0);
    assert_eq!(value(GROUP_PRODUCER, "record-error-total"), 1.0);
    assert_eq!(value(GROUP_TOPIC, "record-send-total"), 13.0);
    let topic_entry = entries
        .iter()
        .find(|e| e.group == GROUP_TOPIC && e.name == "record-retry-total")
        .expect("per-topic retries");
    assert_eq!(
        topic_entry.tags,
        vec![
            ("client-id", "metered".to_string()),
            ("topic", TOPIC.to_string())
        ]
    );
    producer.close(Duration::from_secs(5));
}

#[test]
fn a_snapshot_reaches_the_metrics_facade_under_kafkas_names_and_tags() {
    let (cluster, producer) = start();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let m = ::metrics::with_local_recorder(&recorder, || known_run(&cluster, &producer));
    assert_eq!(m.record_send_total, 13);

    let seen = snapshotter.snapshot().into_vec();
    let find = |name: &str, group: &str| {
        seen.iter()
            .find(|(key, _, _, _)| {
                let key = key.key();
                key.name() == name
                    && key
                        .labels()
                        .any(|l| l.key() == "group" && l.value() == group)
                    && key
                        .labels()
                        .any(|l| l.key() == "client-id" && l.value() == "metered")
            })
            .map(|(_, _, _, value)| value)
            .unwrap_or_else(|| panic!("{group}:{name} not published"))
    };
    assert_eq!(
        find("record-send-total", GROUP_PRODUCER),
        &DebugValue::Counter(13)
    );
    assert_eq!(
        find("record-retry-total", GROUP_PRODUCER),
        &DebugValue::Counter(1)
    );
    assert_eq!(
        find("record-error-total", GROUP_PRODUCER),
        &DebugValue::Counter(1)
    );
    assert_eq!(
        find("record-send-total", GROUP_TOPIC),
        &DebugValue::Counter(13)
    );
    assert!(matches!(
        find("buffer-available-bytes", GROUP_PRODUCER),
        DebugValue::Gauge(_)
    ));
    producer.close(Duration::from_secs(5));
}

#[test]
fn buffer_memory_is_all_available_once_flush_returns() {
    let (_cluster, producer) = start();
    for round in 0..200u8 {
        let pending = producer.send(ProducerRecord::new(TOPIC, Bytes::from(vec![round; 10])));
        producer.flush();
        // Every record the flush waited for has completed, so none holds buffer memory.
        assert_eq!(producer.buffered_bytes(), 0, "round {round}");
        let m = producer.metrics();
        assert_eq!(
            m.buffer_available_bytes, m.buffer_total_bytes,
            "round {round}"
        );
        pending.wait().expect("the record");
    }
    producer.close(Duration::from_secs(5));
}

#[test]
fn records_that_expire_while_their_broker_is_down_count_as_errors_not_sends() {
    let (cluster, producer) = start_with(&[
        ("linger.ms", "50"),
        ("request.timeout.ms", "500"),
        ("delivery.timeout.ms", "1000"),
        ("reconnect.backoff.max.ms", "100"),
    ]);
    send(&producer, 0).expect("a record while the broker is up");
    cluster.broker_down(1);
    // The shard has seen its connection go: nothing can be written until the broker is back.
    assert!(
        producer.wait_for_runtime_stats(Duration::from_secs(10), |s| {
            s.connections_to(1).all(|(_, c)| !c.established)
        })
    );
    let pending: Vec<_> = (1..4u8)
        .map(|i| producer.send(ProducerRecord::new(TOPIC, Bytes::from(vec![i; 10]))))
        .collect();
    for p in pending {
        let result = p.wait();
        assert!(
            matches!(result, Err(ProduceError::TimedOut { .. })),
            "{result:?}"
        );
    }
    producer.flush();
    let m = producer.metrics();
    assert_eq!(m.record_send_total, 1, "{m:#?}");
    assert_eq!(m.record_error_total, 3, "{m:#?}");
    assert_eq!(m.record_retry_total, 0, "{m:#?}");
    assert_eq!(m.topic(TOPIC).expect("topic").record_error_total, 3);
    producer.close(Duration::from_secs(1));
}

#[test]
fn transactional_calls_add_their_time_to_the_txn_totals_and_records_count_once() {
    let (_cluster, producer) = start_with(&[("transactional.id", "metered-txn")]);
    let call = Duration::from_secs(30);
    producer.init_transactions(call).expect("init");
    let before = producer.metrics();
    assert!(before.txn_init_time_ns_total > 0);
    assert_eq!(before.txn_begin_time_ns_total, 0);

    producer.begin_transaction().expect("begin");
    for i in 0..5 {
        send(&producer, i).expect("a committed record");
    }
    producer.commit_transaction(call).expect("commit");
    producer.begin_transaction().expect("begin");
    for i in 0..2 {
        send(&producer, i).expect("a record of the aborted transaction");
    }
    producer.abort_transaction(call).expect("abort");

    let m = producer.metrics();
    assert_eq!(m.txn_init_time_ns_total, before.txn_init_time_ns_total);
    assert!(m.txn_begin_time_ns_total > 0);
    assert!(m.txn_commit_time_ns_total > 0);
    assert!(m.txn_abort_time_ns_total > 0);
    assert_eq!(m.txn_send_offsets_time_ns_total, 0);
    // Each record was waited for before the next: one batch, one request each.
    assert_eq!(m.record_send_total, 7, "{m:#?}");
    assert_eq!(m.record_error_total, 0, "{m:#?}");
    assert_eq!(m.record_retry_total, 0, "{m:#?}");
    producer.close(Duration::from_secs(5));
}
