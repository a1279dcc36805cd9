//! The caller-to-shard path on its own, for the `handoff` benchmark: application threads encode
//! records into their partitions' batches through the producer's real accumulator, and a
//! glommio executor takes the batches into a real engine through a real intake, as a shard
//! does. No broker: the engine keeps the batches, and their records resolve `OutcomeUnknown`
//! when the run ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use glommio::LocalExecutorBuilder;

use crate::config::ProducerConfig;
use crate::engine::buffer_pool::BufferPool;
use crate::engine::{Engine, EngineConfig};
use crate::producer::accumulator::{Accumulator, Append};
use crate::protocol::compression::Codec;
use crate::protocol::record_batch::{Header, RECORD_BATCH_OVERHEAD};
use crate::runtime::buffer_memory::{release_sink, BufferMemory};
use crate::runtime::command::ShardCommand;
use crate::runtime::delivery_handle::DeliveryHandle;
use crate::runtime::inbox::ShardInbox;
use crate::runtime::intake::Intake;
use crate::runtime::txn_driver::TxnDriver;

/// `threads` threads each send `per_thread` records with `value` to one shard, spread over
/// `partitions` partitions (`batch.size` 16384, `linger.ms` 0); returns the time from the
/// start until the shard has taken the last batch into its engine.
pub fn send_to_encoded(threads: usize, per_thread: u64, partitions: i32, value: Bytes) -> Duration {
    let inbox = Arc::new(ShardInbox::default());
    let memory = Arc::new(BufferMemory::new(usize::MAX / 2));
    let config = ProducerConfig::builder()
        .bootstrap_servers("127.0.0.1:9")
        .build()
        .expect("config");
    let engine_config = EngineConfig::from_producer_config(&config, true);
    let pool = Arc::new(BufferPool::new(
        engine_config.batch_size,
        engine_config.buffer_pool_idle,
    ));
    let accumulator = Arc::new(Accumulator::new(
        vec![inbox.clone()],
        vec![pool.clone()],
        memory.clone(),
        |_, _| 0,
        engine_config.batch_size,
        Codec::None,
    ));
    let start = Arc::new(Barrier::new(threads + 1));
    let senders_done = Arc::new(AtomicBool::new(false));
    let shard = {
        let (inbox, memory, start) = (inbox.clone(), memory.clone(), start.clone());
        let senders_done = senders_done.clone();
        LocalExecutorBuilder::default()
            .io_memory(64 << 10)
            .spawn(move || async move {
                let mut engine: Engine<DeliveryHandle> =
                    Engine::new(engine_config).with_buffer_pool(pool);
                let mut intake = Intake::new(0);
                let txn = TxnDriver::new(0);
                let epoch = inbox.epoch();
                let mut local = std::collections::VecDeque::new();
                start.wait();
                let began = Instant::now();
                loop {
                    // Read before the take: once the senders are done, this take finds every
                    // batch they made.
                    let last = senders_done.load(Ordering::Acquire);
                    inbox.take_all(&mut local);
                    for command in local.drain(..) {
                        if let ShardCommand::Queue(notice) = command {
                            intake.notice(notice.take());
                        }
                    }
                    let now = epoch.elapsed().as_micros() as u64;
                    intake.take_into(&mut engine, &txn, now, last, &[]);
                    release_sink::flush_to(&memory);
                    if last {
                        break;
                    }
                    if intake.is_empty() {
                        inbox.parked(u64::MAX).await;
                    }
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
            let (accumulator, start) = (accumulator.clone(), start.clone());
            let (topic, value) = (topic.clone(), value.clone());
            std::thread::spawn(move || {
                start.wait();
                let headers: [Header<'_>; 0] = [];
                for i in 0..per_thread {
                    let partition = (i % partitions as u64) as i32;
                    let append = Append {
                        timestamp: 1_700_000_000_000,
                        key: None,
                        value: Some(&value),
                        headers: &headers,
                        upper_bound: RECORD_BATCH_OVERHEAD + 36 + value.len(),
                        txn_barrier: 0,
                    };
                    let appended = accumulator.with_queue(&topic, partition, |queue| {
                        accumulator.append(queue, &append, None, |_| Ok::<(), ()>(()))
                    });
                    drop(appended.ok().expect("room"));
                }
            })
        })
        .collect();
    start.wait();
    for caller in callers {
        caller.join().expect("caller thread");
    }
    senders_done.store(true, Ordering::Release);
    inbox.nudge();
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
