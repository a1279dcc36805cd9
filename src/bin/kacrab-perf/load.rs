//! What a load generator needs besides the producer: payloads that carry their record id, and
//! a pacer for a fixed send rate. Shared by `kacrab-perf` and the peer benchmark.

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};

use super::latency::Tracker;

/// Payload bytes: uppercase letters, as Kafka's tool uses, with the record's id in the first
/// eight bytes. Records are cut from shared chunks, so a record costs no allocation of its own.
///
/// A chunk is 64 KiB (or one record, if larger). The driver holds the chunk it cuts from and,
/// while the last records cut from it are being sent, the one before: 128 KiB of the process's
/// resident memory that is the driver's, not the producer's. With larger chunks that share
/// grows (1 MiB chunks held 2 MiB of heap at peak), and the peak RSS a benchmark reports for
/// kacrab would carry memory that librdkafka's driver, which hands over one reused buffer for
/// the client to copy, does not hold.
pub struct Payloads {
    template: Vec<u8>,
    chunk: BytesMut,
    chunk_records: usize,
}

impl Payloads {
    pub fn new(record_size: usize) -> Self {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let template = (0..record_size)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                b'A' + (state % 26) as u8
            })
            .collect();
        let chunk_records = ((64 << 10) / record_size.max(1)).max(1);
        Payloads {
            template,
            chunk: BytesMut::new(),
            chunk_records,
        }
    }

    /// The payload bytes before the id is written in.
    #[allow(dead_code)] // the peer benchmark's
    pub fn template(&self) -> &[u8] {
        &self.template
    }

    pub fn next(&mut self, id: u64) -> Bytes {
        let size = self.template.len();
        if self.chunk.capacity() - self.chunk.len() < size {
            self.chunk = BytesMut::with_capacity(self.chunk_records * size);
        }
        let start = self.chunk.len();
        self.chunk.put_slice(&self.template);
        if size >= 8 {
            self.chunk[start..start + 8].copy_from_slice(&id.to_be_bytes());
        }
        self.chunk.split_to(self.chunk.len()).freeze()
    }
}

/// Paces sends to a target rate: a record is sent once its due time has come. The thread
/// sleeps (with 1 ns timer slack) rather than spins, so pacing costs no CPU.
pub struct Pacer {
    start: Instant,
    interval_ns: f64,
}

impl Pacer {
    pub fn new(rate: f64) -> Self {
        // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64);
        }
        Pacer {
            start: Instant::now(),
            interval_ns: 1e9 / rate,
        }
    }

    /// When record `seq` is due, from the pacer's start.
    #[allow(dead_code)] // the peer benchmark's
    pub fn due(&self, seq: u64) -> Duration {
        Duration::from_nanos((seq as f64 * self.interval_ns) as u64)
    }

    #[allow(dead_code)] // the peer benchmark's
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    pub fn wait_for(&self, seq: u64) {
        let due = self.due(seq);
        let elapsed = self.start.elapsed();
        if due > elapsed + Duration::from_micros(2) {
            std::thread::sleep(due - elapsed);
        }
    }
}

/// Transactions of a run (Kafka's `ProducerPerformance --transaction-duration-ms`): one is
/// committed, and the next begun, once `duration` has passed since it began; the last one
/// commits at the end. The producer's `init_transactions` is the caller's.
#[derive(Debug, Clone, Copy)]
pub struct TransactionPacing {
    pub duration: Duration,
    /// The timeout of each transactional call.
    pub call_timeout: Duration,
}

/// What a run's deliveries came to.
#[derive(Debug, Default)]
pub struct Deliveries {
    pub errors: u64,
    pub first_error: Option<String>,
    pub transactions_committed: u64,
}

