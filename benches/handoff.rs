//! The hand-off from an application thread to a shard: today a flume bounded channel of boxed
//! records (`ShardCommand::Append(Box<OwnedRecord>)`), sent with `send_timeout` by the caller
//! and drained by the shard with `try_recv`, parking in `recv_async` when empty.
//!
//! Each message is a heap box of the size of an `OwnedRecord`, allocated by the sender and
//! freed by the receiver, as in the producer. Variants:
//! - `flume_thread_to_glommio`: the producer's arrangement (a glommio executor receiving);
//! - `flume_glommio_to_glommio`: one executor sending to another, as between shards;
//! - `flume_thread_to_thread`: the same channel, a plain thread receiving;
//! - `crossbeam_thread_to_thread`: crossbeam's bounded channel, for comparison.
//!
//! Run with `cargo bench --bench handoff` (`-- --quick` for a fast pass).

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use glommio::LocalExecutorBuilder;

/// About the size of `OwnedRecord` (topic-partition, timestamp, key, value, headers, delivery).
type Message = Box<[u64; 19]>;
/// The producer's per-shard queue capacity (`SHARD_QUEUE_CAPACITY`).
const CAPACITY: usize = 1 << 16;

fn message(i: u64) -> Message {
    let mut m = Box::new([0u64; 19]);
    m[0] = i;
    m
}

fn send_all(tx: flume::Sender<Message>, n: u64) {
    for i in 0..n {
        tx.send_timeout(message(i), Duration::from_secs(60))
            .expect("receiver alive");
    }
}

fn flume_to_glommio(n: u64) -> Duration {
    let (tx, rx) = flume::bounded::<Message>(CAPACITY);
    let barrier = Arc::new(Barrier::new(2));
    let b = barrier.clone();
    let receiver = LocalExecutorBuilder::default()
        .io_memory(64 << 10)
        .spawn(move || async move {
            b.wait();
            let mut got = 0u64;
            while got < n {
                // The shard's pattern: drain what is there, then park on the async receive.
                while let Ok(m) = rx.try_recv() {
                    black_box(&m);
                    got += 1;
                }
                if got < n {
                    match rx.recv_async().await {
                        Ok(m) => {
                            black_box(&m);
                            got += 1;
                        }
                        Err(_) => break,
                    }
                }
            }
            Instant::now()
        })
        .expect("executor");
    barrier.wait();
    let start = Instant::now();
    send_all(tx, n);
    let end = receiver.join().expect("receiver");
    end - start
}

/// Shard to shard: a glommio executor sending to another (the shards' identity broadcast uses
/// the same channels).
fn flume_glommio_to_glommio(n: u64) -> Duration {
    let (tx, rx) = flume::bounded::<Message>(CAPACITY);
    let barrier = Arc::new(Barrier::new(3));
    let b = barrier.clone();
    let receiver = LocalExecutorBuilder::default()
        .io_memory(64 << 10)
        .spawn(move || async move {
            b.wait();
            let mut got = 0u64;
            while got < n {
                while let Ok(m) = rx.try_recv() {
                    black_box(&m);
                    got += 1;
                }
                if got < n && rx.recv_async().await.is_ok() {
                    got += 1;
                }
            }
            Instant::now()
        })
        .expect("executor");
    let b = barrier.clone();
    let sender = LocalExecutorBuilder::default()
        .io_memory(64 << 10)
        .spawn(move || async move {
            b.wait();
            let start = Instant::now();
            for i in 0..n {
                tx.send_async(message(i)).await.expect("receiver alive");
            }
            start
        })
        .expect("executor");
    barrier.wait();
    let start = sender.join().expect("sender");
    receiver.join().expect("receiver") - start
}

fn flume_to_thread(n: u64) -> Duration {
    let (tx, rx) = flume::bounded::<Message>(CAPACITY);
    let receiver = std::thread::spawn(move || {
        for _ in 0..n {
            black_box(rx.recv().expect("sender alive"));
        }
        Instant::now()
    });
    let start = Instant::now();
    send_all(tx, n);
    receiver.join().expect("receiver") - start
}

fn crossbeam_to_thread(n: u64) -> Duration {
    let (tx, rx) = crossbeam::channel::bounded::<Message>(CAPACITY);
    let receiver = std::thread::spawn(move || {
        for _ in 0..n {
            black_box(rx.recv().expect("sender alive"));
        }
        Instant::now()
    });
    let start = Instant::now();
    for i in 0..n {
        tx.send(message(i)).expect("receiver alive");
    }
    receiver.join().expect("receiver") - start
}

fn bench_handoff(c: &mut Criterion) {
    let mut group = c.benchmark_group("handoff");
    group.throughput(Throughput::Elements(1));
    type Run = fn(u64) -> Duration;
    let variants: [(&str, Run); 4] = [
        ("flume_thread_to_glommio", flume_to_glommio),
        ("flume_glommio_to_glommio", flume_glommio_to_glommio),
        ("flume_thread_to_thread", flume_to_thread),
        ("crossbeam_thread_to_thread", crossbeam_to_thread),
    ];
    for (name, run) in variants {
        // Whole runs of at least 100k messages, so thread start-up is noise.
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let n = iters.max(100_000);
                run(n).mul_f64(iters as f64 / n as f64)
            })
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_handoff
}
criterion_main!(benches);
