//! The caller-to-shard path on its own, for the `handoff` benchmark: application threads hand
//! records to a shard through its real inbox with real delivery handles, and a glommio
//! executor appends them into a real engine's batches (encoding each record), as a shard
//! does. No broker: the engine keeps the batches, and their records resolve `OutcomeUnknown`
//! when the run ends.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use glommio::LocalExecutorBuilder;

use crate::config::ProducerConfig;
use crate::engine::{Engine, EngineConfig, TopicPartition};
use crate::producer::delivery::DeliveryHandle;
use crate::producer::shared::{release_sink, BufferMemory};
use crate::protocol::record_batch::Header;
use crate::runtime::command::{OwnedRecord, ShardCommand};
use crate::runtime::inbox::ShardInbox;

/// `threads` threads each hand `per_thread` records with `value` to one shard, spread over
/// `partitions` partitions; returns the time from the start until the shard has appended the
/// last one.
pub fn send_to_encoded(threads: usize, per_thread: u64, partitions: i32, value: Bytes) -> Duration {
    let inbox = Arc::new(ShardInbox::default());
    let memory = Arc::new(BufferMemory::new(usize::MAX / 2));
    let total = threads as u64 * per_thread;
    let start = Arc::new(Barrier::new(threads + 1));
    let shard = {
        let (inbox, memory, start) = (inbox.clone(), memory.clone(), start.clone());
        LocalExecutorBuilder::default()
            .io_memory(64 << 10)
            .spawn(move || async move {
                let config = ProducerConfig::builder()
                    .bootstrap_servers("127.0.0.1:9")
                    .build()
                    .expect("config");
                let mut engine: Engine<DeliveryHandle> =
                    Engine::new(EngineConfig::from_producer_config(&config, true));
                let epoch = Instant::now();
                let mut local = std::collections::VecDeque::new();
                let mut appended = 0u64;
                start.wait();
                let began = Instant::now();
                while appended < total {
                    inbox.take_all(&mut local);
                    if local.is_empty() {
                        inbox.parked(u64::MAX).await;
                        continue;
                    }
                    let now = epoch.elapsed().as_micros() as u64;
                    for command in local.drain(..) {
                        if let ShardCommand::Append(mut record) = command {
                            record.delivery.entering_engine();
                            let headers: [Header<'_>; 0] = [];
                            engine.append(
                                now,
                                &record.tp,
                                record.timestamp,
                                None,
                                record.value.as_deref(),
                                &headers,
                                record.delivery,
                            );
                            appended += 1;
                        }
                    }
                    release_sink::flush_to(&memory);
                }
                let elapsed = began.elapsed();
                drop(engine);
                release_sink::flush_to(&memory);
                elapsed
            })
            .expect("shard executor")
    };
    let topic: Arc<str> = Arc::from("handoff");
    let callers: Vec<_> = (0..threads)
        .map(|_| {
            let (inbox, memory, start) = (inbox.clone(), memory.clone(), start.clone());
            let (topic, value) = (topic.clone(), value.clone());
            std::thread::spawn(move || {
                start.wait();
                for i in 0..per_thread {
                    let size = 100;
                    memory.reserve(size, Instant::now).expect("room");
                    let partition = (i % partitions as u64) as i32;
                    let (delivery, future) =
                        DeliveryHandle::new(topic.clone(), partition, memory.id(), size);
                    drop(future);
                    let command = ShardCommand::Append(OwnedRecord {
                        tp: TopicPartition {
                            topic: topic.clone(),
                            partition,
                        },
                        timestamp: 1_700_000_000_000,
                        key: None,
                        value: Some(value.clone()),
                        headers: Vec::new(),
                        delivery,
                        txn_barrier: 0,
                    });
                    if inbox.push_record(command, size, size).is_err() {
                        unreachable!("the inbox is never closed here");
                    }
                }
            })
        })
        .collect();
    for caller in callers {
        caller.join().expect("caller thread");
    }
    shard.join().expect("shard")
}

/// `threads` threads each make the transactional check `send` makes before it queues a record
/// (`TxnStatus::check_send`, an open transaction) `per_thread` times; returns the time until
/// the last thread is done.
pub fn txn_send_checks(threads: usize, per_thread: u64) -> Duration {
    let status = Arc::new(crate::runtime::txn_driver::TxnStatus::open_for_bench());
    let start = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (status, start) = (status.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..per_thread {
                    std::hint::black_box(status.check_send().expect("open transaction"));
                }
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    for worker in workers {
        worker.join().expect("checking thread");
    }
    began.elapsed()
}
