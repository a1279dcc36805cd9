//! The bounds of the producer's blocking calls, end to end against the reference cluster:
//! `send` waits at most `max.block.ms` in total (metadata and room together), `close` wakes
//! every send blocked on metadata or room, a second `close` returns only once the producer is
//! closed, and a shard that dies of a bug makes the producer fatal while every record, call
//! and byte of `buffer.memory` comes back.
//!
//! Calls that could hang run under a watchdog, so a defect fails the test instead of hanging
//! it; the producer of a failed test is leaked (its drop would wait for a stuck shard).
#![cfg(feature = "testkit")]

mod common;

use std::mem::ManuallyDrop;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{DeliveryFuture, ProduceError, Producer, ProducerRecord};
use kafka_protocol::messages::ApiKey;

/// Bounds a failure only.
const WATCHDOG: Duration = Duration::from_secs(20);
/// Led by broker 2, which is down: its records hold `buffer.memory` until it comes back.
const HELD: &str = "held";

/// Two brokers; `HELD` led by broker 2, taken down once the producer knows it.
fn cluster() -> ReferenceCluster {
    let cluster = ReferenceCluster::start(2, BrokerRules::default());
    cluster.create_topic(HELD, &[2]);
    cluster
}

fn producer(cluster: &ReferenceCluster, extra: &[(&str, &str)]) -> ManuallyDrop<Producer> {
    let mut settings = vec![
        ("buffer.memory", "20000"),
        ("delivery.timeout.ms", "120000"),
    ];
    settings.extend_from_slice(extra);
    ManuallyDrop::new(common::kacrab_producer(
        &cluster.bootstrap_servers(),
        &settings,
    ))
}

/// Takes broker 2 down and fills `buffer.memory` with records for it; returns their futures.
/// Every byte in use is then theirs, and none comes back before broker 2 does.
fn fill_buffer(cluster: &ReferenceCluster, producer: &Producer) -> Vec<DeliveryFuture> {
    // Metadata first, so the records below are queued, not refused for want of it.
    producer
        .send(ProducerRecord::new(HELD, "warm"))
        .wait_timeout(WATCHDOG)
        .expect("the first record completes")
        .expect("acknowledged");
    // The warm-up's future completes before its batch's bytes are given back (at the end of
    // the shard's turn, as Java's `Sender.completeBatch` completes a batch before it
    // deallocates it). Counted still, they would stop the fill a batch short and come back
    // later, making room the tests rely on not being there; a returned flush has given back
    // the bytes of every record it waited for.
    assert!(
        producer.flush_timeout(WATCHDOG),
        "the warm-up record was flushed"
    );
    assert_eq!(
        producer.buffered_bytes(),
        0,
        "the buffer is empty before the fill"
    );
    cluster.broker_down(2);
    let mut held = Vec::new();
    loop {
        let record = ProducerRecord::new(HELD, Bytes::from(vec![1u8; 500]));
        match producer.try_send(record) {
            Ok(future) => held.push(future),
            Err(kacrab::TrySendError::BufferFull(_)) => break,
            Err(other) => panic!("filling the buffer: {other}"),
        }
    }
    assert!(
        held.iter().all(|future| future.try_result().is_none()),
        "the records that fill the buffer wait for broker 2"
    );
    held
}

/// Runs `call` on its own thread; its result, or a failure naming `what` at the watchdog.
fn within_watchdog<T: Send + 'static>(what: &str, call: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(call());
    });
    rx.recv_timeout(WATCHDOG)
        .unwrap_or_else(|_| panic!("{what} did not return within {WATCHDOG:?}"))
}

