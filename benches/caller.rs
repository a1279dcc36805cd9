//! The caller's cost per record: the wall time a `send` takes on the calling thread, with 1, 2
//! and 4 threads calling at once on one producer, and the same through `send_batch` in chunks
//! of 1,000 records. The producer is a real one (`acks=all`, idempotent, 2 shards, `linger.ms=5`,
//! `batch.size=16384`) sending 10-byte records to 6 partitions of an in-process reference
//! cluster (`kacrab::testkit`), so the shards and the brokers run while the callers do.
//!
//! Criterion's iteration is one record: a bench's time is wall time per record, from the
//! moment the calling threads are released together until the last of them returns from its
//! last call, divided by the records they sent. Each thread makes its records inside the timed
//! section (its own topic `Arc`, a shared static value), as an application would, and keeps
//! every handle. The timed section holds only the calls: the records go in rounds of at most
//! `ROUND`, and after each round, outside the timed section, the producer is flushed and every
//! result checked. So a round starts with an empty buffer and never waits for room in
//! `buffer.memory`; what is timed is the calling threads' work (and what they lose to the
//! shards and brokers on the same cores), not the pipeline's throughput.
//!
//! `cargo bench --features testkit --bench caller` (about half a minute once built).

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{BatchDelivery, DeliveryFuture, Producer, ProducerRecord};

const TOPIC: &str = "caller";
/// Leaders of the topic's partitions, two per broker.
const LEADERS: [i32; 6] = [1, 2, 3, 1, 2, 3];
/// Records sent between two flushes. With the buffer's per-record overhead (a few hundred
/// bytes) this stays well inside `BUFFER_MEMORY`, so no call waits for room.
const ROUND: u64 = 50_000;
const BUFFER_MEMORY: u64 = 64 << 20;
/// Records per `send_batch` call.
const CHUNK: usize = 1000;
/// Records go to partitions in blocks of about one batch each (16384 / (10 + 12)), as a
/// sticky partitioner sends them and as the peer benchmark does.
const BLOCK: u64 = 744;

/// The cluster and the producer every bench shares.
struct Fixture {
    producer: Producer,
    /// Kept for the producer's sake: the brokers stop when it drops (after the producer:
    /// fields drop in order).
    _cluster: ReferenceCluster,
}

fn fixture() -> Fixture {
    // Nothing is read back: the brokers keep only the latest 16 MiB per partition.
    let rules = BrokerRules {
        retention_bytes_per_partition: Some(16 << 20),
        ..BrokerRules::default()
    };
    let cluster = ReferenceCluster::start(3, rules);
    cluster.create_topic(TOPIC, &LEADERS);
    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("batch.size", "16384")
        .set("buffer.memory", BUFFER_MEMORY.to_string())
        .set("kacrab.shards", "2")
        .build()
        .expect("the producer builds");
    // Connections, metadata and the producer id before anything is timed.
    let warm: Vec<_> = (0..LEADERS.len() as i32)
        .map(|p| producer.send(ProducerRecord::new(TOPIC, vec![0u8; 8]).with_partition(p)))
        .collect();
    for f in warm {
        f.wait().expect("the warm-up record is written");
    }
    Fixture {
        producer,
        _cluster: cluster,
    }
}

/// What one calling thread keeps of its calls.
enum Handles {
    Records(Vec<DeliveryFuture>),
    Batches(Vec<BatchDelivery>),
}

impl Handles {
    /// Every result is known (the producer was flushed) and none is an error.
    fn check(self) {
        let failed = match self {
            Handles::Records(futures) => futures
                .iter()
                .map(|f| f.try_result().expect("flushed"))
                .filter(Result::is_err)
                .count(),
            Handles::Batches(batches) => batches
                .iter()
                .flat_map(|b| b.try_results().expect("flushed"))
                .filter(Result::is_err)
                .count(),
        };
        assert_eq!(failed, 0, "records failed");
    }
}

/// One thread's calls: `records` records (the `first`-th onwards of the round), one `send`
/// each, or `send_batch` over chunks of `CHUNK` when `batch`. Returns when its calls began and
/// ended, and the handles.
fn calls(
    producer: &Producer,
    first: u64,
    records: u64,
    batch: bool,
    start: &Barrier,
) -> (Instant, Instant, Handles) {
    // A topic name of the thread's own, as an application's would be: threads that shared
    // one `Arc` would count its reference count's cache line as the producer's cost.
    let topic: Arc<str> = Arc::from(TOPIC);
    let value = Bytes::from_static(b"0123456789");
    let partition = |seq: u64| ((seq / BLOCK) % LEADERS.len() as u64) as i32;
    let record = |seq: u64| {
        let mut record = ProducerRecord::new(topic.clone(), value.clone());
        record.partition = Some(partition(seq));
        record
    };
    if batch {
        let mut batches = Vec::with_capacity(records.div_ceil(CHUNK as u64) as usize);
        let mut chunk = Vec::with_capacity(CHUNK);
        start.wait();
        let began = Instant::now();
        for seq in first..first + records {
            chunk.push(record(seq));
            if chunk.len() == CHUNK {
                batches.push(producer.send_batch(chunk.drain(..)));
            }
        }
        if !chunk.is_empty() {
            batches.push(producer.send_batch(chunk.drain(..)));
        }
        (began, Instant::now(), Handles::Batches(batches))
    } else {
        let mut futures = Vec::with_capacity(records as usize);
        start.wait();
        let began = Instant::now();
        for seq in first..first + records {
            futures.push(producer.send(record(seq)));
        }
        (began, Instant::now(), Handles::Records(futures))
    }
}

/// Sends `records` records from `threads` threads at once, in rounds of at most `ROUND`, and
/// returns the time the calls took: per round, from the first thread's start to the last
/// thread's end. Flushes and checks are outside it.
fn timed(producer: &Producer, threads: usize, records: u64, batch: bool) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = records;
    let mut seq = 0;
    while left > 0 {
        let round = left.min(ROUND);
        let start = Barrier::new(threads);
        let results: Vec<(Instant, Instant, Handles)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads as u64)
                .map(|t| {
                    // Thread t sends its share of the round, the records after the shares
                    // of threads 0..t; the first `rem` threads take one more.
                    let (base, rem) = (round / threads as u64, round % threads as u64);
                    let share = base + u64::from(t < rem);
                    let first = seq + t * base + t.min(rem);
                    let start = &start;
                    scope.spawn(move || calls(producer, first, share, batch, start))
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a calling thread does not panic"))
                .collect()
        });
        let began = results.iter().map(|r| r.0).min().expect("a thread");
        let ended = results.iter().map(|r| r.1).max().expect("a thread");
        total += ended - began;
        producer.flush();
        for (_, _, handles) in results {
            handles.check();
        }
        seq += round;
        left -= round;
    }
    total
}

fn bench_callers(c: &mut Criterion) {
    let fixture = fixture();
    let producer = &fixture.producer;
    for (group, batch) in [("send", false), ("send_batch_1000", true)] {
        let mut group = c.benchmark_group(group);
        // One iteration is one record: criterion's time is the wall time per record.
        group.throughput(Throughput::Elements(1));
        for threads in [1usize, 2, 4] {
            group.bench_function(format!("10B_6_partitions_{threads}_threads"), |b| {
                b.iter_custom(|iters| timed(producer, threads, iters, batch))
            });
        }
        group.finish();
    }
    fixture.producer.close(Duration::from_secs(10));
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_callers
}
criterion_main!(benches);
