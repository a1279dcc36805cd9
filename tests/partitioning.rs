//! Where records land, through the public API against the reference cluster over TCP: an
//! application's `Partitioner` decides (and its mistakes fail only the record they concern),
//! and the built-in partitioner's adaptive choice (KIP-794) moves keyless records away from a
//! broker that answers slowly and back once it recovers, or, with
//! `partitioner.availability.timeout.ms`, skips that broker's partitions altogether.
//!
//! The slowness is the fault plan's delay on one broker's Produce answers; the tests wait on
//! the partitioner's own published view (`testkit::partition_load`) and on the fault plan, never
//! on the clock, and count records per partition as the log holds them (read back with
//! librdkafka's consumer), each record's value saying which window it was sent in.
#![cfg(feature = "testkit")]

mod common;

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kacrab::partitioner::{Partitioner, Partitions};
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{DeliveryFuture, ProduceError, Producer, ProducerRecord};
use kafka_protocol::messages::ApiKey;

use common::bounded::within;
use common::{payload_ids, read_back, Isolation};

/// Bound on a whole test.
const TEST: Duration = Duration::from_secs(180);
/// Bound on a record's result and on each condition waited for.
const WAIT: Duration = Duration::from_secs(60);
/// Partitions of the adaptive tests' topic; broker 1 leads partition 0 only.
const PARTITIONS: i32 = 5;
const LEADERS: [i32; 5] = [1, 2, 3, 2, 3];
/// The slow broker, and the partition it leads.
const SLOW: i32 = 1;
const SLOW_PARTITION: usize = 0;
/// How long the slow broker holds its first Produce answer (and every request behind it on
/// the connection). Long against the windows, which only send: it must outlast them.
const SLOWNESS: Duration = Duration::from_secs(20);
/// Records per window. With `batch.size` 512 and records of about 110 bytes (as the
/// partitioner counts them, with a batch header), a thread switches partitions every 10
/// records: a window makes about 600 draws.
const WINDOW: u64 = 6000;
/// Records sent between two waits for the fast brokers: about 5 draws.
const RUN: u64 = 50;

fn cluster(topic: &str, leaders: &[i32]) -> ReferenceCluster {
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(topic, leaders);
    cluster
}

/// A record for `window`: its value is the id `window << 32 | seq`, then filler.
fn record(topic: &str, window: u64, seq: u64) -> ProducerRecord {
    let mut value = ((window << 32) | seq).to_be_bytes().to_vec();
    value.extend_from_slice(&[b'x'; 24]);
    ProducerRecord::new(topic, Bytes::from(value))
}

/// Records per partition of each window, as the log holds them.
fn counts_by_window(
    cluster: &ReferenceCluster,
    topic: &str,
    windows: usize,
) -> Vec<[u64; PARTITIONS as usize]> {
    let log = read_back(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        Isolation::ReadUncommitted,
        WAIT,
    );
    let mut counts = vec![[0u64; PARTITIONS as usize]; windows];
    for (partition, ids) in payload_ids(&log).iter().enumerate() {
        for id in ids {
            counts[(id >> 32) as usize][partition] += 1;
        }
    }
    counts
}

fn share(counts: &[u64; PARTITIONS as usize], partition: usize) -> f64 {
    counts[partition] as f64 / counts.iter().sum::<u64>() as f64
}

/// Waits until `condition` holds, checking it again every few milliseconds; panics with
/// `what` after `WAIT`.
fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "waited {WAIT:?} for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The slow partition as the partitioner sees it: (queue, available).
fn slow_partition(producer: &Producer, topic: &str) -> Option<(u32, bool)> {
    kacrab::testkit::partition_load(producer, topic).map(|load| load[SLOW_PARTITION])
}

/// Whether every partition but the slow one has sent all its batches (as last published):
/// the brokers that answer at once have kept up.
fn fast_partitions_idle(producer: &Producer, topic: &str) -> bool {
    kacrab::testkit::partition_load(producer, topic).is_none_or(|load| {
        load.iter()
            .enumerate()
            .all(|(p, &(queue, _))| p == SLOW_PARTITION || queue == 0)
    })
}

