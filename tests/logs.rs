//! The producer's `tracing` events, captured from a failover over TCP against the reference
//! cluster: an epoch bump (OUT_OF_ORDER_SEQUENCE_NUMBER injected on a Produce answer) and a
//! broker going down and coming back show up as the events an operator would look for.
#![cfg(feature = "testkit")]

mod common;

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::error_codes::OUT_OF_ORDER_SEQUENCE_NUMBER;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{Producer, ProducerRecord};
use kafka_protocol::messages::ApiKey;

use common::logs::Captured;

#[test]
fn a_failover_run_logs_the_epoch_bump_and_the_lost_and_regained_connection() {
    let captured = Captured::install();

    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic("logged", &[1]);
    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("kacrab.shards", "1")
        .set("reconnect.backoff.max.ms", "100")
        .build()
        .expect("producer");
    let send = |i: u8| producer.send(ProducerRecord::new("logged", Bytes::from(vec![i; 8])));
    send(0).wait().expect("first record");

    // One Produce answer refused OUT_OF_ORDER_SEQUENCE_NUMBER: the producer bumps its epoch.
    cluster
        .faults()
        .inject_error(1, ApiKey::Produce, OUT_OF_ORDER_SEQUENCE_NUMBER, 1);
    let _ = send(1).wait();
    send(2).wait().expect("a record under the new epoch");

    // The broker goes down and comes back.
    cluster.broker_down(1);
    let during = send(3);
    cluster.broker_up(1);
    during
        .wait()
        .expect("the record sent while the broker was down lands");
    producer.close(Duration::from_secs(5));

    let lines = captured.lines();
    let has = |needles: &[&str]| Captured::has(&lines, needles);
    assert!(
        has(&["epoch bump requested", "epoch=0"]),
        "the bump request and the epoch it leaves: {lines:#?}"
    );
    assert!(
        has(&["producer identity adopted", "old_epoch=0", "epoch=1"]),
        "the new epoch: {lines:#?}"
    );
    assert!(
        has(&["connection down", "node=1"]),
        "the lost connection: {lines:#?}"
    );
    let ups = lines
        .iter()
        .filter(|l| l.contains("connection up") && l.contains("node=1"))
        .count();
    assert!(ups >= 2, "connected, then reconnected: {lines:#?}");
}
