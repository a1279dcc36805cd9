//! Cross-check of the reference broker (the judge of kacrab's exactly-once tests) against an
//! independent, battle-tested client: librdkafka 2.12.1's idempotent producer writes while the
//! fault plan drops answers after appending, resets connections (also mid-frame), delays an
//! answer past the client's timeout, injects retriable errors, moves leaders and takes a
//! broker down and up. librdkafka's retries reuse each batch's (producer id, epoch,
//! sequence), so a correct broker de-duplicates them: every acked record must be in the log
//! exactly once, in order per partition. A duplicate here points at the broker first.
//!
//! The faults stay within what librdkafka's idempotent producer handles correctly: no message
//! timeouts (which make it bump the epoch, where its issue #4953 re-sends batches of other
//! partitions under the new epoch) and no errors it treats as fatal (OUT_OF_ORDER_SEQUENCE_NUMBER).
#![cfg(feature = "testkit")]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use kacrab::testkit::broker::error_codes::{
    NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
};
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::{ReferenceCluster, ANY_BROKER};
use kafka_protocol::messages::ApiKey;
use rdkafka::producer::Producer;

use common::{
    check_exactly_once, idempotent_producer, payload_ids, read_back, send_id, Deliveries,
    IdProducer, Isolation,
};

const TOPIC: &str = "crosscheck";
const PARTITIONS: i32 = 6;
const WAIT: Duration = Duration::from_secs(30);

/// Sends ids in order, round-robin over the partitions, keeping at most `window` unacked.
struct Traffic<'a> {
    producer: &'a IdProducer,
    deliveries: &'a Deliveries,
    next_id: u64,
}

impl Traffic<'_> {
    fn send(&mut self, count: u64) {
        for _ in 0..count {
            let id = self.next_id;
            send_id(
                self.producer,
                TOPIC,
                (id % PARTITIONS as u64) as i32,
                id,
                24,
            );
            self.next_id += 1;
        }
    }

    /// Keeps traffic flowing in chunks (each chunk waits for the previous ones to be mostly
    /// acked) until `done` holds, so faults that wait for requests meet some.
    fn pump_until(&mut self, what: &str, done: impl Fn() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            self.send(300);
            let target = self.next_id as usize - 600;
            self.deliveries
                .wait_until(what, WAIT, |s| s.acked.len() >= target);
        }
        panic!("{what}: traffic never met the fault");
    }

    fn wait_all_acked(&self, what: &str) {
        let sent = self.next_id as usize;
        self.deliveries
            .wait_until(what, WAIT, |s| s.acked.len() + s.failed.len() >= sent);
        let failed = self.deliveries.snapshot().failed;
        assert!(
            failed.is_empty(),
            "{what}: failed deliveries {:?}",
            &failed[..failed.len().min(3)]
        );
    }
}