/// Sends records of `window` in runs of [`RUN`], each once the brokers that answer at once
/// have sent the last (a sender those brokers keep up with: otherwise every queue grows and
/// the slow one does not stand out), until `n` records were sent or `done` holds. Returns
/// their futures.
fn send_paced(
    producer: &Producer,
    topic: &str,
    window: u64,
    n: u64,
    what: &str,
    mut done: impl FnMut() -> bool,
) -> Vec<DeliveryFuture> {
    let mut futures = Vec::new();
    while (futures.len() as u64) < n && !done() {
        wait_for(what, || fast_partitions_idle(producer, topic));
        let seq = futures.len() as u64;
        let end = (seq + RUN).min(n);
        futures.extend((seq..end).map(|s| producer.send(record(topic, window, s))));
    }
    futures
}

/// Sends `window`'s [`WINDOW`] records, paced.
fn send_window(producer: &Producer, topic: &str, window: u64) -> Vec<DeliveryFuture> {
    send_paced(producer, topic, window, WINDOW, "the fast brokers", || {
        false
    })
}

/// Sends records of `window`, paced, until `condition` holds.
fn send_until(
    producer: &Producer,
    topic: &str,
    window: u64,
    what: &str,
    condition: impl FnMut() -> bool,
) -> Vec<DeliveryFuture> {
    let futures = send_paced(producer, topic, window, 1 << 20, what, condition);
    assert!(futures.len() < 1 << 20, "sent a million records: {what}");
    futures
}

fn adaptive_producer(cluster: &ReferenceCluster, extra: &[(&str, &str)]) -> Producer {
    let mut builder = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        // One shard: one connection per broker, so the slow broker's five requests in flight
        // are all its partition's batches can have.
        .set("kacrab.shards", "1")
        .set("linger.ms", "0")
        .set("batch.size", "512")
        .set("request.timeout.ms", "60000")
        .set("reconnect.backoff.max.ms", "200");
    for (key, value) in extra {
        builder = builder.set(key, *value);
    }
    builder.build().expect("producer")
}

fn wait_all(futures: Vec<DeliveryFuture>) {
    for future in futures {
        future
            .wait_timeout(WAIT)
            .expect("a result in time")
            .expect("delivered");
    }
}

#[test]
fn keyless_records_move_away_from_a_slow_broker_and_back_when_it_recovers() {
    within(TEST, || {
        let topic = "adaptive-slow";
        let cluster = cluster(topic, &LEADERS);
        let producer = adaptive_producer(&cluster, &[]);
        let mut futures = Vec::new();

        // Window 0, every broker answering at once: the draw is about uniform, so the slow
        // broker's partition gets about a fifth.
        futures.extend(send_window(&producer, topic, 0));
        producer.flush();

        // Broker 1 holds its next Produce answer, and the four requests queued behind it:
        // its partition's later batches wait in its queue. Records go on being sent (window
        // 1) until that queue is 8 batches long.
        cluster
            .faults()
            .delay_response(SLOW, ApiKey::Produce, 1, SLOWNESS);
        futures.extend(send_until(&producer, topic, 1, "the slow queue", || {
            slow_partition(&producer, topic).is_some_and(|(queue, _)| queue >= 8)
        }));

        // Window 2, broker 1 still slow: the others' queues are empty at each run's start, so
        // with the slow queue `q` (at least 8) the longest, the slow partition weighs 1
        // against `q + 1` for each other: at most 1 draw in 37 (under 3%). Within a run the
        // others' queues may hold a batch or two, which only moves that towards 1 in 29.
        futures.extend(send_window(&producer, topic, 2));
        // The queue only shortens once the delay ends: still 8 long, the whole window was
        // sent while broker 1 was slow.
        assert!(
            slow_partition(&producer, topic).is_some_and(|(queue, _)| queue >= 8),
            "the slowness ended before window 2 did: the windows must fit in {SLOWNESS:?}"
        );

        // Broker 1 recovers: its answers come, its queue drains, and window 3 is uniform again.
        wait_for("the slow queue to drain", || {
            slow_partition(&producer, topic) == Some((0, true))
        });
        futures.extend(send_window(&producer, topic, 3));
        wait_all(futures);

        let counts = counts_by_window(&cluster, topic, 4);
        eprintln!("records per partition, by window: {counts:?}");
        let (before, during, after) = (
            share(&counts[0], SLOW_PARTITION),
            share(&counts[2], SLOW_PARTITION),
            share(&counts[3], SLOW_PARTITION),
        );
        // A fifth is expected before and after; about 120 draws of 600 land there, with a
        // standard deviation of about 10 draws (1.6% of the window): 12% is 5 deviations
        // below. During, under 3.5% is expected (about 20 draws, deviation 4.5): 10% (60
        // draws) is 9 deviations above.
        assert!(before > 0.12, "before: {before:.3} {:?}", counts[0]);
        assert!(during < 0.10, "during: {during:.3} {:?}", counts[2]);
        assert!(after > 0.12, "after: {after:.3} {:?}", counts[3]);
        // Every record sent is in the log, once.
        for (window, n) in [(0, WINDOW), (2, WINDOW), (3, WINDOW)] {
            assert_eq!(counts[window].iter().sum::<u64>(), n, "window {window}");
        }
    });
}

