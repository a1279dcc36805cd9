//! The batch send's contract, through the public API against the reference cluster over TCP:
//! `Producer::send_batch` gives one handle that yields every record's result in the order the
//! records were given, awaited or waited on; `send_batch_with_callback` runs its callback once
//! with all of them. A record that cannot be sent fails alone, in its place. Where a test says
//! records landed, it reads the topic back with librdkafka's consumer and checks the log
//! record by record.
#![cfg(feature = "testkit")]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use kacrab::partitioner::partition_for_key;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{ProduceError, Producer, ProducerRecord, RecordMetadata};
use kafka_protocol::messages::ApiKey;

use common::bounded::{block_on_timeout, within};
use common::{check_acked_offsets, payload_ids, read_back, Isolation};

const PARTITIONS: i32 = 3;
/// Bound on one batch's results.
const WAIT: Duration = Duration::from_secs(30);
/// Bound on a whole test.
const TEST: Duration = Duration::from_secs(120);
/// `max.request.size` of the tests that send a record too large.
const MAX_REQUEST: usize = 4096;

type Outcome = Result<RecordMetadata, ProduceError>;

fn start_cluster(topics: &[(&str, i32)]) -> ReferenceCluster {
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    for (topic, partitions) in topics {
        let leaders: Vec<i32> = (0..*partitions).map(|p| 1 + p % 3).collect();
        cluster.create_topic(topic, &leaders);
    }
    cluster
}

fn producer(cluster: &ReferenceCluster, extra: &[(&str, &str)]) -> Producer {
    common::kacrab_producer(&cluster.bootstrap_servers(), extra)
}

/// Record `id` for `topic`'s `partition`: its value is the id (8 bytes, big-endian), then
/// 8 bytes of filler.
fn record(topic: &str, partition: i32, id: u64) -> ProducerRecord {
    let mut value = id.to_be_bytes().to_vec();
    value.extend_from_slice(b"-batch--");
    ProducerRecord::new(topic, Bytes::from(value)).with_partition(partition)
}

/// Record `id` with a value of `bytes` bytes, more than `MAX_REQUEST`.
fn too_large(topic: &str, partition: i32, id: u64, bytes: usize) -> ProducerRecord {
    let mut value = id.to_be_bytes().to_vec();
    value.resize(bytes, b'L');
    ProducerRecord::new(topic, Bytes::from(value)).with_partition(partition)
}

/// The ids of `topic`'s partitions as librdkafka reads them, in log order; and the log's
/// records for [`check_acked_offsets`].
fn read_ids(
    cluster: &ReferenceCluster,
    topic: &str,
    partitions: i32,
) -> (Vec<Vec<u64>>, Vec<Vec<common::ReadRecord>>) {
    let log = read_back(
        &cluster.bootstrap_servers(),
        topic,
        partitions,
        Isolation::ReadUncommitted,
        Duration::from_secs(30),
    );
    (payload_ids(&log), log)
}

/// `ids` grouped by the partition `partition_of` gives each, keeping their order.
fn by_partition(
    ids: impl IntoIterator<Item = u64>,
    partitions: i32,
    partition_of: impl Fn(u64) -> i32,
) -> Vec<Vec<u64>> {
    let mut out = vec![Vec::new(); partitions as usize];
    for id in ids {
        out[partition_of(id) as usize].push(id);
    }
    out
}

/// librdkafka reads back `topic` with exactly `ids`, each on the partition `partition_of`
/// gives, in the order given, and each at the offset it was acknowledged at (`acked_at`).
fn assert_log_holds(
    cluster: &ReferenceCluster,
    topic: &str,
    ids: impl IntoIterator<Item = u64>,
    partition_of: impl Fn(u64) -> i32,
    acked_at: &[(u64, i32, i64)],
) {
    let (log_ids, log) = read_ids(cluster, topic, PARTITIONS);
    assert_eq!(log_ids, by_partition(ids, PARTITIONS, partition_of));
    check_acked_offsets(&log, acked_at);
}

