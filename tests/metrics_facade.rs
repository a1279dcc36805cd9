//! Shard 0 hands a snapshot to the `metrics` facade on its own, once a second, without any
//! `Producer::metrics` call: an exporter installed as the global recorder sees the counts.
//! (Its own test binary: the global recorder can be installed once per process.)
#![cfg(feature = "testkit")]

use std::time::{Duration, Instant};

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{Producer, ProducerRecord};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[test]
fn shard_zero_publishes_the_producers_totals_to_the_global_recorder_unasked() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only global recorder");

    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic("ticked", &[1, 1]);
    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("client.id", "ticking")
        .set("kacrab.shards", "2")
        .build()
        .expect("producer");
    let pending: Vec<_> = (0..20u8)
        .map(|i| {
            producer.send(
                ProducerRecord::new("ticked", Bytes::from(vec![i; 10]))
                    .with_partition(i32::from(i % 2)),
            )
        })
        .collect();
    for p in pending {
        p.wait().expect("a record");
    }

    // Both shards' records, summed by shard 0's periodic snapshot.
    let sent = |value: &DebugValue| *value == DebugValue::Counter(20);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    while Instant::now() < deadline {
        last = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .find(|(key, _, _, _)| {
                let key = key.key();
                key.name() == "record-send-total"
                    && key
                        .labels()
                        .any(|l| l.key() == "group" && l.value() == "producer-metrics")
                    && key
                        .labels()
                        .any(|l| l.key() == "client-id" && l.value() == "ticking")
            })
            .map(|(_, _, _, value)| value);
        if last.as_ref().is_some_and(sent) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(last.as_ref().is_some_and(sent), "last seen: {last:?}");
    producer.close(Duration::from_secs(5));
}
