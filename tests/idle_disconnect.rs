//! A Kafka broker closes a connection that has been idle longer than its
//! `connections.max.idle.ms` (default 10 minutes), without a word to the client. Kafka's
//! `Selector` does it for the connection idle longest. A producer that sends after such a close
//! must reconnect and lose nothing. A request that crosses the close on the wire is never read
//! by the broker, so its batch is retried, and it must land once.
//!
//! Like Java's client, kacrab closes its own connections after `connections.max.idle.ms`
//! (9 minutes by default) with nothing in flight, under the broker's limit, so that race is
//! rare; the tests also run with the client's limit above the broker's.
//!
//! The reference cluster closes idle connections at a limit the test sets, on real time or,
//! for the crossing test, on the brokers' frozen clock, which only the test advances.
//! librdkafka's consumer reads the log back.
#![cfg(feature = "testkit")]

mod common;

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{DeliveryFuture, Producer, ProducerRecord};

use common::assert_read_back_exactly_once;

const PARTITIONS: i32 = 3;
const WAIT: Duration = Duration::from_secs(30);

fn cluster_closing_idle_connections_after(topic: &str, idle: Duration) -> ReferenceCluster {
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(topic, &[1, 2, 3]);
    cluster.set_connections_max_idle(Some(idle));
    cluster
}

/// A producer whose own idle limit (`connections.max.idle.ms`) is `client_idle_ms`.
fn producer(cluster: &ReferenceCluster, client_idle_ms: &str) -> Producer {
    common::kacrab_producer(
        &cluster.bootstrap_servers(),
        &[
            ("reconnect.backoff.ms", "1"),
            ("retry.backoff.ms", "5"),
            ("connections.max.idle.ms", client_idle_ms),
        ],
    )
}

fn send(producer: &Producer, topic: &str, id: u64, partition: i32) -> DeliveryFuture {
    let record = ProducerRecord::new(topic, Bytes::from(id.to_be_bytes().to_vec()))
        .with_partition(partition);
    producer.send(record)
}

fn spread(id: u64) -> i32 {
    (id % PARTITIONS as u64) as i32
}

/// Sends ids `ids` over every partition and waits until each is acknowledged.
fn send_spread_and_wait(producer: &Producer, topic: &str, ids: std::ops::Range<u64>) {
    acknowledged(
        ids.map(|id| (id, send(producer, topic, id, spread(id))))
            .collect(),
    );
}

fn acknowledged(deliveries: Vec<(u64, DeliveryFuture)>) {
    for (id, delivery) in deliveries {
        let outcome = delivery.wait_timeout(WAIT).expect("the record resolves");
        outcome.unwrap_or_else(|e| panic!("record {id} failed: {e}"));
    }
}

/// Reads `topic` back with librdkafka, which must find records 0..count once each. The
/// reader's connections are not under test, and librdkafka reports an idle close to its poll
/// as an error, so the brokers' idle limit is turned off first.
fn read_back_with_idle_limit_off(cluster: &ReferenceCluster, topic: &str, count: u64) {
    cluster.set_connections_max_idle(None);
    assert_read_back_exactly_once(&cluster.bootstrap_servers(), topic, PARTITIONS, count, &[]);
}

#[test]
fn a_connection_the_broker_closed_for_idling_is_reopened_and_no_record_is_lost_or_doubled() {
    let topic = "idle-closed";
    let cluster = cluster_closing_idle_connections_after(topic, Duration::from_millis(300));
    let producer = producer(&cluster, "540000");
    send_spread_and_wait(&producer, topic, 0..300);
    // Every broker leads a partition, so each closes at least the producer's connection to it.
    assert!(
        cluster.stats().wait_for_idle_closed(3, WAIT),
        "the brokers closed the idle connections ({} closed)",
        cluster.stats().idle_closed()
    );
    let accepted = cluster.stats().connections_accepted();
    send_spread_and_wait(&producer, topic, 300..600);
    assert!(
        cluster.stats().connections_accepted() > accepted,
        "the producer connected again"
    );
    drop(producer);
    read_back_with_idle_limit_off(&cluster, topic, 600);
}

// Records sent one at a time to one partition, each after the brokers' frozen clock was
// advanced by the idle limit. The advance closes the connection the previous record was
// acknowledged on (its last activity), and the close reaches the producer only at the next
// advance: so the next request the producer writes on it crosses the close on the wire and is
// dropped unread, and its batch (or whatever request crossed first) is retried on a new
// connection. Every round therefore has an idle close and a crossing, by construction.
#[test]
fn records_sent_across_a_brokers_idle_closes_land_exactly_once() {
    const RECORDS: u64 = 20;
    let topic = "idle-crossing";
    let idle = Duration::from_millis(40);
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(topic, &[1, 2, 3]);
    cluster.freeze_clock();
    cluster.set_connections_max_idle(Some(idle));
    let producer = producer(&cluster, "540000");
    let stats = cluster.stats();
    for id in 0..RECORDS {
        let (closed, crossed) = (stats.idle_closed(), stats.idle_crossings());
        cluster.advance_clock(idle);
        acknowledged(vec![(id, send(&producer, topic, id, 0))]);
        // Before the first record the producer has no connection to partition 0's leader.
        if id > 0 {
            assert!(
                stats.idle_closed() > closed,
                "record {id}: the advance closed the idle connection to the leader"
            );
            assert!(
                stats.idle_crossings() > crossed,
                "record {id}: a request crossed the close"
            );
        }
    }
    let (closed, crossed) = (stats.idle_closed(), stats.idle_crossings());
    let retried = producer.metrics().record_retry_total;
    drop(producer);
    read_back_with_idle_limit_off(&cluster, topic, RECORDS);
    println!("{RECORDS} records, {closed} idle closes, {crossed} crossings, {retried} retried");
}

#[test]
fn the_producer_closes_connections_idle_past_its_connections_max_idle_ms_and_reopens_them() {
    let topic = "client-idle";
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(topic, &[1, 2, 3]);
    let producer = producer(&cluster, "200");
    send_spread_and_wait(&producer, topic, 0..300);
    assert!(
        cluster.stats().wait_for_connections_open(0, WAIT),
        "the producer closed every idle connection ({} open)",
        cluster.stats().connections_open()
    );
    assert_eq!(cluster.stats().idle_closed(), 0, "the brokers closed none");
    let accepted = cluster.stats().connections_accepted();
    send_spread_and_wait(&producer, topic, 300..600);
    assert!(cluster.stats().connections_accepted() > accepted);
    drop(producer);
    assert_read_back_exactly_once(&cluster.bootstrap_servers(), topic, PARTITIONS, 600, &[]);
}