/// Sends `records` records of `payloads` through `producer`, paced by `pacer` if any, to
/// `partition(seq)` (`None`: the producer's partitioner), recording each record's latency in
/// the installed [`Tracker`]. Returns once every record has completed.
pub fn drive_kacrab(
    producer: &kacrab::Producer,
    topic: &str,
    records: u64,
    payloads: &mut Payloads,
    pacer: Option<&Pacer>,
    transactions: Option<TransactionPacing>,
    partition: impl Fn(u64) -> Option<i32>,
) -> Deliveries {
    use std::collections::VecDeque;
    use std::future::Future;
    use std::task::{Context, Poll};

    use kacrab::{DeliveryFuture, ProducerRecord};

    let tracker = Tracker::get();
    let topic: std::sync::Arc<str> = std::sync::Arc::from(topic);
    let mut pending: VecDeque<DeliveryFuture> = VecDeque::new();
    let mut out = Deliveries::default();
    let check = |out: &mut Deliveries,
                 result: Result<kacrab::RecordMetadata, kacrab::ProduceError>| {
        if let Err(e) = result {
            out.errors += 1;
            out.first_error.get_or_insert_with(|| e.to_string());
        }
    };
    // The caller has called `init_transactions`.
    if transactions.is_some() {
        if let Err(e) = producer.begin_transaction() {
            // Every send then fails with the transaction manager's error, and is counted.
            out.first_error.get_or_insert_with(|| e.to_string());
        }
    }
    let mut txn_began = Instant::now();
    for seq in 0..records {
        if let Some(t) = transactions {
            if txn_began.elapsed() >= t.duration {
                end_transaction(producer, t, &mut out);
                if let Err(e) = producer.begin_transaction() {
                    out.first_error.get_or_insert_with(|| e.to_string());
                }
                txn_began = Instant::now();
            }
        }
        if let Some(p) = pacer {
            p.wait_for(seq);
        }
        let mut record = ProducerRecord::new(topic.clone(), payloads.next(seq));
        record.partition = partition(seq);
        let sent = tracker.now();
        let waker = tracker.start(sent);
        let mut future = producer.send(record);
        let mut cx = Context::from_waker(&waker);
        match std::pin::Pin::new(&mut future).poll(&mut cx) {
            Poll::Ready(result) => {
                tracker.complete(sent);
                check(&mut out, result);
            }
            Poll::Pending => pending.push_back(future),
        }
        if seq % 64 == 0 {
            while let Some(result) = pending.front().and_then(DeliveryFuture::try_result) {
                pending.pop_front();
                check(&mut out, result);
            }
        }
    }
    match transactions {
        // A commit sends everything first.
        Some(t) => end_transaction(producer, t, &mut out),
        None => producer.flush(),
    }
    for f in pending.drain(..) {
        check(&mut out, f.wait());
    }
    // Every delivery is complete; wakers may still be finishing their bookkeeping.
    let settle = Instant::now();
    while tracker.histogram.count() < records && settle.elapsed() < Duration::from_secs(1) {
        std::thread::yield_now();
    }
    out
}

/// Records a task on a shard keeps in flight (`drive_on_shards`).
const ON_SHARD_WINDOW: usize = 16_384;