/// Checks that `results` are the acknowledgements of `ids` in the given order: each on the
/// partition `partition_of` names; returns `(id, partition, offset)` for each.
fn acknowledged(
    results: &[Outcome],
    ids: &[u64],
    topic: &str,
    partition_of: impl Fn(u64) -> i32,
) -> Vec<(u64, i32, i64)> {
    assert_eq!(results.len(), ids.len(), "one result a record");
    ids.iter()
        .zip(results)
        .map(|(&id, result)| {
            let meta = result
                .as_ref()
                .unwrap_or_else(|e| panic!("record {id} failed: {e}"));
            assert_eq!(&*meta.topic, topic, "record {id}: topic");
            assert_eq!(meta.partition, partition_of(id), "record {id}: partition");
            (id, meta.partition, meta.offset)
        })
        .collect()
}

/// Waits for a batch's results, failing the test after `WAIT`.
fn results_of(batch: kacrab::BatchDelivery) -> Vec<Outcome> {
    block_on_timeout(batch, WAIT).expect("the batch resolves")
}

// Records to three partitions of one topic and two of another, interleaved, some placed by
// their key: the results come back in the order given, each on its record's partition, and
// each partition's offsets ascend in that order from 0 (the producer is the topic's only
// writer). The log holds each partition's records in the order given, at those offsets.
#[test]
fn send_batch_gives_every_result_in_the_order_given_with_offsets_ascending_per_partition() {
    within(TEST, || {
        const A: &str = "batch-order-a";
        const B: &str = "batch-order-b";
        let cluster = start_cluster(&[(A, PARTITIONS), (B, 2)]);
        let producer = producer(&cluster, &[]);
        let count = 600u64;
        // Every 7th record goes to B; every 5th is keyed (the partitioner places it); the
        // rest name a partition in a pattern of runs and jumps.
        let topic_of = |id: u64| if id % 7 == 3 { B } else { A };
        let partition_of = |id: u64| {
            let partitions = if topic_of(id) == B { 2 } else { PARTITIONS };
            if id % 5 == 4 {
                partition_for_key(&id.to_be_bytes(), partitions)
            } else {
                ((id / 3 + id % 2) % partitions as u64) as i32
            }
        };
        let records: Vec<ProducerRecord> = (0..count)
            .map(|id| {
                let topic = topic_of(id);
                let mut record = record(topic, partition_of(id), id);
                if id % 5 == 4 {
                    record.partition = None;
                    record = record.with_key(Bytes::copy_from_slice(&id.to_be_bytes()));
                }
                record
            })
            .collect();
        let batch = producer.send_batch(records);
        assert_eq!(batch.len(), count as usize);
        assert!(!batch.is_empty());
        let results = results_of(batch);
        assert_eq!(results.len(), count as usize, "one result a record");

        for topic in [A, B] {
            let partitions = if topic == B { 2 } else { PARTITIONS };
            let ids: Vec<u64> = (0..count).filter(|&id| topic_of(id) == topic).collect();
            let topic_results: Vec<Outcome> =
                ids.iter().map(|&id| results[id as usize].clone()).collect();
            let acked_at = acknowledged(&topic_results, &ids, topic, partition_of);
            let given = by_partition(ids.iter().copied(), partitions, partition_of);
            for (partition, given) in given.iter().enumerate() {
                let offsets: Vec<i64> = acked_at
                    .iter()
                    .filter(|(_, p, _)| *p == partition as i32)
                    .map(|(_, _, offset)| *offset)
                    .collect();
                assert_eq!(
                    offsets,
                    (0..given.len() as i64).collect::<Vec<_>>(),
                    "{topic}-{partition}: offsets ascend in the order given"
                );
            }
            let (log_ids, log) = read_ids(&cluster, topic, partitions);
            assert_eq!(
                log_ids, given,
                "{topic}: each partition holds its records once, in the order given"
            );
            check_acked_offsets(&log, &acked_at);
        }
        producer.close(Duration::from_secs(10));
    });
}

