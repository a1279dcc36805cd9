//! The kacrab clients of the peer benchmark: per-record `send` and `send_batch`, and the null
//! producer that runs the same driver around a `send` that does no work.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::latency::Tracker;
use super::load::{self, Pacer, Payloads};
use super::{procstat, Outcome, RunSpec};

/// kacrab with `Producer::send` per record (`load::drive_kacrab`), or with `send_batch` over
/// chunks (`drive_kacrab_batch`); the producer and its warm-up are the same.
pub(super) fn run_kacrab(spec: &RunSpec, batch: bool) -> Result<Outcome> {
    use kacrab::{Producer, ProducerRecord};
    let mut builder = Producer::builder()
        .set("bootstrap.servers", spec.bootstrap.as_str())
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("max.in.flight.requests.per.connection", "5")
        .set("linger.ms", spec.linger_ms.to_string())
        .set("batch.size", spec.batch_size.to_string())
        .set("buffer.memory", (32u64 << 20).to_string())
        .set(
            "max.request.size",
            (spec.batch_size.max(1 << 20) + 4096).to_string(),
        )
        .set("compression.type", spec.compression.as_str());
    if spec.shards > 0 {
        builder = builder.set("kacrab.shards", spec.shards.to_string());
    }
    if spec.spin_us > 0 {
        builder = builder.set("kacrab.spin.before.park.us", spec.spin_us.to_string());
    }
    if spec.txn_ms > 0 {
        builder = builder.set("transactional.id", "peers-kacrab");
    }
    let producer = builder.build()?;
    let call = Duration::from_secs(30);
    let transactions = (spec.txn_ms > 0).then(|| load::TransactionPacing {
        duration: Duration::from_millis(spec.txn_ms),
        call_timeout: call,
    });
    // Warm-up: connections, metadata, producer id (and the coordinator, in a transaction).
    if transactions.is_some() {
        producer.init_transactions(call)?;
        producer.begin_transaction()?;
    }
    let warm: Vec<_> = (0..spec.partitions)
        .map(|p| {
            producer.send(ProducerRecord::new(spec.topic.as_str(), vec![0u8; 8]).with_partition(p))
        })
        .collect();
    if transactions.is_some() {
        producer.commit_transaction(call)?;
    }
    for f in warm {
        f.wait()?;
    }
    Tracker::install();
    let mut payloads = Payloads::new(spec.size);
    let pacer = spec.pacer();
    let cpu0 = procstat::process_cpu();
    let start = Instant::now();
    let d = if batch {
        drive_kacrab_batch(&producer, spec, &mut payloads, pacer.as_ref(), transactions)
    } else {
        load::drive_kacrab(
            &producer,
            &spec.topic,
            spec.records,
            &mut payloads,
            pacer.as_ref(),
            transactions,
            |seq| Some(spec.partition(seq)),
        )
    };
    let elapsed = start.elapsed();
    let cpu = procstat::process_cpu() - cpu0;
    if let Some(e) = &d.first_error {
        eprintln!("{}: {} errors, first: {e}", spec.client, d.errors);
    }
    let mut outcome = Outcome::from_histogram(spec.records, elapsed, d.errors, cpu);
    outcome.wire_bytes = producer.metrics().outgoing_byte_total;
    producer.close(Duration::from_secs(10));
    Ok(outcome)
}

/// The payload bytes one `send_batch` call of `kacrab-batch` carries at most.
const MAX_CHUNK_BYTES: usize = 256 << 10;

