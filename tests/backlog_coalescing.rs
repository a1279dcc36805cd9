//! A producer that the network holds up: records sent while a partition's earlier batch waits
//! for the wire join one open batch (as in Java's accumulator, whose last batch of a partition
//! takes records until a drain takes it), instead of each becoming a batch of its own. Read
//! back with librdkafka's consumer.
#![cfg(feature = "testkit")]

mod common;

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{DeliveryFuture, Producer, ProducerRecord};
use kafka_protocol::messages::ApiKey;

use common::{payload_ids, read_back, Isolation};

const WAIT: Duration = Duration::from_secs(30);

fn send(producer: &Producer, topic: &str, id: u64) -> DeliveryFuture {
    producer
        .send(ProducerRecord::new(topic, Bytes::from(id.to_be_bytes().to_vec())).with_partition(0))
}

#[test]
fn records_sent_while_the_partition_waits_for_the_wire_join_one_open_batch_at_linger_zero() {
    let topic = "backlog-coalescing";
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic(topic, &[1]);
    // One request in flight per connection: the second batch waits in the engine while the
    // first is on the wire.
    let producer = common::kacrab_producer(
        &cluster.bootstrap_servers(),
        &[
            ("linger.ms", "0"),
            ("batch.size", "16384"),
            ("max.in.flight.requests.per.connection", "1"),
        ],
    );
    send(&producer, topic, 0)
        .wait()
        .expect("the first record lands");
    // The next request's answer is held back for longer than the sends below take.
    cluster
        .faults()
        .delay_response(1, ApiKey::Produce, 1, Duration::from_secs(3));
    let mut futures = vec![send(&producer, topic, 1)];
    assert!(
        cluster.faults().wait_until_consumed(WAIT),
        "record 1's request reached the broker and its answer is held"
    );
    futures.extend((2..=101).map(|id| send(&producer, topic, id)));
    let offsets: Vec<i64> = futures
        .into_iter()
        .map(|f| f.wait().expect("every record lands").offset)
        .collect();
    assert_eq!(
        offsets,
        (1..=101).collect::<Vec<i64>>(),
        "one offset each, in order"
    );
    // Record 1 on the wire, record 2 (or the first few) waiting for the wire, the rest held
    // open behind it and sent together once the wire is free.
    let batches = cluster.with_cluster(|c| c.partition_log(topic, 0).len());
    assert!(
        batches <= 4,
        "records 0..=101 are in {batches} batches: the held-up records did not coalesce"
    );
    let ids = payload_ids(&read_back(
        &cluster.bootstrap_servers(),
        topic,
        1,
        Isolation::ReadUncommitted,
        WAIT,
    ));
    assert_eq!(ids, vec![(0..=101).collect::<Vec<u64>>()]);
    producer.close(Duration::from_secs(5));
}
