//! The producer's `tracing` events for what an operator needs beside connections and epochs:
//! a retried batch with its error, a failed batch with its promise, a Java key accepted and
//! ignored, the transaction's states and its coordinator. Over TCP against the reference
//! cluster.
#![cfg(feature = "testkit")]

mod common;

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::error_codes::{INVALID_RECORD, NOT_LEADER_OR_FOLLOWER};
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{ProduceError, Producer, ProducerRecord};
use kafka_protocol::messages::ApiKey;

use common::logs::Captured;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn retries_failed_batches_ignored_keys_and_transaction_states_are_logged() {
    let captured = Captured::install();
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic("logged-txn", &[1]);
    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("kacrab.shards", "1")
        .set("transactional.id", "logged-txn")
        .set("send.buffer.bytes", "-1")
        .build()
        .expect("producer");
    let record = || ProducerRecord::new("logged-txn", Bytes::from_static(b"logged"));
    producer.init_transactions(WAIT).expect("init");

    producer.begin_transaction().expect("begin");
    cluster
        .faults()
        .inject_error(1, ApiKey::Produce, NOT_LEADER_OR_FOLLOWER, 1);
    producer
        .send(record())
        .wait()
        .expect("the record lands after its retry");
    producer.commit_transaction(WAIT).expect("commit");

    producer.begin_transaction().expect("begin again");
    cluster
        .faults()
        .inject_error(1, ApiKey::Produce, INVALID_RECORD, 1);
    let refused = producer.send(record()).wait();
    assert!(
        matches!(refused, Err(ProduceError::Rejected { .. })),
        "{refused:?}"
    );
    // The failed record makes the transaction abortable: the commit is refused.
    let commit = producer.commit_transaction(WAIT);
    assert!(commit.is_err(), "{commit:?}");
    producer.abort_transaction(WAIT).expect("abort");
    producer.close(Duration::from_secs(5));

    let lines = captured.lines();
    let has = |needles: &[&str]| Captured::has(&lines, needles);
    assert!(
        has(&["send.buffer.bytes", "accepts and ignores"]),
        "the ignored key: {lines:#?}"
    );
    assert!(
        has(&["retrying batch", "NOT_LEADER_OR_FOLLOWER", "attempt=1"]),
        "the retry and its error: {lines:#?}"
    );
    assert!(
        has(&["batch failed", "INVALID_RECORD", "not in the log"]),
        "the failed batch and its promise: {lines:#?}"
    );
    assert!(
        has(&["coordinator found", "Transaction", "node=1"]),
        "the coordinator: {lines:#?}"
    );
    for (from, to) in [
        ("READY", "IN_TRANSACTION"),
        ("IN_TRANSACTION", "COMMITTING_TRANSACTION"),
        ("COMMITTING_TRANSACTION", "READY"),
        ("ABORTABLE_ERROR", "ABORTING_TRANSACTION"),
    ] {
        assert!(
            has(&[
                "transaction state",
                &format!("from=\"{from}\""),
                &format!("to=\"{to}\"")
            ]),
            "{from} -> {to}: {lines:#?}"
        );
    }
    assert!(
        has(&["AbortableError", "INVALID_RECORD"]),
        "the abortable error and why: {lines:#?}"
    );
}