// A record larger than max.request.size in the middle of a batch fails alone, in its place,
// with RecordTooLarge; the records before and after it are acknowledged and in the log, in
// the order given, and it is not.
#[test]
fn a_record_too_large_in_the_middle_of_a_batch_fails_alone_and_the_others_land() {
    within(TEST, || {
        const TOPIC: &str = "batch-too-large";
        let cluster = start_cluster(&[(TOPIC, PARTITIONS)]);
        let max = MAX_REQUEST.to_string();
        let producer = producer(&cluster, &[("max.request.size", &max)]);
        let partition_of = |id: u64| (id % PARTITIONS as u64) as i32;
        let large = 10u64;
        let records: Vec<ProducerRecord> = (0..21)
            .map(|id| {
                if id == large {
                    too_large(TOPIC, partition_of(id), id, 2 * MAX_REQUEST)
                } else {
                    record(TOPIC, partition_of(id), id)
                }
            })
            .collect();
        let mut results = results_of(producer.send_batch(records));
        assert_eq!(results.len(), 21);
        match results.remove(large as usize) {
            Err(ProduceError::RecordTooLarge { size, limit, key }) => {
                assert_eq!((limit, key), (MAX_REQUEST, "max.request.size"));
                assert!(size > MAX_REQUEST, "size {size}");
            }
            other => panic!("record {large}: expected RecordTooLarge, got {other:?}"),
        }
        let landed: Vec<u64> = (0..21).filter(|&id| id != large).collect();
        let acked_at = acknowledged(&results, &landed, TOPIC, partition_of);
        assert_log_holds(&cluster, TOPIC, landed, partition_of, &acked_at);
        producer.close(Duration::from_secs(10));
    });
}

// Records naming a partition the topic does not have (its count, -1, far beyond) fail alone,
// in their places, with InvalidPartition; the others are acknowledged and in the log.
#[test]
fn an_invalid_explicit_partition_in_a_batch_fails_alone_and_the_others_land() {
    within(TEST, || {
        const TOPIC: &str = "batch-invalid-partition";
        let cluster = start_cluster(&[(TOPIC, PARTITIONS)]);
        let producer = producer(&cluster, &[]);
        let invalid = [(3u64, PARTITIONS), (11, -1), (19, 1000)];
        let partition_of = |id: u64| {
            invalid
                .iter()
                .find(|(i, _)| *i == id)
                .map_or((id % PARTITIONS as u64) as i32, |(_, p)| *p)
        };
        let records: Vec<ProducerRecord> = (0..20)
            .map(|id| record(TOPIC, partition_of(id), id))
            .collect();
        let results = results_of(producer.send_batch(records));
        assert_eq!(results.len(), 20);
        for (id, partition) in invalid {
            match &results[id as usize] {
                Err(ProduceError::InvalidPartition {
                    topic,
                    partition: refused,
                    partition_count,
                }) => {
                    assert_eq!(
                        (&**topic, *refused, *partition_count),
                        (TOPIC, partition, PARTITIONS)
                    );
                }
                other => panic!("record {id}: expected InvalidPartition, got {other:?}"),
            }
        }
        let landed: Vec<u64> = (0..20)
            .filter(|id| invalid.iter().all(|(i, _)| i != id))
            .collect();
        let landed_results: Vec<Outcome> = landed
            .iter()
            .map(|&id| results[id as usize].clone())
            .collect();
        let acked_at = acknowledged(&landed_results, &landed, TOPIC, partition_of);
        assert_log_holds(&cluster, TOPIC, landed, partition_of, &acked_at);
        producer.close(Duration::from_secs(10));
    });
}

// An empty batch is resolved as soon as it is made: its handle is empty, its results are
// known without waiting, it is ready at its first poll, and `wait` returns no results; the
// callback form runs its callback once, with no results, on the calling thread before the
// call returns.
#[test]
fn an_empty_batch_resolves_at_once_to_no_results_in_both_forms() {
    within(TEST, || {
        const TOPIC: &str = "batch-empty";
        let cluster = start_cluster(&[(TOPIC, PARTITIONS)]);
        let producer = producer(&cluster, &[]);

        let batch = producer.send_batch(Vec::new());
        assert!(batch.is_empty());
        assert_eq!(batch.len(), 0);
        assert_eq!(batch.try_results(), Some(Vec::new()));
        assert_eq!(
            producer.send_batch(std::iter::empty()).now_or_never(),
            Some(Vec::new()),
            "ready at the first poll"
        );
        assert_eq!(
            producer.send_batch(Vec::new()).wait(),
            Vec::<Outcome>::new()
        );

        let calls = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        let counted = calls.clone();
        producer.send_batch_with_callback(Vec::new(), move |results: Vec<Outcome>| {
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send((thread::current().id(), results.len()));
        });
        assert_eq!(
            rx.try_recv(),
            Ok((thread::current().id(), 0)),
            "the callback ran on the calling thread, with no results, before the call returned"
        );
        producer.close(Duration::from_secs(10));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the callback ran once");
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Disconnected));
    });
}

