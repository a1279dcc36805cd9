//! Hot-path costs of the record batch codec and the key partitioner.
//!
//! Run with `cargo bench --bench record_batch` (add `-- --quick` for a fast pass). Encoding is
//! measured per batch, builder creation and close included, since that is what the producer
//! pays for each batch; it is reported both per record and per byte.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kacrab::config::Codec;
use kacrab::partitioner::murmur2;
use kacrab::testkit::internals::protocol::record_batch::{
    write_producer_state, RecordBatchBuilder,
};

const BASE_TIMESTAMP: i64 = 1_700_000_000_000;

/// A workload: `count` keyless, headerless records with values of `value_len` bytes.
struct Workload {
    name: &'static str,
    count: usize,
    value_len: usize,
}

const WORKLOADS: [Workload; 2] = [
    Workload {
        name: "1000x10B",
        count: 1000,
        value_len: 10,
    },
    Workload {
        name: "16x1KiB",
        count: 16,
        value_len: 1024,
    },
];

fn encode(count: usize, value: &[u8], capacity: usize) -> bytes::BytesMut {
    let mut builder = RecordBatchBuilder::new(capacity, BASE_TIMESTAMP);
    for i in 0..count {
        builder.append(BASE_TIMESTAMP + i as i64, None, Some(value), &[]);
    }
    builder.close()
}

fn bench_encode(c: &mut Criterion) {
    for (group_name, per_byte) in [("encode_records", false), ("encode_bytes", true)] {
        let mut group = c.benchmark_group(group_name);
        for workload in &WORKLOADS {
            let value = vec![0x5a; workload.value_len];
            let batch_len = encode(workload.count, &value, 0).len();
            group.throughput(if per_byte {
                Throughput::Bytes(batch_len as u64)
            } else {
                Throughput::Elements(workload.count as u64)
            });
            group.bench_function(workload.name, |b| {
                b.iter(|| encode(black_box(workload.count), black_box(&value), batch_len))
            });
        }
        group.finish();
    }
}

fn bench_stamp_and_crc(c: &mut Criterion) {
    const BATCH_BYTES: usize = 16 * 1024;
    let mut group = c.benchmark_group("checksum");
    group.throughput(Throughput::Bytes(BATCH_BYTES as u64));

    // One record sized so the whole batch is exactly 16 KiB: 61 header bytes, and a record of
    // 3 (length) + 1 + 1 + 1 + 1 (null key) + 3 (value length) + value + 1 (no headers).
    let value = vec![0xa5; BATCH_BYTES - 61 - 11];
    let mut batch = encode(1, &value, BATCH_BYTES);
    assert_eq!(batch.len(), BATCH_BYTES);
    let mut sequence = 0i32;
    group.bench_function("write_producer_state_16KiB", |b| {
        b.iter(|| {
            sequence = sequence.wrapping_add(1) & i32::MAX;
            write_producer_state(black_box(&mut batch), 4242, 3, sequence, false);
        })
    });

    let data = vec![0x3cu8; BATCH_BYTES];
    group.bench_function("crc32c_16KiB", |b| {
        b.iter(|| crc32c::crc32c(black_box(&data)))
    });
    group.finish();
}

/// A batch of 160 records of 100 bytes (about 16 KiB uncompressed) built and closed with each
/// codec, per uncompressed byte: what compression adds to a batch's close. The values are
/// random letters behind a per-record counter, as the perf tool's payloads.
fn bench_compress(c: &mut Criterion) {
    let mut group = c.benchmark_group("compress_16KiB");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let values: Vec<Vec<u8>> = (0..160u64)
        .map(|i| {
            let mut value: Vec<u8> = (0..100)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    b'A' + (state % 26) as u8
                })
                .collect();
            value[..8].copy_from_slice(&i.to_be_bytes());
            value
        })
        .collect();
    let build = |codec: Codec| {
        let mut builder = RecordBatchBuilder::with_codec(20_000, BASE_TIMESTAMP, codec);
        for (i, value) in values.iter().enumerate() {
            builder.append(BASE_TIMESTAMP + i as i64, None, Some(value), &[]);
        }
        builder.close()
    };
    group.throughput(Throughput::Bytes(build(Codec::None).len() as u64));
    for (name, codec) in [
        ("none", Codec::None),
        ("gzip", Codec::Gzip { level: -1 }),
        ("snappy", Codec::Snappy),
        ("lz4", Codec::Lz4 { level: 9 }),
        ("zstd", Codec::Zstd { level: 3 }),
    ] {
        group.bench_function(name, |b| b.iter(|| build(black_box(codec))));
    }
    group.finish();
}

fn bench_murmur2(c: &mut Criterion) {
    let mut group = c.benchmark_group("partitioner");
    let key = *b"user-0000012345x";
    group.throughput(Throughput::Bytes(key.len() as u64));
    group.bench_function("murmur2_16B", |b| b.iter(|| murmur2(black_box(&key))));
    group.finish();
}

fn config() -> Criterion {
    // Short windows: these loops are tight and stable, and the whole run stays well under a
    // minute.
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_encode, bench_stamp_and_crc, bench_compress, bench_murmur2
}
criterion_main!(benches);