#[test]
fn librdkafka_idempotent_producer_comes_out_exactly_once_under_faults() {
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(TOPIC, &[1, 2, 3, 1, 2, 3]);
    let (producer, deliveries) = idempotent_producer(
        &cluster.bootstrap_servers(),
        &[
            ("linger.ms", "2"),
            ("batch.size", "16384"),
            // The client's own request timeout (librdkafka caps produce timeouts with it): a
            // delayed answer beyond it makes the client give up on the request and retry.
            ("socket.timeout.ms", "1000"),
            ("retry.backoff.ms", "10"),
            ("retry.backoff.max.ms", "100"),
            ("reconnect.backoff.ms", "10"),
            ("reconnect.backoff.max.ms", "100"),
            ("message.timeout.ms", "120000"),
        ],
    );
    let mut traffic = Traffic {
        producer: &producer,
        deliveries: &deliveries,
        next_id: 0,
    };
    let faults = cluster.faults();
    let consumed = || faults.pending() == 0;

    traffic.send(2_000);
    traffic.wait_all_acked("warm-up");

    faults.drop_response_after_append(ANY_BROKER, ApiKey::Produce, 3);
    traffic.pump_until("answers dropped after append", consumed);
    traffic.wait_all_acked("after dropped answers");

    faults.reset_connection(ANY_BROKER, ApiKey::Produce, 2, false);
    traffic.pump_until("connection resets", consumed);
    faults.reset_connection(ANY_BROKER, ApiKey::Produce, 2, true);
    traffic.pump_until("mid-frame resets", consumed);
    traffic.wait_all_acked("after resets");

    faults.inject_error(ANY_BROKER, ApiKey::Produce, NOT_LEADER_OR_FOLLOWER, 3);
    faults.inject_error(ANY_BROKER, ApiKey::Produce, REQUEST_TIMED_OUT, 3);
    faults.inject_error(ANY_BROKER, ApiKey::Produce, NOT_ENOUGH_REPLICAS, 2);
    traffic.pump_until("injected retriable errors", consumed);
    traffic.wait_all_acked("after injected errors");

    faults.delay_response(1, ApiKey::Produce, 1, Duration::from_millis(2_500));
    traffic.pump_until("a delayed answer", consumed);
    traffic.wait_all_acked("after the delayed answer");

    // Leaders move while records are in flight.
    traffic.send(3_000);
    cluster.set_leader(TOPIC, 0, 2);
    cluster.set_leader(TOPIC, 4, 3);
    traffic.send(3_000);
    traffic.wait_all_acked("after leader moves");

    // An answer held past the client's timeout on broker 3 while its partitions move to
    // broker 1: the client's retry of the appended batch reaches the new leader, which holds
    // the same producer state (the model's state moves with leadership, as replicas build it
    // by replication) and answers it as a duplicate.
    let duplicates_before = cluster.with_cluster(|c| c.duplicates_answered());
    faults.delay_response(3, ApiKey::Produce, 1, Duration::from_millis(2_500));
    traffic.send(3_000);
    assert!(
        faults.wait_until_consumed(WAIT),
        "no produce request reached broker 3"
    );
    for partition in [2, 4, 5] {
        cluster.set_leader(TOPIC, partition, 1);
    }
    traffic.wait_all_acked("after moving broker 3's partitions away");
    let duplicates_after = cluster.with_cluster(|c| c.duplicates_answered());
    assert!(
        duplicates_after > duplicates_before,
        "the retry reached the new leader as a duplicate"
    );

    // Broker 2 (leader of partitions 0 and 1 now) goes down with requests in flight; the
    // other partitions carry on; then it comes back on the same port.
    traffic.send(3_000);
    cluster.broker_down(2);
    let led_by_2: HashSet<i32> = cluster.with_cluster(|c| {
        (0..PARTITIONS)
            .filter(|&p| c.leader(TOPIC, p).unwrap().0 == 2)
            .collect()
    });
    assert_eq!(led_by_2, HashSet::from([0, 1]));
    traffic.send(3_000);
    let others = (0..traffic.next_id)
        .filter(|id| !led_by_2.contains(&((id % PARTITIONS as u64) as i32)))
        .count();
    deliveries.wait_until("partitions on live brokers", WAIT, |s| {
        s.acked
            .iter()
            .filter(|id| !led_by_2.contains(&((**id % PARTITIONS as u64) as i32)))
            .count()
            >= others
    });
    cluster.broker_up(2);
    traffic.wait_all_acked("after broker 2 came back");

    traffic.send(2_000);
    producer.flush(WAIT).expect("flush");
    traffic.wait_all_acked("the last records");

    let acked = deliveries.snapshot().acked;
    let sent: Vec<u64> = (0..traffic.next_id).collect();
    assert_eq!(acked.len(), sent.len());
    let records = read_back(
        &cluster.bootstrap_servers(),
        TOPIC,
        PARTITIONS,
        Isolation::ReadUncommitted,
        WAIT,
    );
    let ids = payload_ids(&records);
    println!("{}", check_exactly_once(&ids, &acked, &sent));

    // The broker side of the same claim: per partition, offsets are contiguous and each batch
    // continues its producer's sequence (or starts a higher epoch at 0).
    let (duplicates, producer_ids) = cluster.with_cluster(|c| {
        for partition in 0..PARTITIONS {
            for pair in c.partition_log(TOPIC, partition).windows(2) {
                let (a, b) = (&pair[0], &pair[1]);
                assert_eq!(a.last_offset + 1, b.base_offset);
                assert!(
                    (a.producer_epoch == b.producer_epoch
                        && a.last_sequence + 1 == b.base_sequence)
                        || (b.producer_epoch > a.producer_epoch && b.base_sequence == 0),
                    "p{partition}: batch {:?} after {:?}",
                    (b.producer_epoch, b.base_sequence),
                    (a.producer_epoch, a.last_sequence)
                );
            }
        }
        (c.duplicates_answered(), c.producer_ids_issued())
    });
    let stats = cluster.stats();
    println!(
        "faults applied {}, produce requests {}, connections {}, duplicate batches answered {duplicates}, producer ids issued {producer_ids}",
        faults.applied(),
        stats.requests(ApiKey::Produce),
        stats.connections_accepted()
    );
    assert_eq!(stats.unsupported_closed(), 0);
    assert!(
        duplicates > 0,
        "the faults made librdkafka retry batches that had landed"
    );
}