// The callback form runs its callback exactly once, with every record's result in the order
// given: acknowledgements on their partitions at ascending offsets, and in their places the
// records that failed alone (too large, an invalid partition). The callback is released once
// it ran. The acknowledged records are in the log.
#[test]
fn the_callback_form_runs_once_with_every_result_in_the_order_given() {
    within(TEST, || {
        const TOPIC: &str = "batch-callback";
        let cluster = start_cluster(&[(TOPIC, PARTITIONS)]);
        let max = MAX_REQUEST.to_string();
        let producer = producer(&cluster, &[("max.request.size", &max)]);
        let (large, invalid) = (20u64, 40u64);
        let partition_of = |id: u64| {
            if id == invalid {
                7
            } else {
                ((id / 4) % PARTITIONS as u64) as i32
            }
        };
        let count = 90u64;
        let records: Vec<ProducerRecord> = (0..count)
            .map(|id| {
                if id == large {
                    too_large(TOPIC, partition_of(id), id, 3 * MAX_REQUEST)
                } else {
                    record(TOPIC, partition_of(id), id)
                }
            })
            .collect();
        let calls = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        let counted = calls.clone();
        producer.send_batch_with_callback(records, move |results: Vec<Outcome>| {
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(results);
        });
        let results = rx.recv_timeout(WAIT).expect("the callback runs");
        assert_eq!(results.len(), count as usize, "every record's result");
        assert!(
            matches!(
                results[invalid as usize],
                Err(ProduceError::InvalidPartition { partition: 7, .. })
            ),
            "record {invalid}: {:?}",
            results[invalid as usize]
        );
        assert!(
            matches!(
                results[large as usize],
                Err(ProduceError::RecordTooLarge {
                    key: "max.request.size",
                    ..
                })
            ),
            "record {large}: {:?}",
            results[large as usize]
        );
        let results: Vec<Outcome> = results
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i as u64 != large && *i as u64 != invalid)
            .map(|(_, result)| result)
            .collect();
        let landed: Vec<u64> = (0..count)
            .filter(|&id| id != large && id != invalid)
            .collect();
        let acked_at = acknowledged(&results, &landed, TOPIC, partition_of);
        let given = by_partition(landed.iter().copied(), PARTITIONS, partition_of);
        for (partition, given) in given.iter().enumerate() {
            let offsets: Vec<i64> = acked_at
                .iter()
                .filter(|(_, p, _)| *p == partition as i32)
                .map(|(_, _, offset)| *offset)
                .collect();
            assert_eq!(offsets, (0..given.len() as i64).collect::<Vec<_>>());
        }
        let (log_ids, log) = read_ids(&cluster, TOPIC, PARTITIONS);
        assert_eq!(log_ids, given);
        check_acked_offsets(&log, &acked_at);

        producer.close(Duration::from_secs(10));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the callback ran once");
        assert_eq!(
            rx.try_recv(),
            Err(mpsc::TryRecvError::Disconnected),
            "the callback was released after it ran"
        );
    });
}