#[test]
fn with_an_availability_timeout_a_broker_that_does_not_drain_is_skipped() {
    within(TEST, || {
        let topic = "adaptive-unavailable";
        let cluster = cluster(topic, &LEADERS);
        let producer =
            adaptive_producer(&cluster, &[("partitioner.availability.timeout.ms", "200")]);
        let mut futures = Vec::new();
        futures.extend(send_window(&producer, topic, 0));
        producer.flush();

        // Broker 1 stops answering: once its partition has had a batch ready and not drained
        // for 200 ms (five requests in flight, the most a connection may have), the
        // partitioner no longer draws it.
        cluster
            .faults()
            .delay_response(SLOW, ApiKey::Produce, 1, SLOWNESS);
        futures.extend(send_until(
            &producer,
            topic,
            1,
            "the slow partition to go",
            || slow_partition(&producer, topic).is_some_and(|(_, available)| !available),
        ));
        futures.extend(send_window(&producer, topic, 2));
        // Only a drain makes it available again, and none happens while broker 1 is slow.
        assert!(
            slow_partition(&producer, topic).is_some_and(|(_, available)| !available),
            "the slowness ended before window 2 did: the windows must fit in {SLOWNESS:?}"
        );

        // Back, and its backlog sent: window 3 is drawn as window 0 was, not weighted against
        // what window 1 left queued.
        wait_for("the slow partition to come back", || {
            slow_partition(&producer, topic) == Some((0, true))
        });
        futures.extend(send_window(&producer, topic, 3));
        wait_all(futures);

        let counts = counts_by_window(&cluster, topic, 4);
        eprintln!("records per partition, by window: {counts:?}");
        assert!(share(&counts[0], SLOW_PARTITION) > 0.12, "{:?}", counts[0]);
        // Skipped outright while unavailable: not one draw.
        assert_eq!(counts[2][SLOW_PARTITION], 0, "{:?}", counts[2]);
        assert_eq!(counts[2].iter().sum::<u64>(), WINDOW);
        assert!(share(&counts[3], SLOW_PARTITION) > 0.12, "{:?}", counts[3]);
    });
}

/// Sends a record keyed `k<n>` to partition `n % count`, and remembers the count it was
/// shown.
struct ByKeyNumber {
    seen_count: Arc<AtomicI32>,
}

