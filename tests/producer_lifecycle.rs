//! A producer's end over TCP against the reference cluster: what its last handle's drop and
//! `close` do to the records sent and to the shards. Records are read back with librdkafka's
//! consumer.
#![cfg(feature = "testkit")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{DeliveryFuture, ProduceError, Producer, ProducerRecord};
use kafka_protocol::messages::ApiKey;

use common::{check_exactly_once, payload_ids, read_back, Isolation};

const PARTITIONS: i32 = 3;
const WAIT: Duration = Duration::from_secs(30);

fn start_cluster(topic: &str) -> ReferenceCluster {
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(topic, &[1, 2, 3]);
    cluster
}

fn send(producer: &Producer, topic: &str, id: u64) -> DeliveryFuture {
    let mut payload = id.to_be_bytes().to_vec();
    payload.resize(32, b'.');
    producer.send(
        ProducerRecord::new(topic, Bytes::from(payload))
            .with_partition((id % PARTITIONS as u64) as i32),
    )
}

fn read_ids(cluster: &ReferenceCluster, topic: &str) -> Vec<Vec<u64>> {
    payload_ids(&read_back(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        Isolation::ReadUncommitted,
        WAIT,
    ))
}

#[test]
fn dropping_the_last_clones_from_several_threads_at_once_delivers_what_was_sent_and_stops_the_shards(
) {
    const THREADS: usize = 4;
    const RECORDS: u64 = 100;
    let topic = "lifecycle-drop";
    let cluster = start_cluster(topic);
    let mut acked = Vec::new();
    for round in 0..10u64 {
        let producer = common::kacrab_producer(&cluster.bootstrap_servers(), &[]);
        let watch = producer.runtime_watch();
        assert!(
            watch.wait_until(WAIT, |s| s.shards_running == 2),
            "both shards run: {:?}",
            watch.stats()
        );
        let ids = round * RECORDS..(round + 1) * RECORDS;
        let futures: Vec<DeliveryFuture> =
            ids.clone().map(|id| send(&producer, topic, id)).collect();
        let barrier = Arc::new(Barrier::new(THREADS));
        let mut handles = vec![producer];
        while handles.len() < THREADS {
            handles.push(handles[0].clone());
        }
        let droppers: Vec<_> = handles
            .into_iter()
            .map(|handle| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    drop(handle);
                })
            })
            .collect();
        for dropper in droppers {
            dropper.join().expect("dropper thread");
        }
        assert!(
            watch.wait_until(WAIT, |s| s.shards_running == 0 && s.sockets_open == 0),
            "round {round}: the shards stopped once every handle was dropped: {:?}",
            watch.stats()
        );
        for (id, future) in ids.zip(futures) {
            future
                .wait_timeout(WAIT)
                .expect("resolved")
                .unwrap_or_else(|e| panic!("record {id} sent before the drop: {e}"));
            acked.push(id);
        }
    }
    check_exactly_once(&read_ids(&cluster, topic), &acked, &acked);
}

#[test]
fn every_send_racing_close_resolves_and_the_acknowledged_ones_are_in_the_log() {
    let topic = "lifecycle-close-race";
    let cluster = start_cluster(topic);
    let mut next = 0u64;
    let (mut acked, mut sent) = (Vec::new(), Vec::new());
    for round in 0..8 {
        let producer = common::kacrab_producer(&cluster.bootstrap_servers(), &[]);
        let started = Arc::new(AtomicBool::new(false));
        let first = next;
        next += 1_000_000;
        let sender = {
            let (producer, started) = (producer.clone(), started.clone());
            std::thread::spawn(move || {
                let mut futures = Vec::new();
                for id in first.. {
                    let future = send(&producer, topic, id);
                    // `try_result` takes a known result: keep it beside the future.
                    let known = future.try_result();
                    let refused = matches!(known, Some(Err(ProduceError::Closed)));
                    futures.push((id, known, future));
                    started.store(true, Ordering::Release);
                    if refused {
                        break;
                    }
                }
                futures
            })
        };
        while !started.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        producer.close(WAIT);
        for (id, known, future) in sender.join().expect("sender thread") {
            sent.push(id);
            match known.or_else(|| future.wait_timeout(WAIT)) {
                Some(Ok(_)) => acked.push(id),
                Some(Err(ProduceError::Closed | ProduceError::OutcomeUnknown { .. })) => {}
                Some(Err(e)) => panic!("round {round}: record {id}: {e}"),
                None => panic!("round {round}: record {id} sent racing close never resolved"),
            }
        }
    }
    eprintln!(
        "{}",
        check_exactly_once(&read_ids(&cluster, topic), &acked, &sent)
    );
}

