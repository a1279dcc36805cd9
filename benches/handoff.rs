//! The hand-off from application threads to a shard, per record: a record handed to its
//! shard's inbox with its delivery handle and appended (encoded) into its partition's batch by
//! a glommio executor, with one and two calling threads (`kacrab::testkit::handoff`, which
//! drives the producer's real inbox, handles and engine without a broker).
//!
//! Run with `cargo bench --bench handoff` (`-- --quick` for a fast pass).

use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use kacrab::testkit::handoff::{send_to_encoded, txn_send_checks};

const RECORDS: u64 = 200_000;

/// One bench of `group` per count of calling threads (1 and 2), `RECORDS` in all: `run(threads,
/// per_thread)` times one pass.
fn by_calling_threads(
    c: &mut Criterion,
    group: &str,
    name: impl Fn(usize) -> String,
    run: impl Fn(usize, u64) -> Duration,
) {
    let mut group = c.benchmark_group(group);
    for threads in [1usize, 2] {
        let per_thread = RECORDS / threads as u64;
        group.throughput(Throughput::Elements(per_thread * threads as u64));
        group.bench_function(name(threads), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| run(threads, per_thread)).sum())
        });
    }
    group.finish();
}

fn bench_send_to_encoded(c: &mut Criterion) {
    let value = Bytes::from_static(b"0123456789");
    by_calling_threads(
        c,
        "send_to_encoded",
        |threads| format!("10B_16_partitions_{threads}_threads"),
        |threads, per_thread| send_to_encoded(threads, per_thread, 16, value.clone()),
    );
}

/// The transactional check every `send` makes, from one and two calling threads.
fn bench_txn_send_check(c: &mut Criterion) {
    by_calling_threads(
        c,
        "txn_send_check",
        |threads| format!("{threads}_threads"),
        txn_send_checks,
    );
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
    targets = bench_send_to_encoded, bench_txn_send_check
}
criterion_main!(benches);