#[test]
fn send_waits_at_most_max_block_ms_for_metadata_and_room_together() {
    const MAX_BLOCK: Duration = Duration::from_millis(4000);
    let cluster = cluster();
    let producer = producer(&cluster, &[("max.block.ms", "4000")]);
    let _held = fill_buffer(&cluster, &producer);
    let started = Instant::now();
    let sent = {
        let producer = Producer::clone(&producer);
        std::thread::spawn(move || {
            let future = producer.send(ProducerRecord::new("late", Bytes::from(vec![2u8; 500])));
            (future, started.elapsed())
        })
    };
    // The topic appears two thirds of the way through the send's wait for its metadata (a
    // chosen instant, not a wait for an event); the buffer stays full, so the send then waits
    // for room within what is left of the same budget.
    let (_tick, at_two_thirds) = mpsc::channel::<()>();
    let _ = at_two_thirds.recv_timeout(MAX_BLOCK * 2 / 3);
    cluster.create_topic("late", &[1]);
    let (future, took) = sent.join().expect("the sending thread");
    let result = future.try_result();
    assert!(
        matches!(result, Some(Err(ProduceError::BufferExhausted { .. }))),
        "the send fails for want of room once its budget is spent: {result:?}"
    );
    // One budget for the call: each wait with its own would take 2/3 + 1 of it.
    assert!(
        took < MAX_BLOCK + MAX_BLOCK / 3,
        "send blocked {took:?} with max.block.ms of {MAX_BLOCK:?}"
    );
    cluster.broker_up(2);
    ManuallyDrop::into_inner(producer).close(WATCHDOG);
}

#[test]
fn close_wakes_a_send_blocked_on_metadata() {
    let cluster = cluster();
    let producer = producer(&cluster, &[("max.block.ms", "60000")]);
    let metadata_before = cluster.stats().requests(ApiKey::Metadata);
    let blocked = {
        let producer = Producer::clone(&producer);
        std::thread::spawn(move || {
            producer
                .send(ProducerRecord::new("never-created", "x"))
                .try_result()
        })
    };
    // The send asked for the topic: it waits for its metadata now (or is about to).
    let deadline = Instant::now() + WATCHDOG;
    while cluster.stats().requests(ApiKey::Metadata) <= metadata_before {
        assert!(
            Instant::now() < deadline,
            "the send never asked for the topic's metadata"
        );
        std::thread::yield_now();
    }
    let closer = Producer::clone(&producer);
    within_watchdog("close", move || closer.close(Duration::from_secs(5)));
    let result = within_watchdog("the send blocked on metadata", move || {
        blocked.join().expect("sending thread")
    });
    assert!(
        matches!(result, Some(Err(ProduceError::Closed))),
        "close wakes the send: {result:?}"
    );
    drop(ManuallyDrop::into_inner(producer));
}

#[test]
fn close_wakes_sends_blocked_on_buffer_memory_sync_and_async() {
    let cluster = cluster();
    let producer = producer(&cluster, &[("max.block.ms", "60000")]);
    let held = fill_buffer(&cluster, &producer);
    let blocked = {
        let producer = Producer::clone(&producer);
        std::thread::spawn(move || {
            producer
                .send(ProducerRecord::new(HELD, Bytes::from(vec![3u8; 500])))
                .try_result()
        })
    };
    let blocked_async = {
        let producer = Producer::clone(&producer);
        std::thread::spawn(move || {
            let record = ProducerRecord::new(HELD, Bytes::from(vec![4u8; 500]));
            futures::executor::block_on(producer.send_async(record)).try_result()
        })
    };
    let deadline = Instant::now() + WATCHDOG;
    while producer.metrics().waiting_threads == 0 {
        assert!(
            Instant::now() < deadline,
            "the blocking send never waited for room"
        );
        std::thread::yield_now();
    }
    // A close whose flush cannot finish (broker 2 is down) for much longer than the watchdog:
    // the blocked sends must not wait for it.
    let closer = {
        let producer = Producer::clone(&producer);
        std::thread::spawn(move || producer.close(Duration::from_secs(60)))
    };
    let result = within_watchdog("the send blocked on buffer.memory", move || {
        blocked.join().expect("sending thread")
    });
    assert!(
        matches!(result, Some(Err(ProduceError::Closed))),
        "close wakes the blocked send: {result:?}"
    );
    let result = within_watchdog("the send_async waiting for room", move || {
        blocked_async.join().expect("async sending thread")
    });
    assert!(
        matches!(result, Some(Err(ProduceError::Closed))),
        "close wakes the waiting send_async: {result:?}"
    );
    cluster.broker_up(2);
    within_watchdog("close", move || closer.join().expect("closer"));
    for future in held {
        assert!(
            future.try_result().is_some(),
            "close completed every record"
        );
    }
    drop(ManuallyDrop::into_inner(producer));
}

