//! Clusters whose topics and brokers change under a running producer, over TCP against the
//! reference cluster, read back with librdkafka's consumer: topics the broker creates on first
//! use, as Java's producer lets it; and a cluster replaced by new brokers at new addresses,
//! reachable only through the bootstrap address (`metadata.recovery.strategy`, KIP-899).
#![cfg(feature = "testkit")]

mod common;

use std::time::Duration;

use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{ProduceError, ProducerRecord};

use common::forwarder::Forwarder;
use common::{kacrab_producer, read_back, send_expecting_failures, Isolation};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_topic_the_cluster_lacks_is_created_by_the_brokers_auto_create_rule_and_the_records_land_once()
{
    let rules = BrokerRules {
        auto_create_topic_partitions: Some(3),
        ..BrokerRules::default()
    };
    let cluster = ReferenceCluster::start(3, rules);
    // Bounded, so that a producer that cannot get the topic fails fast instead of blocking
    // every send for the default minute.
    let producer = kacrab_producer(
        &cluster.bootstrap_servers(),
        &[
            ("max.block.ms", "5000"),
            ("delivery.timeout.ms", "10000"),
            ("request.timeout.ms", "5000"),
        ],
    );
    let send = |i: u32| {
        producer.send(
            ProducerRecord::new("created-on-first-use", i.to_be_bytes().to_vec())
                .with_partition((i % 3) as i32),
        )
    };
    send(0).wait().expect("the first record is acknowledged");
    let futures: Vec<_> = (1..30u32).map(send).collect();
    for (i, future) in (1..).zip(futures) {
        let metadata = future.wait().expect("acknowledged");
        assert_eq!(metadata.partition, i % 3);
    }
    producer.close(WAIT);
    let log = read_back(
        &cluster.bootstrap_servers(),
        "created-on-first-use",
        3,
        Isolation::ReadUncommitted,
        WAIT,
    );
    for (partition, records) in log.iter().enumerate() {
        let ids: Vec<u32> = records
            .iter()
            .map(|r| u32::from_be_bytes(r.payload.as_deref().unwrap().try_into().unwrap()))
            .collect();
        let expected: Vec<u32> = (0..30).filter(|i| i % 3 == partition as u32).collect();
        assert_eq!(ids, expected, "partition {partition}");
    }
}

const TOPIC: &str = "moving";

/// An old cluster of two brokers with `moving` (two partitions), the producer's bootstrap
/// address in front of it, and a new cluster of two other brokers, at other addresses, with
/// the same topic.
struct Move {
    old: ReferenceCluster,
    new: ReferenceCluster,
    bootstrap: Forwarder,
}

impl Move {
    fn start() -> Move {
        let old = ReferenceCluster::start(2, BrokerRules::default());
        old.create_topic(TOPIC, &[1, 2]);
        let new = ReferenceCluster::start(2, BrokerRules::default());
        new.create_topic(TOPIC, &[2, 1]);
        let bootstrap = Forwarder::start(old.broker_address(1));
        Move {
            old,
            new,
            bootstrap,
        }
    }

    /// The bootstrap address now leads to the new cluster, and every old broker is gone.
    fn replace_the_cluster(&self) {
        self.bootstrap.retarget(self.new.broker_address(1));
        self.old.shutdown();
    }

    fn high_watermarks(cluster: &ReferenceCluster) -> Vec<i64> {
        cluster.with_cluster(|c| {
            (0..2)
                .map(|p| c.high_watermark(TOPIC, p).unwrap_or(0))
                .collect()
        })
    }
}

fn record(id: u32) -> ProducerRecord {
    ProducerRecord::new(TOPIC, id.to_be_bytes().to_vec()).with_partition((id % 2) as i32)
}

/// Sends ids `range` and waits for every acknowledgement.
fn send_all_acknowledged(producer: &kacrab::Producer, range: std::ops::Range<u32>) {
    let futures: Vec<_> = range.clone().map(|id| producer.send(record(id))).collect();
    for (id, future) in range.zip(futures) {
        let metadata = future
            .wait_timeout(WAIT)
            .expect("the record resolves")
            .unwrap_or_else(|e| panic!("record {id} failed: {e}"));
        assert_eq!(metadata.partition, (id % 2) as i32);
    }
}

#[test]
fn with_rebootstrap_a_producer_follows_the_bootstrap_address_to_a_new_cluster_and_keeps_delivering()
{
    let cluster = Move::start();
    let producer = kacrab_producer(
        &cluster.bootstrap.address(),
        &[("metadata.recovery.strategy", "rebootstrap")],
    );
    send_all_acknowledged(&producer, 0..10);
    assert_eq!(Move::high_watermarks(&cluster.old), vec![5, 5]);

    cluster.replace_the_cluster();
    send_all_acknowledged(&producer, 10..30);
    assert!(producer.runtime_stats().engine_totals().rebootstraps >= 1);
    producer.close(WAIT);

    // The old cluster kept the first ten; the new one has exactly the rest, in order.
    assert_eq!(Move::high_watermarks(&cluster.old), vec![5, 5]);
    let log = read_back(
        &cluster.new.bootstrap_servers(),
        TOPIC,
        2,
        Isolation::ReadUncommitted,
        WAIT,
    );
    for (partition, records) in log.iter().enumerate() {
        let ids: Vec<u32> = records
            .iter()
            .map(|r| u32::from_be_bytes(r.payload.as_deref().unwrap().try_into().unwrap()))
            .collect();
        let expected: Vec<u32> = (10..30).filter(|i| i % 2 == partition as u32).collect();
        assert_eq!(ids, expected, "partition {partition}");
    }
}

#[test]
fn with_none_a_producer_keeps_to_the_gone_brokers_and_its_records_time_out_unsent() {
    let cluster = Move::start();
    let producer = kacrab_producer(
        &cluster.bootstrap.address(),
        &[
            ("metadata.recovery.strategy", "none"),
            ("request.timeout.ms", "1000"),
            ("delivery.timeout.ms", "2000"),
        ],
    );
    send_all_acknowledged(&producer, 0..10);

    cluster.replace_the_cluster();
    let errors = send_expecting_failures(
        &producer,
        10,
        |id| record(10 + id as u32),
        "by a producer that must not find the new cluster",
    );
    for error in &errors {
        // No attempt was ever written, so "not in the log" is the truth.
        assert!(
            matches!(error, ProduceError::TimedOut { .. }),
            "expected a delivery timeout before sending, got {error}"
        );
    }
    assert_eq!(producer.runtime_stats().engine_totals().rebootstraps, 0);
    producer.close(WAIT);
    assert_eq!(Move::high_watermarks(&cluster.new), vec![0, 0]);
    assert_eq!(Move::high_watermarks(&cluster.old), vec![5, 5]);
}