/// `kacrab-batch`'s driver: the records `load::drive_kacrab` makes (same payloads, topic,
/// partitions, pacing and transaction clock), handed to `Producer::send_batch` in chunks of
/// `spec.chunk` records and at most `MAX_CHUNK_BYTES` of payload. Under a rate a chunk also goes as soon as the next record is not due yet: the
/// driver would otherwise hold records it has while it sleeps, which no application does.
///
/// A second thread waits each chunk's `BatchDelivery` in the order sent, and counts every
/// record's result. A record's latency runs from when it was made (its timestamp is taken
/// as the per-record driver takes it, before the record joins its chunk) to when its chunk's
/// `wait` returns, which is when a caller of the batch API learns it. The channel to that
/// thread bounds the chunks outstanding to what 32 MiB of buffer holds, as the other drivers
/// bound their records, so the driver's memory stays bounded whatever the run's length.
fn drive_kacrab_batch(
    producer: &kacrab::Producer,
    spec: &RunSpec,
    payloads: &mut Payloads,
    pacer: Option<&Pacer>,
    transactions: Option<load::TransactionPacing>,
) -> load::Deliveries {
    use kacrab::{BatchDelivery, ProducerRecord};

    let tracker = Tracker::get();
    let topic: std::sync::Arc<str> = std::sync::Arc::from(spec.topic.as_str());
    // A chunk is `spec.chunk` records, or fewer when they would hold more than
    // `MAX_CHUNK_BYTES` of payload: a bridge hands over what one poll brought, and a poll is
    // bounded in bytes too (the consumer's `fetch.max.bytes`).
    let chunk_len = spec.chunk.min(MAX_CHUNK_BYTES / spec.size.max(1)).max(1);
    // At least two: one filling while the waiter waits on another.
    let outstanding = (spec.max_outstanding() / chunk_len).max(2);
    // The waiter holds one chunk while the channel holds the rest.
    let (to_waiter, waiting) =
        std::sync::mpsc::sync_channel::<(BatchDelivery, Vec<u64>)>(outstanding - 1);
    let mut out = load::Deliveries::default();
    let waited = std::thread::scope(|scope| {
        let waiter = scope.spawn(move || {
            let mut out = load::Deliveries::default();
            for (delivery, sent) in waiting {
                let results = delivery.wait();
                let now = tracker.now();
                for (result, sent) in results.into_iter().zip(sent) {
                    tracker.histogram.record(now.saturating_sub(sent));
                    if let Err(e) = result {
                        out.errors += 1;
                        out.first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            out
        });
        // The waiter ends when the sender is dropped, with this closure.
        let send = move |chunk: &mut Vec<ProducerRecord>, sent: &mut Vec<u64>| {
            let delivery = producer.send_batch(chunk.drain(..));
            let stamps = std::mem::replace(sent, Vec::with_capacity(chunk_len));
            to_waiter
                .send((delivery, stamps))
                .expect("the waiter runs until the sender is dropped");
        };
        // The caller has called `init_transactions`.
        if transactions.is_some() {
            if let Err(e) = producer.begin_transaction() {
                // Every send then fails with the transaction manager's error, and is counted.
                out.first_error.get_or_insert_with(|| e.to_string());
            }
        }
        let mut txn_began = Instant::now();
        // Transactions roll over between chunks: a chunk is all in one transaction.
        let mut roll = |out: &mut load::Deliveries| {
            if let Some(t) = transactions {
                if txn_began.elapsed() >= t.duration {
                    end_transaction(producer, t, out);
                    if let Err(e) = producer.begin_transaction() {
                        out.first_error.get_or_insert_with(|| e.to_string());
                    }
                    txn_began = Instant::now();
                }
            }
        };
        let mut chunk: Vec<ProducerRecord> = Vec::with_capacity(chunk_len);
        let mut sent: Vec<u64> = Vec::with_capacity(chunk_len);
        for seq in 0..spec.records {
            if let Some(p) = pacer {
                if !chunk.is_empty() && p.due(seq) > p.elapsed() {
                    send(&mut chunk, &mut sent);
                    roll(&mut out);
                }
                p.wait_for(seq);
            }
            let mut record = ProducerRecord::new(topic.clone(), payloads.next(seq));
            record.partition = Some(spec.partition(seq));
            sent.push(tracker.now());
            chunk.push(record);
            if chunk.len() == chunk_len {
                send(&mut chunk, &mut sent);
                roll(&mut out);
            }
        }
        if !chunk.is_empty() {
            send(&mut chunk, &mut sent);
        }
        drop(send);
        match transactions {
            // A commit sends everything first.
            Some(t) => end_transaction(producer, t, &mut out),
            None => producer.flush(),
        }
        waiter.join().expect("the waiter does not panic")
    });
    out.errors += waited.errors;
    if out.first_error.is_none() {
        out.first_error = waited.first_error;
    }
    out
}

/// Commits the open transaction; an abortable failure aborts it (its records then fail and are
/// counted as errors). As `load::drive_kacrab` ends its transactions.
fn end_transaction(
    producer: &kacrab::Producer,
    t: load::TransactionPacing,
    out: &mut load::Deliveries,
) {
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

/// The null producer: a `send` that does no work. It takes the record and hands back a result
/// that is already known, so that a run of it measures the driver around the producer.
struct NullProducer;

/// The null producer's delivery handle: ready from its first poll.
struct NullDelivery(Option<Result<kacrab::RecordMetadata, kacrab::ProduceError>>);

impl NullProducer {
    fn send(&self, record: kacrab::ProducerRecord) -> NullDelivery {
        // The optimiser must not see through the record: it is made, then given away, as a
        // real send gives it away.
        let record = std::hint::black_box(record);
        NullDelivery(Some(Ok(kacrab::RecordMetadata {
            topic: record.topic,
            partition: record.partition.unwrap_or(-1),
            offset: -1,
            timestamp: -1,
        })))
    }
}

impl NullDelivery {
    /// The result if known (`DeliveryFuture::try_result`'s place in the driver).
    fn try_take(&mut self) -> Option<Result<kacrab::RecordMetadata, kacrab::ProduceError>> {
        self.0.take()
    }
}

impl std::future::Future for NullDelivery {
    type Output = Result<kacrab::RecordMetadata, kacrab::ProduceError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::task::Poll::Ready(self.0.take().expect("polled once"))
    }
}

/// `load::drive_kacrab` step for step, with the null producer: the same records (payloads cut
/// from shared chunks, an `Arc` topic, an explicit partition), the same pacing and transaction
/// clock, the same send timestamp, waker and poll, the same checks of results. Only `send`
/// differs, so the gap between a kacrab run and this one is what kacrab's `send` and its
/// shards cost.
fn drive_null(
    producer: &NullProducer,
    spec: &RunSpec,
    payloads: &mut Payloads,
    pacer: Option<&Pacer>,
) -> load::Deliveries {
    use std::collections::VecDeque;
    use std::future::Future;
    use std::task::{Context, Poll};

    let tracker = Tracker::get();
    let topic: std::sync::Arc<str> = std::sync::Arc::from(spec.topic.as_str());
    let mut pending: VecDeque<NullDelivery> = VecDeque::new();
    let mut out = load::Deliveries::default();
    let check = |out: &mut load::Deliveries,
                 result: Result<kacrab::RecordMetadata, kacrab::ProduceError>| {
        if let Err(e) = result {
            out.errors += 1;
            out.first_error.get_or_insert_with(|| e.to_string());
        }
    };
    // Transactions cost the null producer nothing, but the driver still keeps their clock.
    let txn = Duration::from_millis(spec.txn_ms);
    let mut txn_began = Instant::now();
    for seq in 0..spec.records {
        if spec.txn_ms > 0 && txn_began.elapsed() >= txn {
            out.transactions_committed += 1;
            txn_began = Instant::now();
        }
        if let Some(p) = pacer {
            p.wait_for(seq);
        }
        let mut record = kacrab::ProducerRecord::new(topic.clone(), payloads.next(seq));
        record.partition = Some(spec.partition(seq));
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
            while let Some(result) = pending.front_mut().and_then(NullDelivery::try_take) {
                pending.pop_front();
                check(&mut out, result);
            }
        }
    }
    out
}

pub(super) fn run_null(spec: &RunSpec) -> Result<Outcome> {
    let producer = NullProducer;
    Tracker::install();
    let mut payloads = Payloads::new(spec.size);
    let pacer = spec.pacer();
    let cpu0 = procstat::process_cpu();
    let start = Instant::now();
    let d = drive_null(&producer, spec, &mut payloads, pacer.as_ref());
    let elapsed = start.elapsed();
    let cpu = procstat::process_cpu() - cpu0;
    Ok(Outcome::from_histogram(
        spec.records,
        elapsed,
        d.errors,
        cpu,
    ))
}
