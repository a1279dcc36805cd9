//! The peer clients of the benchmark (librdkafka through the `rdkafka` crate, rskafka) and the
//! loopback TCP runs that bound what any client can reach here.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::latency::Tracker;
use super::load::Payloads;
use super::{procstat, Outcome, RunSpec};

static RD_ERRORS: AtomicU64 = AtomicU64::new(0);
/// librdkafka's `tx_bytes` statistic from its latest statistics callback, and how many
/// callbacks came.
static RD_TX_BYTES: AtomicU64 = AtomicU64::new(0);
static RD_STATS: AtomicU64 = AtomicU64::new(0);

struct RdContext;

impl rdkafka::ClientContext for RdContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        RD_TX_BYTES.store(statistics.tx_bytes.max(0) as u64, Ordering::Relaxed);
        RD_STATS.fetch_add(1, Ordering::Release);
    }
}

/// librdkafka's `tx_bytes` as of a statistics callback produced wholly after this call: the
/// second callback from now (the first may have been produced before). The statistics
/// interval is 500 ms, so this waits about a second, after the measured run.
fn librdkafka_tx_bytes_now() -> u64 {
    let seen = RD_STATS.load(Ordering::Acquire);
    let deadline = Instant::now() + Duration::from_secs(5);
    while RD_STATS.load(Ordering::Acquire) < seen + 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    RD_TX_BYTES.load(Ordering::Relaxed)
}