// A batch sent after `close` fails every record with Closed, at once: the handle's results
// are known without waiting, and the callback form runs its callback on the calling thread
// before the call returns. Nothing of either batch is in the log: only the records sent
// before the close.
#[test]
fn a_batch_sent_after_close_fails_every_record_closed_in_both_forms() {
    within(TEST, || {
        const TOPIC: &str = "batch-after-close";
        let cluster = start_cluster(&[(TOPIC, PARTITIONS)]);
        let producer = producer(&cluster, &[]);
        let partition_of = |id: u64| (id % PARTITIONS as u64) as i32;
        let before: Vec<u64> = (0..6).collect();
        let results = results_of(
            producer.send_batch(before.iter().map(|&id| record(TOPIC, partition_of(id), id))),
        );
        let acked_at = acknowledged(&results, &before, TOPIC, partition_of);
        producer.close(Duration::from_secs(10));

        let batch = producer.send_batch((100..105).map(|id| record(TOPIC, partition_of(id), id)));
        assert_eq!(batch.len(), 5);
        let known = batch.try_results().expect("the results are known at once");
        assert_eq!(known, vec![Err(ProduceError::Closed); 5]);
        assert_eq!(batch.wait(), vec![Err(ProduceError::Closed); 5]);

        let (tx, rx) = mpsc::channel();
        producer.send_batch_with_callback(
            (200..205).map(|id| record(TOPIC, partition_of(id), id)),
            move |results: Vec<Outcome>| {
                let _ = tx.send((thread::current().id(), results));
            },
        );
        assert_eq!(
            rx.try_recv(),
            Ok((thread::current().id(), vec![Err(ProduceError::Closed); 5])),
            "the callback ran on the calling thread, before the call returned"
        );

        assert_log_holds(&cluster, TOPIC, before, partition_of, &acked_at);
    });
}

/// A batch of `ids` in which `large` is too large for `MAX_REQUEST`.
fn batch_records(topic: &str, ids: std::ops::Range<u64>, large: u64) -> Vec<ProducerRecord> {
    ids.map(|id| {
        let partition = (id % PARTITIONS as u64) as i32;
        if id == large {
            too_large(topic, partition, id, 2 * MAX_REQUEST)
        } else {
            record(topic, partition, id)
        }
    })
    .collect()
}

// The handle awaited in a tokio task (under tokio's timer), driven by futures-lite's
// `block_on`, and waited on with `wait` gives the same thing each time: every result in the
// order given, the one record too large failed in its place. Every other record is in the log.
#[test]
fn a_batch_awaited_on_tokio_or_futures_lite_gives_what_wait_gives() {
    within(TEST, || {
        const TOPIC: &str = "batch-async";
        let cluster = start_cluster(&[(TOPIC, PARTITIONS)]);
        let max = MAX_REQUEST.to_string();
        let producer = producer(&cluster, &[("max.request.size", &max)]);
        let partition_of = |id: u64| (id % PARTITIONS as u64) as i32;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let on_tokio = {
            let producer = producer.clone();
            runtime
                .block_on(async move {
                    tokio::spawn(async move {
                        let batch = producer.send_batch(batch_records(TOPIC, 0..100, 37));
                        tokio::time::timeout(WAIT, batch).await
                    })
                    .await
                })
                .expect("the task")
                .expect("the batch resolves on tokio")
        };
        let on_futures_lite = futures_lite::future::block_on(producer.send_batch(batch_records(
            TOPIC,
            100..200,
            137,
        )));
        let waited = producer
            .send_batch(batch_records(TOPIC, 200..300, 237))
            .wait();

        let mut acked_at = Vec::new();
        let mut landed = Vec::new();
        for (how, from, mut results) in [
            ("tokio", 0, on_tokio),
            ("futures-lite", 100, on_futures_lite),
            ("wait", 200, waited),
        ] {
            assert_eq!(results.len(), 100, "{how}: one result a record");
            let large = from + 37;
            assert!(
                matches!(
                    results.remove(37),
                    Err(ProduceError::RecordTooLarge {
                        key: "max.request.size",
                        ..
                    })
                ),
                "{how}: record {large} failed in its place"
            );
            let ids: Vec<u64> = (from..from + 100).filter(|&id| id != large).collect();
            acked_at.extend(acknowledged(&results, &ids, TOPIC, partition_of));
            landed.extend(ids);
        }
        assert_log_holds(&cluster, TOPIC, landed, partition_of, &acked_at);
        producer.close(Duration::from_secs(10));
    });
}

/// A waker that reports each wake on a channel.
struct Reports(mpsc::SyncSender<()>);

impl Wake for Reports {
    fn wake(self: Arc<Self>) {
        let _ = self.0.try_send(());
    }
}