/// Starts `close(first)` on its own thread, waits until it has begun (a send is refused as
/// closed), then makes a second `close(second)` under the watchdog; after it returned, every
/// held record has completed and every shard has stopped.
fn close_during_a_close(first: Duration, second: Duration) {
    let cluster = cluster();
    let producer = producer(&cluster, &[]);
    let held = fill_buffer(&cluster, &producer);
    let watch = producer.runtime_watch();
    let first = {
        let producer = Producer::clone(&producer);
        std::thread::spawn(move || producer.close(first))
    };
    let deadline = Instant::now() + WATCHDOG;
    loop {
        let refused = producer
            .send(ProducerRecord::new(HELD, "probe"))
            .try_result();
        if matches!(refused, Some(Err(ProduceError::Closed))) {
            break;
        }
        assert!(Instant::now() < deadline, "close never began");
        std::thread::yield_now();
    }
    let closer = Producer::clone(&producer);
    within_watchdog("the second close", move || closer.close(second));
    let incomplete = held.iter().filter(|f| f.try_result().is_none()).count();
    assert_eq!(
        incomplete, 0,
        "the second close returned while the first still had records to complete"
    );
    assert_eq!(
        watch.stats().shards_running,
        0,
        "and before the shards stopped"
    );
    within_watchdog("the first close", move || {
        first.join().expect("first close")
    });
    drop(ManuallyDrop::into_inner(producer));
}

#[test]
fn a_second_close_returns_only_once_the_first_has_closed_the_producer() {
    close_during_a_close(Duration::from_secs(3), Duration::from_secs(30));
}

/// As Java's `close`, a close whose own time runs out while another (with all the time in
/// the world) is under way force-closes: the held records fail now, and it returns closed.
#[test]
fn a_close_that_runs_out_of_time_during_a_longer_close_forces_it_and_returns_closed() {
    close_during_a_close(Duration::from_secs(600), Duration::from_millis(200));
}

/// A shard that dies of a bug of kacrab's own (a panic injected by the testkit) in its driver
/// loop: the producer becomes fatal with an error naming the shard, every record completes
/// with an honest promise (read back with librdkafka), the dying shard's never-sent records
/// with that error, the other shard's records are delivered, `flush`, `close` and later sends
/// return, and `buffer.memory` comes back to zero.
#[test]
fn a_shard_that_panics_makes_the_producer_fatal_and_every_record_call_and_byte_comes_back() {
    shard_dies(false);
}

/// The same when the panic is in a task the shard spawned (as its connections' readers and
/// writers are): glommio runs the shard's tasks in the shard's turn, so the shard's catch sees
/// it too, and everything comes back as above.
#[test]
fn a_shard_whose_task_panics_dies_the_same_way_and_every_record_call_and_byte_comes_back() {
    shard_dies(true);
}

