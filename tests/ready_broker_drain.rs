//! A broker that gets a request takes the open batches of its other partitions along (Java's
//! drain takes the first batch of every partition of a ready broker), and a broker that is not
//! ready keeps its open batches until their linger. Over TCP against the reference cluster,
//! read back with librdkafka's consumer.
#![cfg(feature = "testkit")]

mod common;

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{DeliveryFuture, Producer, ProducerRecord};

use common::{payload_ids, read_back, Isolation};

const WAIT: Duration = Duration::from_secs(30);
const VALUE: usize = 1_000;

fn send(producer: &Producer, topic: &str, partition: i32, id: u64) -> DeliveryFuture {
    let mut value = id.to_be_bytes().to_vec();
    value.resize(VALUE, 0);
    producer.send(ProducerRecord::new(topic, Bytes::from(value)).with_partition(partition))
}

#[test]
fn a_full_batch_takes_the_open_batch_of_a_partition_on_the_same_broker_and_not_one_on_another() {
    let topic = "ready-broker-drain";
    let cluster = ReferenceCluster::start(2, BrokerRules::default());
    // Partitions 0 and 1 on broker 1, partition 2 on broker 2.
    cluster.create_topic(topic, &[1, 1, 2]);
    // A linger far longer than the test: a batch that goes before a flush went because its
    // broker was sent to anyway, or because it filled. One shard: each shard drains its own
    // partitions over its own connections, so only partitions of one shard travel together.
    let producer = common::kacrab_producer(
        &cluster.bootstrap_servers(),
        &[
            ("kacrab.shards", "1"),
            ("linger.ms", "600000"),
            ("batch.size", "16384"),
        ],
    );
    // Ids in send order, per partition.
    let mut sent: Vec<Vec<u64>> = vec![Vec::new(); 3];
    let mut next_id = 0u64;
    let mut send_to = |partition: i32| {
        sent[partition as usize].push(next_id);
        next_id += 1;
        send(&producer, topic, partition, next_id - 1)
    };
    // Connections, metadata and the producer id first.
    let warm: Vec<_> = (0..3).map(&mut send_to).collect();
    producer.flush();
    for f in warm {
        f.wait().expect("a warm-up record lands");
    }

    let quiet_same_broker = send_to(1);
    let quiet_other_broker = send_to(2);
    // Partition 0 fills a batch (and opens the next one).
    let filling: Vec<_> = (0..16_384 / VALUE + 1).map(|_| send_to(0)).collect();
    let rode_along = quiet_same_broker.wait_timeout(WAIT);
    assert!(
        matches!(rode_along, Some(Ok(_))),
        "partition 1's open batch went with partition 0's full one, long before its linger: \
         {rode_along:?}"
    );
    assert!(
        quiet_other_broker.try_result().is_none(),
        "broker 2 got no request: partition 2's open batch waits for its linger"
    );
    assert_eq!(
        cluster.with_cluster(|c| c.partition_log(topic, 2).len()),
        1,
        "only the warm-up batch is in partition 2"
    );

    producer.flush();
    quiet_other_broker
        .wait()
        .expect("partition 2's record lands at the flush");
    for f in filling {
        f.wait().expect("every record of partition 0 lands");
    }
    let ids = payload_ids(&read_back(
        &cluster.bootstrap_servers(),
        topic,
        3,
        Isolation::ReadUncommitted,
        WAIT,
    ));
    assert_eq!(ids, sent, "every record once, in send order");
    producer.close(Duration::from_secs(5));
}