// A handle polled while its records still wait in their open batches (a long linger) is
// pending; the waker of that poll is called once results arrive (here, when a flush from
// another thread sends them), and the handle then resolves to every result.
#[test]
fn a_pending_batch_is_woken_when_its_records_complete() {
    within(TEST, || {
        const TOPIC: &str = "batch-wake";
        let cluster = start_cluster(&[(TOPIC, PARTITIONS)]);
        let producer = producer(
            &cluster,
            &[("linger.ms", "60000"), ("batch.size", "1048576")],
        );
        let partition_of = |id: u64| (id % PARTITIONS as u64) as i32;
        let ids: Vec<u64> = (0..30).collect();
        let mut batch = Box::pin(
            producer.send_batch(ids.iter().map(|&id| record(TOPIC, partition_of(id), id))),
        );
        let (woken_tx, woken) = mpsc::sync_channel(1);
        let waker = Waker::from(Arc::new(Reports(woken_tx)));
        assert!(
            batch
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending(),
            "the records linger in their open batches"
        );
        let flusher = {
            let producer = producer.clone();
            thread::spawn(move || producer.flush_timeout(WAIT))
        };
        woken
            .recv_timeout(WAIT)
            .expect("the pending poll's waker is called when results arrive");
        let results = block_on_timeout(batch, WAIT).expect("the batch resolves");
        assert!(flusher.join().expect("the flusher"), "the flush completed");
        let acked_at = acknowledged(&results, &ids, TOPIC, partition_of);
        assert_log_holds(&cluster, TOPIC, ids, partition_of, &acked_at);
        producer.close(Duration::from_secs(10));
    });
}

// A handle polled once, when only its first record's result (a record too large, failed at
// once) was known, and then waited on with `wait`, still gives every result in the order
// given, the first included.
#[test]
fn wait_after_a_poll_that_read_some_results_still_gives_every_result_in_order() {
    within(TEST, || {
        const TOPIC: &str = "batch-poll-then-wait";
        let cluster = start_cluster(&[(TOPIC, PARTITIONS)]);
        let max = MAX_REQUEST.to_string();
        let producer = producer(
            &cluster,
            &[
                ("linger.ms", "60000"),
                ("batch.size", "1048576"),
                ("max.request.size", &max),
            ],
        );
        let partition_of = |id: u64| (id % PARTITIONS as u64) as i32;
        let mut batch = producer.send_batch(batch_records(TOPIC, 0..31, 0));
        let waker = Waker::from(Arc::new(Reports(mpsc::sync_channel(1).0)));
        assert!(
            Pin::new(&mut batch)
                .poll(&mut Context::from_waker(&waker))
                .is_pending(),
            "the records after the first linger in their open batches"
        );
        assert!(producer.flush_timeout(WAIT), "the flush completed");
        let mut results = batch.wait();
        assert_eq!(
            results.len(),
            31,
            "every result, the one read by the poll too"
        );
        assert!(
            matches!(
                results.remove(0),
                Err(ProduceError::RecordTooLarge {
                    key: "max.request.size",
                    ..
                })
            ),
            "record 0 failed in its place"
        );
        let ids: Vec<u64> = (1..31).collect();
        let acked_at = acknowledged(&results, &ids, TOPIC, partition_of);
        assert_log_holds(&cluster, TOPIC, ids, partition_of, &acked_at);
        producer.close(Duration::from_secs(10));
    });
}

// A handle dropped without being read does not take its records back: a flush completes them
// and they are all in the log, in the order given.
#[test]
fn a_batch_dropped_unread_still_delivers_its_records() {
    within(TEST, || {
        const TOPIC: &str = "batch-dropped";
        let cluster = start_cluster(&[(TOPIC, PARTITIONS)]);
        let producer = producer(&cluster, &[]);
        let partition_of = |id: u64| (id % PARTITIONS as u64) as i32;
        let ids: Vec<u64> = (0..50).collect();
        drop(producer.send_batch(ids.iter().map(|&id| record(TOPIC, partition_of(id), id))));
        assert!(producer.flush_timeout(WAIT), "the flush completed");
        let (log_ids, _) = read_ids(&cluster, TOPIC, PARTITIONS);
        assert_eq!(log_ids, by_partition(ids, PARTITIONS, partition_of));
        producer.close(Duration::from_secs(10));
    });
}