fn shard_dies(in_task: bool) {
    let topic = if in_task { "task-panic" } else { "shard-panic" };
    const PARTITIONS: i32 = 8;
    /// Records sent before the panic is injected (as many again after it).
    const BEFORE_PANIC: u64 = 400;
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic(topic, &[1; PARTITIONS as usize]);
    // A long linger keeps the dying shard's records in their batches; a slow answer keeps
    // some of its requests on the wire as it dies.
    let producer = ManuallyDrop::new(common::kacrab_producer(
        &cluster.bootstrap_servers(),
        &[("linger.ms", "200")],
    ));
    let watch = producer.runtime_watch();
    cluster
        .faults()
        .delay_response(1, ApiKey::Produce, 2, Duration::from_millis(500));
    let send = |id: u64| {
        producer.send(
            ProducerRecord::new(topic, Bytes::from(id.to_be_bytes().to_vec()))
                .with_partition((id % PARTITIONS as u64) as i32),
        )
    };
    let mut futures: Vec<(u64, DeliveryFuture)> =
        (0..BEFORE_PANIC).map(|id| (id, send(id))).collect();
    assert!(
        kacrab::testkit::panic_shard(&producer, 1, in_task),
        "shard 1 runs"
    );
    futures.extend((BEFORE_PANIC..2 * BEFORE_PANIC).map(|id| (id, send(id))));

    let mut outcomes = Vec::new();
    for (id, future) in futures {
        let result = future
            .wait_timeout(WATCHDOG)
            .unwrap_or_else(|| panic!("record {id} never completed after its shard died"));
        outcomes.push((id, result));
    }
    let died = |e: &ProduceError| matches!(e, ProduceError::ShardPanicked { shard: 1, .. });
    assert!(
        outcomes.iter().any(|(_, r)| matches!(r, Err(e) if died(e))),
        "the dying shard's records fail with the error that names it"
    );
    let later = send(10_000).try_result();
    assert!(
        matches!(later, Some(Err(ref e)) if died(e)),
        "a send after the death fails at once with it: {later:?}"
    );
    assert!(
        producer.flush_timeout(WATCHDOG),
        "flush returns with every record complete"
    );
    let closer = Producer::clone(&producer);
    within_watchdog("close", move || closer.close(Duration::from_secs(5)));
    assert!(
        watch.wait_until(WATCHDOG, |s| s.shards_running == 0),
        "every shard thread ended: {:?}",
        watch.stats()
    );
    assert_eq!(producer.buffered_bytes(), 0, "buffer.memory came back");

    // What the log holds agrees with every promise, and the live shard lost nothing.
    let records = common::read_back(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        common::Isolation::ReadUncommitted,
        WATCHDOG,
    );
    let ids = common::payload_ids(&records);
    let mut acked = Vec::new();
    let mut maybe = Vec::new();
    // Over the records sent before the panic was injected: those sent after it may be
    // refused at `send` once the producer is fatal, whichever shard they were for.
    let mut partitions_all_acked = vec![true; PARTITIONS as usize];
    let mut not_acked = |id: u64| {
        if id < BEFORE_PANIC {
            partitions_all_acked[(id % PARTITIONS as u64) as usize] = false;
        }
    };
    for (id, result) in &outcomes {
        match result {
            Ok(metadata) => {
                acked.push(*id);
                let at = &ids[metadata.partition as usize];
                let offset = records[metadata.partition as usize]
                    .iter()
                    .position(|r| r.offset == metadata.offset);
                assert!(
                    offset.is_some_and(|i| at[i] == *id),
                    "record {id} acknowledged at {metadata:?} is not there"
                );
            }
            Err(e) if e.is_outcome_unknown() => maybe.push(*id),
            Err(e) => {
                not_acked(*id);
                assert!(
                    died(e) || matches!(e, ProduceError::Closed),
                    "record {id}: {e}"
                );
            }
        }
        if result.as_ref().is_err_and(|e| e.is_outcome_unknown()) {
            not_acked(*id);
        }
    }
    let sent: Vec<u64> = acked.iter().chain(&maybe).copied().collect();
    println!("{}", common::check_exactly_once(&ids, &acked, &sent));
    assert!(
        partitions_all_acked.iter().any(|&all| all),
        "the live shard's partitions were delivered whole: {partitions_all_acked:?}"
    );
    drop(ManuallyDrop::into_inner(producer));
}
