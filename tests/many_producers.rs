//! Producers made and ended one after another, in the same process: each one's shard threads
//! and memory must go when it ends, by `close` or by the drop of its last handle. The figures
//! (threads from `/proc/self/task`, resident memory from `/proc/self/status`) are printed so
//! that they can be quoted.
#![cfg(feature = "testkit")]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{Producer, ProducerRecord};

use common::{check_exactly_once, payload_ids, read_back, Isolation};

const PARTITIONS: i32 = 3;
const RECORDS_PER_PRODUCER: u64 = 3;
const WAIT: Duration = Duration::from_secs(30);
/// What resident memory may stay above the baseline once every producer is gone: glibc keeps
/// freed memory in its arenas (one per thread that allocated, reused by later threads), and
/// keeps some of it resident.
const RSS_SLACK_KIB: u64 = 32 * 1024;

/// Threads of this process now.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

/// Resident memory of this process now, in KiB (`VmRSS`).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// Heap bytes in use now, as glibc's allocator counts them (`mallinfo2`: small blocks and
/// mmapped ones): unlike resident memory, freed memory does not count.
#[cfg(target_env = "gnu")]
fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let info = unsafe { libc::mallinfo2() };
    info.uordblks + info.hblkhd
}

#[cfg(not(target_env = "gnu"))]
fn heap_in_use() -> usize {
    0
}

/// Waits until at most `baseline` threads remain, re-reading `/proc/self/task` every few
/// milliseconds (a thread's exit has no event to wait on); the count reached at the deadline.
fn wait_for_threads(baseline: usize, timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    let (lock, nothing) = (std::sync::Mutex::new(()), std::sync::Condvar::new());
    let mut guard = lock.lock().unwrap();
    loop {
        let now = threads();
        if now <= baseline || Instant::now() >= deadline {
            return now;
        }
        // A condition variable nothing signals: a bounded pause between two reads.
        guard = nothing
            .wait_timeout(guard, Duration::from_millis(5))
            .unwrap()
            .0;
    }
}

fn producer(cluster: &ReferenceCluster, index: u64) -> Producer {
    Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("kacrab.shards", if index % 2 == 0 { "1" } else { "2" })
        .set("kacrab.io.memory.bytes", "16384")
        .set("linger.ms", "0")
        .set("reconnect.backoff.max.ms", "200")
        .build()
        .unwrap_or_else(|e| panic!("producer {index}: {e}"))
}

/// Builds producer `index`, sends it a few records and waits for them, then ends it: by
/// `close` (two of three) or by dropping its last handle, a clone's, on another thread (one
/// of three). Returns the ids it sent, all acknowledged; panics if its shards did not stop.
fn use_and_end(cluster: &ReferenceCluster, topic: &str, index: u64) -> Vec<u64> {
    let producer = producer(cluster, index);
    let watch = producer.runtime_watch();
    let ids: Vec<u64> = (0..RECORDS_PER_PRODUCER)
        .map(|n| index * RECORDS_PER_PRODUCER + n)
        .collect();
    let futures: Vec<_> = ids
        .iter()
        .map(|&id| {
            let mut payload = id.to_be_bytes().to_vec();
            payload.resize(24, b'.');
            producer.send(
                ProducerRecord::new(topic, Bytes::from(payload))
                    .with_partition((id % PARTITIONS as u64) as i32),
            )
        })
        .collect();
    for (id, future) in ids.iter().zip(futures) {
        future
            .wait_timeout(WAIT)
            .unwrap_or_else(|| panic!("producer {index}: record {id} did not resolve in {WAIT:?}"))
            .unwrap_or_else(|e| panic!("producer {index}: record {id} failed: {e}"));
    }
    match index % 3 {
        0 => {
            // The last handle is a clone, dropped on a thread of its own.
            let clone = producer.clone();
            drop(producer);
            std::thread::spawn(move || drop(clone))
                .join()
                .expect("the dropping thread");
        }
        1 => {
            producer.close(WAIT);
            drop(producer);
        }
        _ => {
            producer.close(Duration::ZERO);
            drop(producer);
        }
    }
    assert!(
        watch.wait_until(WAIT, |s| s.shards_running == 0 && s.sockets_open == 0),
        "producer {index}: its shards stopped and its sockets closed: {:?}",
        watch.stats()
    );
    ids
}

fn run(count: u64) {
    let started = Instant::now();
    let topic = "many-producers";
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(topic, &[1, 2, 3]);
    // The test's own threads and the cluster's (acceptors, ticker): a connection's thread on
    // the broker side ends soon after its producer closed it, not at once.
    let baseline_threads = threads();
    let mut acked = Vec::new();
    // Warm-up: the allocator's arenas and glommio's first executors.
    const WARM_UP: u64 = 4;
    for index in 0..WARM_UP {
        acked.extend(use_and_end(&cluster, topic, index));
    }
    let settled = wait_for_threads(baseline_threads, WAIT);
    assert!(
        settled <= baseline_threads,
        "threads after the warm-up: {settled}, before it {baseline_threads}"
    );
    let baseline_rss = rss_kib();
    let baseline_heap = heap_in_use();
    println!(
        "baseline: {baseline_threads} threads, {baseline_rss} KiB resident, {} KiB of heap in use",
        baseline_heap / 1024
    );
    let (mut peak_threads, mut peak_rss) = (baseline_threads, baseline_rss);
    for index in WARM_UP..WARM_UP + count {
        acked.extend(use_and_end(&cluster, topic, index));
        peak_threads = peak_threads.max(threads());
        peak_rss = peak_rss.max(rss_kib());
        if (index - WARM_UP + 1) % 100 == 0 {
            println!(
                "{} producers: {} threads, {} KiB resident, {} KiB of heap in use, {:?}",
                index - WARM_UP + 1,
                threads(),
                rss_kib(),
                heap_in_use() / 1024,
                started.elapsed()
            );
        }
    }
    let after_threads = wait_for_threads(baseline_threads, WAIT);
    let after_rss = rss_kib();
    let after_heap = heap_in_use();
    println!(
        "{count} producers: threads baseline {baseline_threads}, peak {peak_threads}, after \
         {after_threads}; resident baseline {baseline_rss} KiB, peak {peak_rss} KiB, after \
         {after_rss} KiB (bound baseline + {RSS_SLACK_KIB} KiB); heap in use baseline {} KiB, \
         after {} KiB; {:?}",
        baseline_heap / 1024,
        after_heap / 1024,
        started.elapsed()
    );
    assert!(
        after_threads <= baseline_threads,
        "threads after {count} producers ended: {after_threads}, baseline {baseline_threads}"
    );
    assert!(
        after_rss <= baseline_rss + RSS_SLACK_KIB,
        "resident memory after {count} producers ended: {after_rss} KiB, baseline \
         {baseline_rss} KiB + {RSS_SLACK_KIB} KiB"
    );
    // Every record each producer had acknowledged is in the log once, in order.
    let records = read_back(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        Isolation::ReadUncommitted,
        Duration::from_secs(60),
    );
    println!(
        "{}",
        check_exactly_once(&payload_ids(&records), &acked, &acked)
    );
}

// `KACRAB_MANY_PRODUCERS=N` makes it N producers instead (say, to see whether resident memory
// keeps growing with the count).
#[test]
fn creating_using_and_closing_a_thousand_producers_returns_threads_and_memory_to_baseline() {
    let count = std::env::var("KACRAB_MANY_PRODUCERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    run(count);
}