/// Thread-per-core all the way: sends `records` records of `payloads`'s size from tasks on the
/// shards themselves (`Producer::spawn_on_shard`), each to the partitions of `topic` its shard
/// owns (`Producer::shard_of`), so that no record crosses a thread. Records are split over the
/// partitions evenly; latency is recorded as `drive_kacrab` records it. Returns once every
/// record has completed.
pub fn drive_on_shards(
    producer: &kacrab::Producer,
    topic: &str,
    records: u64,
    partitions: i32,
    payloads: &mut Payloads,
) -> Deliveries {
    use std::collections::VecDeque;
    use std::future::Future;
    use std::task::{Context, Poll};

    use kacrab::{DeliveryFuture, ProducerRecord};

    let topic: std::sync::Arc<str> = std::sync::Arc::from(topic);
    let mut owned: Vec<Vec<i32>> = vec![Vec::new(); producer.shard_count()];
    for partition in 0..partitions {
        owned[producer.shard_of(&topic, partition)].push(partition);
    }
    // One payload for all: the id written into each is for checking a run's log, which this
    // mode does not do.
    let value = payloads.next(0);
    let tasks: Vec<_> = owned
        .into_iter()
        .enumerate()
        .filter(|(_, parts)| !parts.is_empty())
        .map(|(shard, parts)| {
            let share = records * parts.len() as u64 / partitions.max(1) as u64
                + u64::from(shard == 0) * (records % partitions.max(1) as u64);
            let (producer, topic, value) = (producer.clone(), topic.clone(), value.clone());
            producer.clone().spawn_on_shard(shard, move || async move {
                let tracker = Tracker::get();
                let mut pending: VecDeque<DeliveryFuture> = VecDeque::new();
                let mut out = Deliveries::default();
                let mut check = |result: Result<kacrab::RecordMetadata, kacrab::ProduceError>| {
                    if let Err(e) = result {
                        out.errors += 1;
                        out.first_error.get_or_insert_with(|| e.to_string());
                    }
                };
                for seq in 0..share {
                    let mut record = ProducerRecord::new(topic.clone(), value.clone());
                    record.partition = Some(parts[(seq % parts.len() as u64) as usize]);
                    let sent = tracker.now();
                    let waker = tracker.start(sent);
                    let mut future = producer.send_async(record).await;
                    let mut cx = Context::from_waker(&waker);
                    match std::pin::Pin::new(&mut future).poll(&mut cx) {
                        Poll::Ready(result) => {
                            tracker.complete(sent);
                            check(result);
                        }
                        Poll::Pending => pending.push_back(future),
                    }
                    if seq % 1024 == 0 {
                        while let Some(result) =
                            pending.front().and_then(DeliveryFuture::try_result)
                        {
                            pending.pop_front();
                            check(result);
                        }
                        // The shard's own loop sends what this task encoded, and the
                        // executor's reactor reads the answers: let both run (a task that
                        // only yields to its own queue would keep the reactor waiting).
                        glommio::executor().yield_task_queue_now().await;
                        // A window of records in flight, as a service bounds its own: on
                        // one thread, encoding outruns sending and everything would queue.
                        while pending.len() >= ON_SHARD_WINDOW {
                            // A sleep, not a yield: a task that stays runnable keeps the
                            // executor from its reactor (and so the shard from its answers)
                            // until glommio's preemption timer.
                            glommio::timer::sleep(Duration::from_micros(100)).await;
                            while let Some(result) =
                                pending.front().and_then(DeliveryFuture::try_result)
                            {
                                pending.pop_front();
                                check(result);
                            }
                        }
                    }
                }
                // Polled by result, not awaited: awaiting would replace the waker that
                // records the latency.
                while let Some(future) = pending.pop_front() {
                    loop {
                        if let Some(result) = future.try_result() {
                            check(result);
                            break;
                        }
                        glommio::timer::sleep(Duration::from_micros(200)).await;
                    }
                }
                out
            })
        })
        .collect();
    let mut out = Deliveries::default();
    for task in tasks {
        match task.join() {
            Ok(d) => {
                out.errors += d.errors;
                if out.first_error.is_none() {
                    out.first_error = d.first_error;
                }
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    let tracker = Tracker::get();
    let settle = Instant::now();
    while tracker.histogram.count() < records && settle.elapsed() < Duration::from_secs(1) {
        std::thread::yield_now();
    }
    out
}

/// Commits the open transaction; an abortable failure aborts it (its records then fail and are
/// counted as errors).
fn end_transaction(producer: &kacrab::Producer, t: TransactionPacing, out: &mut Deliveries) {
    match producer.commit_transaction(t.call_timeout) {
        Ok(()) => out.transactions_committed += 1,
        Err(e) => {
            out.first_error.get_or_insert_with(|| e.to_string());
            if e.is_abortable() {
                let _ = producer.abort_transaction(t.call_timeout);
            }
        }
    }
}