impl rdkafka::producer::ProducerContext for RdContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, sent: usize) {
        let tracker = Tracker::get();
        tracker
            .histogram
            .record(tracker.now().saturating_sub(sent as u64));
        if result.is_err() {
            RD_ERRORS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub(super) fn run_librdkafka(spec: &RunSpec) -> Result<Outcome> {
    use rdkafka::config::ClientConfig;
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    use rdkafka::util::Timeout;

    let mut config = ClientConfig::new();
    if spec.txn_ms > 0 {
        config.set("transactional.id", "peers-librdkafka");
    }
    let producer: ThreadedProducer<RdContext> = config
        .set("bootstrap.servers", &spec.bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("max.in.flight.requests.per.connection", "5")
        .set("linger.ms", spec.linger_ms.to_string())
        .set("batch.size", spec.batch_size.to_string())
        .set("batch.num.messages", "1000000")
        .set("statistics.interval.ms", "500")
        .set("compression.type", spec.compression.as_str())
        .set(
            "message.max.bytes",
            (spec.batch_size.max(1 << 20) + 4096).to_string(),
        )
        // The same 32 MiB of buffer as the others (librdkafka counts payload bytes).
        .set("queue.buffering.max.kbytes", (32 << 10).to_string())
        .set(
            "queue.buffering.max.messages",
            spec.max_outstanding().to_string(),
        )
        .create_with_context(RdContext)?;
    let tracker = Tracker::install();
    let call = Duration::from_secs(30);
    let txn = spec.txn_ms > 0;
    if txn {
        producer.init_transactions(call)?;
        producer.begin_transaction()?;
    }
    let warm = [0u8; 8];
    for p in 0..spec.partitions {
        producer
            .send(
                BaseRecord::<(), [u8], usize>::with_opaque_to(&spec.topic, 0)
                    .payload(&warm[..])
                    .partition(p),
            )
            .map_err(|(e, _)| e)?;
    }
    if txn {
        producer.commit_transaction(call)?;
    } else {
        producer.flush(Timeout::After(Duration::from_secs(30)))?;
    }
    tracker.histogram.reset();
    RD_ERRORS.store(0, Ordering::Relaxed);

    let mut payload = Payloads::new(spec.size).template().to_vec();
    let pacer = spec.pacer();
    let cpu0 = procstat::process_cpu();
    let start = Instant::now();
    if txn {
        producer.begin_transaction()?;
    }
    let mut txn_began = Instant::now();
    for seq in 0..spec.records {
        if let Some(p) = &pacer {
            p.wait_for(seq);
        }
        if txn && txn_began.elapsed() >= Duration::from_millis(spec.txn_ms) {
            producer.commit_transaction(call)?;
            producer.begin_transaction()?;
            txn_began = Instant::now();
        }
        if payload.len() >= 8 {
            payload[..8].copy_from_slice(&seq.to_be_bytes());
        }
        let sent = tracker.now() as usize;
        let mut record = BaseRecord::<(), [u8], usize>::with_opaque_to(&spec.topic, sent)
            .payload(&payload[..])
            .partition(spec.partition(seq));
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err((e, _)) => {
                    eprintln!("librdkafka: send failed: {e}");
                    RD_ERRORS.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
    }
    if txn {
        // A commit flushes first.
        producer.commit_transaction(Duration::from_secs(120))?;
    } else {
        producer.flush(Timeout::After(Duration::from_secs(120)))?;
    }
    let elapsed = start.elapsed();
    let cpu = procstat::process_cpu() - cpu0;
    let mut outcome = Outcome::from_histogram(
        spec.records,
        elapsed,
        RD_ERRORS.load(Ordering::Relaxed),
        cpu,
    );
    outcome.wire_bytes = librdkafka_tx_bytes_now();
    Ok(outcome)
}

pub(super) fn run_rskafka(spec: &RunSpec) -> Result<Outcome> {
    use futures::stream::{FuturesUnordered, StreamExt};
    use rskafka::client::partition::UnknownTopicHandling;
    use rskafka::client::producer::aggregator::RecordAggregator;
    use rskafka::client::producer::BatchProducerBuilder;
    use rskafka::client::ClientBuilder;
    use rskafka::record::Record;
    use std::sync::Arc;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = ClientBuilder::new(spec.bootstrap.split(',').map(String::from).collect())
            .build()
            .await?;
        let mut producers = Vec::new();
        for p in 0..spec.partitions {
            let partition = Arc::new(
                client
                    .partition_client(spec.topic.as_str(), p, UnknownTopicHandling::Retry)
                    .await?,
            );
            producers.push(
                BatchProducerBuilder::new(partition)
                    .with_linger(Duration::from_millis(spec.linger_ms))
                    .build(RecordAggregator::new(spec.batch_size)),
            );
        }
        let record = |value: Vec<u8>| Record {
            key: None,
            value: Some(value),
            headers: Default::default(),
            timestamp: chrono::Utc::now(),
        };
        for producer in &producers {
            producer.produce(record(vec![0u8; 8])).await?;
        }
        let tracker = Tracker::install();
        let template = Payloads::new(spec.size).template().to_vec();
        let pacer = spec.pacer();
        let errors = AtomicU64::new(0);
        let limit = spec.max_outstanding();
        let mut in_flight = FuturesUnordered::new();
        let cpu0 = procstat::process_cpu();
        let start = Instant::now();
        for seq in 0..spec.records {
            if let Some(p) = &pacer {
                let due = p.due(seq);
                // Keep completing records while waiting for the next send time.
                loop {
                    let now = p.elapsed();
                    if now >= due {
                        break;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(due - now) => {}
                        Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
                    }
                }
            }
            while in_flight.len() >= limit {
                in_flight.next().await;
            }
            let mut value = template.clone();
            if value.len() >= 8 {
                value[..8].copy_from_slice(&seq.to_be_bytes());
            }
            let sent = tracker.now();
            let producer = &producers[spec.partition(seq) as usize];
            let errors = &errors;
            let rec = record(value);
            in_flight.push(async move {
                if producer.produce(rec).await.is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                tracker.histogram.record(tracker.now().saturating_sub(sent));
            });
            // Enqueue it (its first poll adds it to the batch) and collect what completed.
            while let Some(Some(())) = futures::FutureExt::now_or_never(in_flight.next()) {}
        }
        while in_flight.next().await.is_some() {}
        for producer in &producers {
            producer.flush().await?;
        }
        let elapsed = start.elapsed();
        let cpu = procstat::process_cpu() - cpu0;
        Ok(Outcome::from_histogram(
            spec.records,
            elapsed,
            errors.load(Ordering::Relaxed),
            cpu,
        ))
    })
}

/// Loopback TCP bandwidth: one thread writes `records × size` bytes in 64 KiB writes, another
/// reads and discards them. The ceiling for large records.
pub(super) fn run_loopback(spec: &RunSpec) -> Result<Outcome> {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    let total = spec.records * spec.size as u64;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 256 << 10];
        let mut got = 0u64;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(got);
            }
            got += n as u64;
        }
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let chunk = vec![0x5au8; 64 << 10];
    Tracker::install();
    let cpu0 = procstat::process_cpu();
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < total {
        let n = (total - sent).min(chunk.len() as u64) as usize;
        s.write_all(&chunk[..n])?;
        sent += n as u64;
    }
    drop(s);
    let got = reader.join().expect("reader")?;
    let elapsed = start.elapsed();
    if got != total {
        bail!("loopback read {got} of {total} bytes");
    }
    Ok(Outcome::from_histogram(
        spec.records,
        elapsed,
        0,
        procstat::process_cpu() - cpu0,
    ))
}

/// Loopback TCP round trips: `size` bytes out, the same back from an echo thread, one at a
/// time (TCP_NODELAY, up to 50,000 round trips). The floor under any request latency here.
pub(super) fn run_loopback_rtt(spec: &RunSpec) -> Result<Outcome> {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    let rounds = spec.records.min(50_000);
    let size = spec.size;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut buf = vec![0u8; size];
        loop {
            if s.read_exact(&mut buf).is_err() {
                return Ok(());
            }
            s.write_all(&buf)?;
        }
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let out = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let tracker = Tracker::install();
    let cpu0 = procstat::process_cpu();
    let start = Instant::now();
    for _ in 0..rounds {
        let sent = tracker.now();
        s.write_all(&out)?;
        s.read_exact(&mut back)?;
        tracker.histogram.record(tracker.now() - sent);
    }
    let elapsed = start.elapsed();
    drop(s);
    let _ = echo.join();
    Ok(Outcome::from_histogram(
        rounds,
        elapsed,
        0,
        procstat::process_cpu() - cpu0,
    ))
}