// One thread alternating every way of sending (a batch, a record, a batch with a callback, a
// record with a callback, `send_async`, a batch again) to the same partitions: each partition
// holds the records in the order of the calls, each once, at its acknowledged offset.
#[test]
fn batches_and_single_sends_from_one_thread_land_in_call_order_per_partition() {
    within(TEST, || {
        const TOPIC: &str = "batch-call-order";
        let cluster = start_cluster(&[(TOPIC, PARTITIONS)]);
        let producer = producer(&cluster, &[]);
        let partition_of = |id: u64| ((id / 2) % PARTITIONS as u64) as i32;
        let make = |id: u64| record(TOPIC, partition_of(id), id);
        let (tx, rx) = mpsc::channel::<(Vec<u64>, Vec<Outcome>)>();
        let mut batches = Vec::new();
        let mut singles = Vec::new();
        let mut callbacks = 0;
        let mut next = 0u64;
        for round in 0..12u64 {
            let n = 1 + (round * 13) % 40;
            let ids: Vec<u64> = (next..next + n).collect();
            next += n;
            match round % 5 {
                0 => batches.push((ids.clone(), producer.send_batch(ids.into_iter().map(make)))),
                1 => {
                    for id in ids {
                        singles.push((id, producer.send(make(id))));
                    }
                }
                2 => {
                    let tx = tx.clone();
                    let records: Vec<_> = ids.iter().copied().map(make).collect();
                    producer.send_batch_with_callback(records, move |results| {
                        let _ = tx.send((ids, results));
                    });
                    callbacks += 1;
                }
                3 => {
                    for id in ids {
                        let tx = tx.clone();
                        producer.send_with_callback(make(id), move |result| {
                            let _ = tx.send((vec![id], vec![result]));
                        });
                        callbacks += 1;
                    }
                }
                _ => {
                    for id in ids {
                        let future = futures_lite::future::block_on(producer.send_async(make(id)));
                        singles.push((id, future));
                    }
                }
            }
        }
        drop(tx);
        let mut acked_at = Vec::new();
        for (ids, batch) in batches {
            acked_at.extend(acknowledged(&results_of(batch), &ids, TOPIC, partition_of));
        }
        for (id, future) in singles {
            let result = future.wait_timeout(WAIT).expect("the record resolves");
            acked_at.extend(acknowledged(&[result], &[id], TOPIC, partition_of));
        }
        for _ in 0..callbacks {
            let (ids, results) = rx.recv_timeout(WAIT).expect("the callback runs");
            acked_at.extend(acknowledged(&results, &ids, TOPIC, partition_of));
        }
        assert_eq!(acked_at.len() as u64, next, "every record acknowledged");
        assert_log_holds(&cluster, TOPIC, 0..next, partition_of, &acked_at);
        producer.close(Duration::from_secs(10));
    });
}

// A batch whose records need several times `buffer.memory` goes in record by record as room
// frees (each record waits for room as `send` would, within `max.block.ms`): every record is
// acknowledged and in the log, in the order given. Each broker holds its first Produce answer
// (and every answer behind it) for longer than the call takes to fill the buffer, so room must
// free while the call runs, however fast the shards drain.
#[test]
fn a_batch_larger_than_buffer_memory_lands_whole_as_room_frees() {
    within(TEST, || {
        const TOPIC: &str = "batch-larger-than-buffer";
        let cluster = start_cluster(&[(TOPIC, PARTITIONS)]);
        for broker in 1..=3 {
            cluster
                .faults()
                .delay_response(broker, ApiKey::Produce, 1, Duration::from_secs(3));
        }
        let producer = producer(&cluster, &[("buffer.memory", "32768")]);
        let partition_of = |id: u64| ((id / 7) % PARTITIONS as u64) as i32;
        let ids: Vec<u64> = (0..3000).collect();
        let batch = producer.send_batch(ids.iter().map(|&id| record(TOPIC, partition_of(id), id)));
        let acked_at = acknowledged(&results_of(batch), &ids, TOPIC, partition_of);
        assert_log_holds(&cluster, TOPIC, ids, partition_of, &acked_at);
        assert!(
            producer.metrics().bufferpool_wait_time_ns_total > 0,
            "the batch waited for room in buffer.memory"
        );
        producer.close(Duration::from_secs(10));
        assert_eq!(producer.buffered_bytes(), 0);
    });
}