impl Partitioner for ByKeyNumber {
    fn partition(
        &self,
        _topic: &str,
        key: Option<&[u8]>,
        _value: Option<&[u8]>,
        partitions: &Partitions<'_>,
    ) -> i32 {
        self.seen_count.store(partitions.count(), Ordering::Relaxed);
        let key = std::str::from_utf8(key.expect("keyed")).expect("utf-8");
        match key {
            "out-of-range" => partitions.count(),
            "negative" => -1,
            "panic" => panic!("the partitioner refuses this key"),
            _ => key[1..].parse::<i32>().expect("k<n>") % partitions.count(),
        }
    }
}

#[test]
fn a_custom_partitioner_places_records_and_its_errors_fail_only_their_record() {
    within(TEST, || {
        let topic = "custom-partitioner";
        let cluster = cluster(topic, &LEADERS);
        let seen_count = Arc::new(AtomicI32::new(0));
        let producer = Producer::builder()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("kacrab.shards", "2")
            .set("linger.ms", "1")
            .partitioner(ByKeyNumber {
                seen_count: seen_count.clone(),
            })
            .build()
            .expect("producer");
        let keyed = |key: &str, seq: u64| record(topic, 0, seq).with_key(key.to_string());
        let mut futures = Vec::new();
        for n in 0..50u64 {
            futures.push((n, producer.send(keyed(&format!("k{n}"), n))));
            if n == 10 {
                let bad = producer.send(keyed("out-of-range", 1000)).wait();
                assert!(
                    matches!(
                        bad,
                        Err(ProduceError::InvalidPartition {
                            partition: 5,
                            partition_count: 5,
                            ..
                        })
                    ),
                    "{bad:?}"
                );
                let bad = producer.send(keyed("negative", 1001)).wait();
                assert!(
                    matches!(
                        bad,
                        Err(ProduceError::InvalidPartition { partition: -1, .. })
                    ),
                    "{bad:?}"
                );
                let bad = producer.send(keyed("panic", 1002)).wait();
                match bad {
                    Err(ProduceError::PartitionerPanicked { topic: t, message }) => {
                        assert_eq!(&*t, topic);
                        assert!(message.contains("refuses this key"), "{message}");
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        assert_eq!(seen_count.load(Ordering::Relaxed), PARTITIONS);
        for (n, future) in futures {
            let metadata = future.wait_timeout(WAIT).expect("in time").expect("sent");
            assert_eq!(metadata.partition, (n % 5) as i32, "record {n}");
        }
        // The log holds every good record where the partitioner put it, and none of the bad.
        let log = read_back(
            &cluster.bootstrap_servers(),
            topic,
            PARTITIONS,
            Isolation::ReadUncommitted,
            WAIT,
        );
        for (partition, ids) in payload_ids(&log).iter().enumerate() {
            let expected: Vec<u64> = (0..50).filter(|n| n % 5 == partition as u64).collect();
            assert_eq!(ids, &expected, "partition {partition}");
        }
        // An explicit partition is the record's own: the partitioner is not asked.
        let explicit = producer
            .send(record(topic, 0, 2000).with_partition(4).with_key("panic"))
            .wait()
            .expect("sent");
        assert_eq!(explicit.partition, 4);
    });
}

#[test]
fn ignore_keys_spreads_keyed_records_as_keyless_ones() {
    within(TEST, || {
        let topic = "ignore-keys";
        let cluster = cluster(topic, &LEADERS);
        let producer = Producer::builder()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("kacrab.shards", "1")
            .set("batch.size", "256")
            .set("partitioner.ignore.keys", "true")
            .build()
            .expect("producer");
        // One key for every record: hashed, all would go to one partition.
        let futures: Vec<_> = (0..500)
            .map(|seq| producer.send(record(topic, 0, seq).with_key("same-key")))
            .collect();
        wait_all(futures);
        let counts = counts_by_window(&cluster, topic, 1);
        let used = counts[0].iter().filter(|&&n| n > 0).count();
        // About 100 sticky draws over 5 partitions: every one is used (a partition left out
        // has a chance of (4/5)^100 ≈ 2e-10).
        assert_eq!(used, PARTITIONS as usize, "{:?}", counts[0]);
    });
}
