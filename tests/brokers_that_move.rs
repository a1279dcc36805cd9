//! Clusters whose topics and brokers change under a running producer, over TCP against the
//! reference cluster, read back with librdkafka's consumer: topics the broker creates on first
//! use, as Java's producer lets it.
#![cfg(feature = "testkit")]

mod common;

use std::time::Duration;

use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::ProducerRecord;

use common::{kacrab_producer, read_back, Isolation};

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