#[test]
fn tokio_tasks_awaiting_send_async_on_a_full_buffer_deliver_every_record_once() {
    const TASKS: u64 = 8;
    const PER_TASK: u64 = 500;
    let topic = "lifecycle-async";
    let cluster = start_cluster(topic);
    // A buffer of a few dozen records, so most sends wait for room.
    let producer = Arc::new(common::kacrab_producer(
        &cluster.bootstrap_servers(),
        &[("buffer.memory", "16384")],
    ));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let acked: Vec<u64> = runtime.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let producer = producer.clone();
                tokio::spawn(async move {
                    let mut acked = Vec::new();
                    for i in 0..PER_TASK {
                        let id = t * PER_TASK + i;
                        let mut payload = id.to_be_bytes().to_vec();
                        payload.resize(32, b'.');
                        let record = ProducerRecord::new(topic, Bytes::from(payload))
                            .with_partition((t % PARTITIONS as u64) as i32);
                        let future = producer.send_async(record).await;
                        future.await.expect("delivered");
                        acked.push(id);
                    }
                    acked
                })
            })
            .collect();
        let mut acked = Vec::new();
        for task in tasks {
            acked.extend(task.await.expect("task"));
        }
        acked
    });
    producer.flush();
    assert_eq!(acked.len() as u64, TASKS * PER_TASK);
    // Several tasks share a partition: each id once, each task's ids in its send order.
    let mut seen = std::collections::HashSet::new();
    for (partition, ids) in read_ids(&cluster, topic).iter().enumerate() {
        let mut last = std::collections::HashMap::new();
        for &id in ids {
            assert!(seen.insert(id), "record {id} twice in the log");
            if let Some(prev) = last.insert(id / PER_TASK, id) {
                assert!(prev < id, "partition {partition}: {id} after {prev}");
            }
        }
    }
    assert_eq!(
        seen.len() as u64,
        TASKS * PER_TASK,
        "every record is in the log"
    );
    producer.close(Duration::from_secs(10));
}

#[test]
fn flush_timeout_returns_false_while_a_record_waits_for_its_broker_and_true_once_it_landed() {
    let topic = "lifecycle-flush-timeout";
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic(topic, &[1]);
    let producer = common::kacrab_producer(&cluster.bootstrap_servers(), &[]);
    send(&producer, topic, 0)
        .wait()
        .expect("the first record lands");
    cluster.broker_down(1);
    // Id 3 goes to partition 0, the topic's only one, as id 0 did.
    let stuck = send(&producer, topic, 3);
    assert!(
        !producer.flush_timeout(Duration::from_millis(200)),
        "a record whose only broker is down is not flushed"
    );
    assert!(stuck.try_result().is_none(), "and it is still pending");
    cluster.broker_up(1);
    assert!(
        producer.flush_timeout(WAIT),
        "flushed once the broker is back"
    );
    assert_eq!(stuck.wait().expect("landed").offset, 1);
    producer.close(Duration::from_secs(5));
}

#[test]
fn purge_fails_lingering_records_as_purged_and_leaves_no_sequence_gap_for_the_next_record() {
    let topic = "lifecycle-purge-lingering";
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic(topic, &[1, 1, 1]);
    // Nothing leaves a batch before a flush: the purged records are certainly unsent.
    let producer = common::kacrab_producer(
        &cluster.bootstrap_servers(),
        &[("linger.ms", "60000"), ("batch.size", "65536")],
    );
    // Ids that are multiples of 3 all go to partition 0.
    let first = send(&producer, topic, 0);
    assert!(producer.flush_timeout(WAIT), "the first record is flushed");
    assert_eq!(first.wait().expect("the first record lands").offset, 0);
    let lingering: Vec<DeliveryFuture> = [3, 6, 9]
        .into_iter()
        .map(|id| send(&producer, topic, id))
        .collect();
    producer.purge();
    for future in &lingering {
        assert_eq!(
            future.try_result().map(|r| r.map(|m| m.offset)),
            Some(Err(ProduceError::Purged)),
            "purge completes a lingering record before it returns"
        );
    }
    // Had the purged batch taken sequences, the broker would refuse this one as out of order.
    let next = send(&producer, topic, 12);
    assert!(producer.flush_timeout(WAIT), "the next record is flushed");
    assert_eq!(next.wait().expect("the next record lands").offset, 1);
    assert_eq!(read_ids(&cluster, topic), vec![vec![0, 12], vec![], vec![]]);
    producer.close(Duration::from_secs(5));
}

#[test]
fn purge_leaves_a_record_whose_attempt_is_on_the_wire_to_complete_as_usual() {
    let topic = "lifecycle-purge-on-the-wire";
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic(topic, &[1, 1, 1]);
    let producer = common::kacrab_producer(&cluster.bootstrap_servers(), &[("linger.ms", "0")]);
    // The first record (and its connection's set-up) proves the path; the second's answer
    // is held back so that purge runs while it is on the wire.
    send(&producer, topic, 0)
        .wait()
        .expect("the first record lands");
    cluster
        .faults()
        .delay_response(1, ApiKey::Produce, 1, Duration::from_secs(2));
    let on_the_wire = send(&producer, topic, 3);
    assert!(
        cluster.faults().wait_until_consumed(WAIT),
        "the delayed produce request reached the broker"
    );
    producer.purge();
    assert_eq!(
        on_the_wire
            .wait()
            .expect("a record on the wire is not purged")
            .offset,
        1
    );
    assert_eq!(read_ids(&cluster, topic), vec![vec![0, 3], vec![], vec![]]);
    producer.close(Duration::from_secs(5));
}
