//! Side-by-side benchmark of kacrab and other Kafka producers: librdkafka (the `rdkafka`
//! crate's `ThreadedProducer`), rskafka (tokio) and, where a JDK is present, the Java client
//! (kafka-clients 3.9.1, harness in `benches/peers/java/`).
//!
//! `cargo bench --bench peers` runs every scenario against both brokers:
//! - `reference`: the crate's reference cluster, in its own process (`kacrab-perf
//!   --broker-process`);
//! - `mock`: librdkafka's mock cluster, in its own process (this binary, `--broker-process`).
//!
//! Every client run is its own child process (this binary with `--client NAME`, or the JVM),
//! against a broker process started fresh for that run, so CPU time (getrusage) and peak RSS
//! (VmHWM) are the client's alone. Clients are interleaved: repetition r starts with the r-th
//! client. Each run first sends and awaits one record per partition (connections, metadata,
//! producer id), then measures. Medians over the repetitions are printed with ratios against
//! librdkafka (records/s also against rskafka).
//!
//! The clients:
//! - `null`: the kacrab driver with a producer whose `send` does no work: it hands back a result
//!   that is already known, which the driver polls and checks as it does kacrab's. Every record
//!   is still made (payload, topic, partition), paced, timestamped, its latency recorded and
//!   its result checked. A run of it is the cost of the driver alone. Every other client's
//!   figure holds the same driver work (its harness makes, paces, stamps and counts the same
//!   records, in its own way), so the tables also give each client's CPU time above the null
//!   producer's (its median CPU − the null producer's median CPU, same run) and the ratio of
//!   that to librdkafka's. The plain CPU ratio has the driver's cost on both sides, which pulls
//!   it towards 1 and hides how much the producers themselves differ; the ratio above null
//!   compares what the producers spend.
//! - `kacrab`: `Producer::send` per record, a waker per record that records its latency.
//! - `kacrab-batch`: `Producer::send_batch` over chunks of `PEERS_BATCH` records, at most
//!   256 KiB of payload each (under a send rate, a chunk also goes as soon as the next record
//!   is not due yet, as a bridge sends what one poll brought). A second thread waits each `BatchDelivery` in order and counts each
//!   record's result, with at most 32 MiB of buffer's worth of chunks outstanding; a record's
//!   latency runs from when it was made to when its chunk's `wait` returns.
//! - `librdkafka`: `ThreadedProducer::send` per record, latency from the delivery callback.
//! - `rskafka`: its `BatchProducer` per partition, with `linger.ms` and
//!   `RecordAggregator::new(batch.size)` (the scenario's `batch.size` in bytes, as the other
//!   clients get it). That is rskafka's batch mode: `produce` adds a record to the aggregator's
//!   batch and resolves once the batch is written, and the harness keeps up to 32 MiB of
//!   buffer's worth of records in flight, so batches fill to `batch.size` or `linger.ms`.
//!   (rskafka's lower `PartitionClient::produce` sends one request per call and leaves the
//!   batching to the caller.) The tables give records/s against rskafka as well as against
//!   librdkafka.
//! - `java`: `KafkaProducer.send` with a callback.
//!
//! Environment:
//! - `PEERS_BROKERS`: `reference,mock` (default both);
//! - `PEERS_SCENARIOS`: any of `small,large,latency,shards,txn,lz4,zstd` (default all);
//! - `PEERS_CLIENTS`: any of `null,kacrab,kacrab-batch,librdkafka,rskafka,java` (default all
//!   available);
//! - `PEERS_REPS`: repetitions (default 3);
//! - `PEERS_SCALE`: multiplies record counts (default 1; e.g. 0.1 for a quick pass);
//! - `PEERS_BATCH`: records per `send_batch` call of `kacrab-batch` (default 1000, fewer when
//!   they would carry more than 256 KiB);
//! - `PEERS_JAVA_LIB`: a folder holding kafka-clients.jar and slf4j-api.jar (default: fetched
//!   by `benches/peers/java/fetch-jars.sh` into the target folder).

#[allow(dead_code, unused_imports)]
#[path = "../src/bin/kacrab-perf/embedded.rs"]
mod embedded;
#[allow(dead_code, unused_imports)]
#[path = "../src/bin/kacrab-perf/latency.rs"]
mod latency;
#[allow(dead_code, unused_imports)]
#[path = "../src/bin/kacrab-perf/load.rs"]
mod load;
#[allow(dead_code, unused_imports)]
#[path = "../src/bin/kacrab-perf/procstat.rs"]
mod procstat;

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};

use embedded::BrokerChild;
use latency::Tracker;
use load::{Pacer, Payloads};

/// One client run's parameters; passed to the client child as `--key value` pairs.
#[derive(Debug, Clone)]
struct RunSpec {
    client: String,
    bootstrap: String,
    topic: String,
    partitions: i32,
    records: u64,
    size: usize,
    /// Records per second; 0 is unthrottled.
    rate: f64,
    linger_ms: u64,
    batch_size: usize,
    shards: usize,
    /// kacrab.spin.before.park.us (kacrab only); 0 is off.
    spin_us: u64,
    /// Transactions of this many ms each (commit, then begin the next); 0 is none.
    txn_ms: u64,
    /// `compression.type`.
    compression: String,
    /// Records per `send_batch` call (`kacrab-batch` only).
    chunk: usize,
}

impl RunSpec {
    fn to_args(&self) -> Vec<String> {
        [
            ("--bootstrap", self.bootstrap.clone()),
            ("--topic", self.topic.clone()),
            ("--partitions", self.partitions.to_string()),
            ("--records", self.records.to_string()),
            ("--size", self.size.to_string()),
            ("--rate", self.rate.to_string()),
            ("--linger-ms", self.linger_ms.to_string()),
            ("--batch-size", self.batch_size.to_string()),
            ("--shards", self.shards.to_string()),
            ("--spin-us", self.spin_us.to_string()),
            ("--txn-ms", self.txn_ms.to_string()),
            ("--compression", self.compression.clone()),
            ("--chunk", self.chunk.to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect()
    }

    fn from_args(client: &str, args: &[String]) -> Result<RunSpec> {
        let mut map = BTreeMap::new();
        for pair in args.chunks(2) {
            let [k, v] = pair else {
                bail!("odd argument list")
            };
            map.insert(k.trim_start_matches("--").to_string(), v.clone());
        }
        let get = |k: &str| map.get(k).cloned().ok_or_else(|| anyhow!("missing --{k}"));
        Ok(RunSpec {
            client: client.to_string(),
            bootstrap: get("bootstrap")?,
            topic: get("topic")?,
            partitions: get("partitions")?.parse()?,
            records: get("records")?.parse()?,
            size: get("size")?.parse()?,
            rate: get("rate")?.parse()?,
            linger_ms: get("linger-ms")?.parse()?,
            batch_size: get("batch-size")?.parse()?,
            shards: get("shards")?.parse()?,
            spin_us: get("spin-us")?.parse()?,
            txn_ms: get("txn-ms")?.parse()?,
            compression: get("compression")?,
            chunk: get("chunk")?.parse()?,
        })
    }

    /// Records go to partitions in blocks of about one batch each (what a sticky partitioner
    /// does), the same for every client.
    fn block(&self) -> u64 {
        (self.batch_size / (self.size + 12)).max(1) as u64
    }

    fn partition(&self, seq: u64) -> i32 {
        ((seq / self.block()) % self.partitions as u64) as i32
    }

    fn pacer(&self) -> Option<Pacer> {
        (self.rate > 0.0).then(|| Pacer::new(self.rate))
    }

    /// Records the client may hold unacknowledged: what 32 MiB of buffer holds.
    fn max_outstanding(&self) -> usize {
        (32 << 20) / (self.size + 100)
    }
}

/// What a client run measured.
#[derive(Debug, Clone, Default)]
struct Outcome {
    records: u64,
    elapsed_s: f64,
    errors: u64,
    avg_us: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    cpu_s: f64,
    rss_bytes: u64,
    /// Bytes the client wrote to the brokers (every request, warm-up included), by its own
    /// count: kacrab's `outgoing-byte-total`, librdkafka's `tx_bytes` statistic. 0: the client
    /// does not report it.
    wire_bytes: u64,
    /// Filled in by the orchestrator.
    broker_cpu_s: f64,
}

impl Outcome {
    fn from_histogram(records: u64, elapsed: Duration, errors: u64, cpu: Duration) -> Outcome {
        let h = &Tracker::get().histogram;
        let us = |ns: u64| ns as f64 / 1e3;
        Outcome {
            records,
            elapsed_s: elapsed.as_secs_f64(),
            errors,
            avg_us: h.mean() / 1e3,
            p50_us: us(h.quantile(0.5)),
            p99_us: us(h.quantile(0.99)),
            p999_us: us(h.quantile(0.999)),
            max_us: us(h.max()),
            cpu_s: cpu.as_secs_f64(),
            rss_bytes: procstat::peak_rss_bytes(),
            wire_bytes: 0,
            broker_cpu_s: 0.0,
        }
    }

    fn to_line(&self) -> String {
        format!(
            "result records={} elapsed_s={} errors={} avg_us={} p50_us={} p99_us={} p999_us={} \
             max_us={} cpu_s={} rss_bytes={} wire_bytes={}",
            self.records,
            self.elapsed_s,
            self.errors,
            self.avg_us,
            self.p50_us,
            self.p99_us,
            self.p999_us,
            self.max_us,
            self.cpu_s,
            self.rss_bytes,
            self.wire_bytes
        )
    }

    fn parse(line: &str) -> Result<Outcome> {
        let rest = line
            .strip_prefix("result ")
            .ok_or_else(|| anyhow!("not a result line: {line}"))?;
        let map: BTreeMap<&str, &str> = rest
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let f = |k: &str| -> Result<f64> {
            map.get(k)
                .ok_or_else(|| anyhow!("result lacks {k}"))?
                .parse::<f64>()
                .map_err(|e| anyhow!("{k}: {e}"))
        };
        Ok(Outcome {
            records: f("records")? as u64,
            elapsed_s: f("elapsed_s")?,
            errors: f("errors")? as u64,
            avg_us: f("avg_us")?,
            p50_us: f("p50_us")?,
            p99_us: f("p99_us")?,
            p999_us: f("p999_us")?,
            max_us: f("max_us")?,
            cpu_s: f("cpu_s")?,
            rss_bytes: f("rss_bytes")? as u64,
            // Optional: the Java harness does not report it.
            wire_bytes: f("wire_bytes").map_or(0, |b| b as u64),
            broker_cpu_s: 0.0,
        })
    }

    fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.elapsed_s
    }

    fn cpu_per_million(&self) -> f64 {
        self.cpu_s * 1e6 / self.records.max(1) as f64
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter may follow. Neither applies here.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let result = match args.first().map(String::as_str) {
        Some("--broker-process") => mock_broker_process(&args[1..]),
        Some("--client") if args.len() >= 2 => client_main(&args[1], &args[2..]),
        _ => {
            // A criterion-style filter (`cargo bench FILTER`): run the scenarios it names, or
            // nothing when it names none of them.
            let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
            let names = ["small", "large", "latency", "shards", "txn", "lz4", "zstd"];
            let selected: Vec<&str> = names
                .iter()
                .copied()
                .filter(|n| {
                    filters.is_empty()
                        || filters
                            .iter()
                            .any(|f| n.contains(f.as_str()) || "peers".contains(f.as_str()))
                })
                .collect();
            if selected.is_empty() {
                return;
            }
            orchestrate(args.iter().any(|a| a == "--quick"), &selected)
        }
    };
    if let Err(e) = result {
        eprintln!("peers: {e:#}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------------------------
// Brokers
// ---------------------------------------------------------------------------------------------

/// The mock broker child: librdkafka's mock cluster with 3 brokers, answering `cpu` and `quit`
/// like `kacrab-perf --broker-process`.
fn mock_broker_process(args: &[String]) -> Result<()> {
    use rdkafka::mocking::MockCluster;
    let topic = args.get(1).context("topic")?;
    let partitions: i32 = args.get(3).context("partitions")?.parse()?;
    let mock = MockCluster::new(3)?;
    mock.create_topic(topic, partitions, 3)?;
    for p in 0..partitions {
        mock.partition_leader(topic, p, Some(1 + p % 3))?;
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "bootstrap {}", mock.bootstrap_servers())?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        match line?.trim() {
            "cpu" => writeln!(out, "cpu {:.6}", procstat::process_cpu().as_secs_f64())?,
            "quit" => break,
            other => writeln!(out, "error unknown command: {other}")?,
        }
        out.flush()?;
    }
    Ok(())
}

fn start_broker(kind: &str, topic: &str, partitions: i32) -> Result<BrokerChild> {
    let args: Vec<String> = vec![
        "--broker-process".into(),
        "--topic".into(),
        topic.into(),
        "--partitions".into(),
        partitions.to_string(),
    ];
    match kind {
        "reference" => {
            let mut args = args;
            // Nothing is read back: keep the broker's memory bounded.
            args.extend(["--retention-bytes".into(), (16 << 20).to_string()]);
            BrokerChild::spawn(Path::new(env!("CARGO_BIN_EXE_kacrab-perf")), &args)
        }
        "mock" => BrokerChild::spawn(&std::env::current_exe()?, &args),
        other => bail!("unknown broker {other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Clients (each in its own process)
// ---------------------------------------------------------------------------------------------

fn client_main(client: &str, args: &[String]) -> Result<()> {
    let spec = RunSpec::from_args(client, args)?;
    let outcome = match client {
        "null" => run_null(&spec)?,
        "kacrab" => run_kacrab(&spec, false)?,
        "kacrab-batch" => run_kacrab(&spec, true)?,
        "librdkafka" => run_librdkafka(&spec)?,
        "rskafka" => run_rskafka(&spec)?,
        "loopback" => run_loopback(&spec)?,
        "loopback-rtt" => run_loopback_rtt(&spec)?,
        other => bail!("unknown client {other}"),
    };
    println!("{}", outcome.to_line());
    Ok(())
}

/// kacrab with `Producer::send` per record (`load::drive_kacrab`), or with `send_batch` over
/// chunks (`drive_kacrab_batch`); the producer and its warm-up are the same.
fn run_kacrab(spec: &RunSpec, batch: bool) -> Result<Outcome> {
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

fn run_null(spec: &RunSpec) -> Result<Outcome> {
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

fn run_librdkafka(spec: &RunSpec) -> Result<Outcome> {
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

fn run_rskafka(spec: &RunSpec) -> Result<Outcome> {
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
fn run_loopback(spec: &RunSpec) -> Result<Outcome> {
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
fn run_loopback_rtt(spec: &RunSpec) -> Result<Outcome> {
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

// ---------------------------------------------------------------------------------------------
// Java
// ---------------------------------------------------------------------------------------------

struct Java {
    classpath: String,
}

/// Compiles the Java harness against kafka-clients 3.9.1, or says why it cannot run.
fn prepare_java(target: &Path) -> Result<Java> {
    let javac = Command::new("javac").arg("-version").output();
    if !javac.map(|o| o.status.success()).unwrap_or(false) {
        bail!("no javac on PATH");
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = match std::env::var_os("PEERS_JAVA_LIB") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let lib = target.join("peers-java/lib");
            if !lib.join("kafka-clients.jar").exists() {
                let status = Command::new("bash")
                    .arg(manifest.join("benches/peers/java/fetch-jars.sh"))
                    .arg(&lib)
                    .status()
                    .context("running fetch-jars.sh")?;
                if !status.success() {
                    bail!("fetch-jars.sh failed");
                }
            }
            lib
        }
    };
    // The codec jars (for the lz4 and zstd scenarios) come with newer fetches; a folder
    // fetched before them still serves the uncompressed scenarios.
    let jars: Vec<String> = [
        "kafka-clients.jar",
        "slf4j-api.jar",
        "snappy-java.jar",
        "lz4-java.jar",
        "zstd-jni.jar",
    ]
    .iter()
    .filter(|j| lib.join(j).exists())
    .map(|j| lib.join(j).to_string_lossy().into_owned())
    .collect();
    let classes = target.join("peers-java/classes");
    std::fs::create_dir_all(&classes)?;
    let status = Command::new("javac")
        .args(["-d", &classes.to_string_lossy(), "-cp", &jars.join(":")])
        .arg(manifest.join("benches/peers/java/PeerProducer.java"))
        .status()?;
    if !status.success() {
        bail!("javac failed");
    }
    Ok(Java {
        classpath: format!("{}:{}", classes.to_string_lossy(), jars.join(":")),
    })
}

// ---------------------------------------------------------------------------------------------
// Orchestration
// ---------------------------------------------------------------------------------------------

struct Scenario {
    name: &'static str,
    title: &'static str,
    records: u64,
    size: usize,
    partitions: i32,
    rate: f64,
    linger_ms: u64,
    batch_size: usize,
    /// (label, client, shards, spin µs)
    clients: Vec<(&'static str, &'static str, usize, u64)>,
    /// Transactions of this many ms; 0 is none.
    txn_ms: u64,
    /// `compression.type` of every client.
    compression: &'static str,
}

fn scenarios(scale: f64) -> Vec<Scenario> {
    let n = |x: u64| ((x as f64 * scale) as u64).max(1000);
    let peers = vec![
        ("null", "null", 0, 0),
        // 0 shards: the producer's default shard count for the machine.
        ("kacrab", "kacrab", 0, 0),
        ("kacrab-batch", "kacrab-batch", 0, 0),
        ("librdkafka", "librdkafka", 0, 0),
        ("rskafka", "rskafka", 0, 0),
        ("java", "java", 0, 0),
    ];
    vec![
        Scenario {
            name: "small",
            title: "5,000,000 x 10 B, 16 partitions, unthrottled, linger.ms=5, batch.size=16384",
            records: n(5_000_000),
            size: 10,
            partitions: 16,
            rate: 0.0,
            linger_ms: 5,
            batch_size: 16384,
            clients: peers.clone(),
            txn_ms: 0,
            compression: "none",
        },
        Scenario {
            name: "large",
            title: "100,000 x 10 KiB, 3 partitions, unthrottled, linger.ms=5, batch.size=1048576",
            records: n(100_000),
            size: 10 * 1024,
            partitions: 3,
            rate: 0.0,
            linger_ms: 5,
            batch_size: 1 << 20,
            clients: {
                let mut c = peers.clone();
                c.push(("loopback TCP", "loopback", 0, 0));
                c
            },
            txn_ms: 0,
            compression: "none",
        },
        Scenario {
            name: "latency",
            title: "50,000 records/s x 100 B, 6 partitions, linger.ms=0, 250,000 records",
            records: n(250_000),
            size: 100,
            partitions: 6,
            rate: 50_000.0,
            linger_ms: 0,
            batch_size: 16384,
            clients: {
                let mut c = peers.clone();
                c.insert(2, ("kacrab 2 shards", "kacrab", 2, 0));
                c.push(("loopback TCP RTT", "loopback-rtt", 0, 0));
                c
            },
            txn_ms: 0,
            compression: "none",
        },
        Scenario {
            name: "shards",
            title:
                "kacrab's default shard count vs 1 and 2 shards: 5,000,000 x 10 B, 16 partitions, \
                    unthrottled",
            records: n(5_000_000),
            size: 10,
            partitions: 16,
            rate: 0.0,
            linger_ms: 5,
            batch_size: 16384,
            clients: vec![
                ("null", "null", 0, 0),
                ("kacrab default", "kacrab", 0, 0),
                ("kacrab 1 shard", "kacrab", 1, 0),
                ("kacrab 2 shards", "kacrab", 2, 0),
            ],
            txn_ms: 0,
            compression: "none",
        },
        Scenario {
            name: "txn",
            title:
                "transactions of 100 ms: 1,000,000 x 100 B, 6 partitions, unthrottled, linger.ms=5",
            records: n(1_000_000),
            size: 100,
            partitions: 6,
            rate: 0.0,
            linger_ms: 5,
            batch_size: 16384,
            // rskafka has no transactions; the Java runner does not take the flag.
            clients: vec![
                ("null", "null", 0, 0),
                ("kacrab", "kacrab", 2, 0),
                ("kacrab-batch", "kacrab-batch", 2, 0),
                ("librdkafka", "librdkafka", 0, 0),
            ],
            txn_ms: 100,
            compression: "none",
        },
        Scenario {
            name: "lz4",
            title:
                "lz4: 1,000,000 x 100 B, 6 partitions, unthrottled, linger.ms=5, batch.size=16384",
            records: n(1_000_000),
            size: 100,
            partitions: 6,
            rate: 0.0,
            linger_ms: 5,
            batch_size: 16384,
            // rskafka is built without its compression features.
            clients: vec![
                ("null", "null", 0, 0),
                ("kacrab", "kacrab", 2, 0),
                ("kacrab-batch", "kacrab-batch", 2, 0),
                ("librdkafka", "librdkafka", 0, 0),
                ("java", "java", 0, 0),
            ],
            txn_ms: 0,
            compression: "lz4",
        },
        Scenario {
            name: "zstd",
            title:
                "zstd: 1,000,000 x 100 B, 6 partitions, unthrottled, linger.ms=5, batch.size=16384",
            records: n(1_000_000),
            size: 100,
            partitions: 6,
            rate: 0.0,
            linger_ms: 5,
            batch_size: 16384,
            clients: vec![
                ("null", "null", 0, 0),
                ("kacrab", "kacrab", 2, 0),
                ("kacrab-batch", "kacrab-batch", 2, 0),
                ("librdkafka", "librdkafka", 0, 0),
                ("java", "java", 0, 0),
            ],
            txn_ms: 0,
            compression: "zstd",
        },
    ]
}

fn env_list(key: &str, default: &[&str]) -> Vec<String> {
    match std::env::var(key) {
        Ok(v) if !v.trim().is_empty() => v.split(',').map(|s| s.trim().to_string()).collect(),
        _ => default.iter().map(|s| s.to_string()).collect(),
    }
}

fn run_client(spec: &RunSpec, java: Option<&Java>) -> Result<Outcome> {
    let mut command = if spec.client == "java" {
        let java = java.context("java not prepared")?;
        let mut c = Command::new("java");
        c.args([
            "-Xms256m",
            "-Xmx1g",
            "-XX:+UseParallelGC",
            "-cp",
            &java.classpath,
            "PeerProducer",
        ]);
        c
    } else {
        let mut c = Command::new(std::env::current_exe()?);
        c.args(["--client", &spec.client]);
        c
    };
    let child = command
        .args(spec.to_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let output = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("result "))
        .ok_or_else(|| {
            anyhow!(
                "{} printed no result (status {})",
                spec.client,
                output.status
            )
        })?;
    Outcome::parse(line)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `quick` (`cargo bench -- --quick`): one short repetition of the null producer, kacrab (both
/// modes) and librdkafka on the reference broker, unless the environment asks for more.
fn orchestrate(quick: bool, selected: &[&str]) -> Result<()> {
    let env_num = |key: &str, default: f64| {
        std::env::var(key)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(default)
    };
    let reps = env_num("PEERS_REPS", if quick { 1.0 } else { 3.0 }) as usize;
    let scale = env_num("PEERS_SCALE", if quick { 0.05 } else { 1.0 });
    let chunk = env_num("PEERS_BATCH", 1000.0).max(1.0) as usize;
    let brokers = env_list(
        "PEERS_BROKERS",
        if quick {
            &["reference"]
        } else {
            &["reference", "mock"]
        },
    );
    let wanted_scenarios = env_list("PEERS_SCENARIOS", selected);
    let mut wanted_clients = env_list(
        "PEERS_CLIENTS",
        if quick {
            &["null", "kacrab", "kacrab-batch", "librdkafka"]
        } else {
            &[
                "null",
                "kacrab",
                "kacrab-batch",
                "librdkafka",
                "rskafka",
                "java",
            ]
        },
    );
    let target = PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target")
            .to_string_lossy()
            .into_owned()
    }));
    let java = if wanted_clients.iter().any(|c| c == "java") {
        match prepare_java(&target) {
            Ok(j) => Some(j),
            Err(e) => {
                println!("java client skipped: {e:#}");
                wanted_clients.retain(|c| c != "java");
                None
            }
        }
    } else {
        None
    };
    println!(
        "peers: {reps} repetitions, scale {scale}, brokers {brokers:?}, clients {wanted_clients:?}, {chunk} records per send_batch"
    );
    let mut report = String::new();
    for scenario in scenarios(scale) {
        if !wanted_scenarios.iter().any(|s| s == scenario.name) {
            continue;
        }
        let clients: Vec<_> = scenario
            .clients
            .iter()
            .filter(|(_, client, _, _)| {
                client.starts_with("loopback") || wanted_clients.iter().any(|w| w == client)
            })
            .cloned()
            .collect();
        for broker in &brokers {
            // kafka-clients 3.9.1 never gets the topic's metadata from librdkafka's mock
            // ("Topic ... not present in metadata after 60000 ms"), so Java runs against the
            // reference broker only.
            let clients: Vec<_> = clients
                .iter()
                .filter(|(_, client, _, _)| !(broker == "mock" && *client == "java"))
                .cloned()
                .collect();
            println!(
                "\n== {} [{}] on the {broker} broker",
                scenario.name, scenario.title
            );
            let mut results: BTreeMap<&str, Vec<Outcome>> = BTreeMap::new();
            for rep in 0..reps {
                for k in 0..clients.len() {
                    let (label, client, shards, spin) = clients[(rep + k) % clients.len()];
                    let topic = format!("peers-{}", scenario.name);
                    let spec = RunSpec {
                        client: client.to_string(),
                        bootstrap: String::new(),
                        topic: topic.clone(),
                        partitions: scenario.partitions,
                        records: scenario.records,
                        size: scenario.size,
                        rate: scenario.rate,
                        linger_ms: scenario.linger_ms,
                        batch_size: scenario.batch_size,
                        shards,
                        spin_us: spin,
                        txn_ms: scenario.txn_ms,
                        compression: scenario.compression.to_string(),
                        chunk,
                    };
                    // Neither the loopback runs nor the null producer talk to a broker.
                    let outcome = if client.starts_with("loopback") || client == "null" {
                        run_client(&spec, None)
                    } else {
                        run_against(broker, spec, java.as_ref())
                    };
                    match outcome {
                        Ok(o) => {
                            println!(
                                "  rep {rep} {label:<18} {:>12.0} rec/s {:>9.1} MB/s  p50 {:>9.1} us  p99 {:>9.1} us  p99.9 {:>9.1} us  cpu {:>6.3} s/M  rss {:>7.1} MiB  broker cpu {:>6.3} s  errors {}",
                                o.records_per_sec(),
                                o.records_per_sec() * scenario.size as f64 / 1048576.0,
                                o.p50_us,
                                o.p99_us,
                                o.p999_us,
                                o.cpu_per_million(),
                                o.rss_bytes as f64 / 1048576.0,
                                o.broker_cpu_s,
                                o.errors
                            );
                            results.entry(label).or_default().push(o);
                        }
                        Err(e) => println!("  rep {rep} {label}: failed: {e:#}"),
                    }
                }
            }
            let table = summarize(&scenario, broker, &clients, &results, reps);
            print!("{table}");
            report.push_str(&table);
        }
    }
    println!("\n# Summary (medians)\n{report}");
    Ok(())
}

fn run_against(broker: &str, mut spec: RunSpec, java: Option<&Java>) -> Result<Outcome> {
    let mut child = start_broker(broker, &spec.topic, spec.partitions)?;
    spec.bootstrap = child.bootstrap.clone();
    let cpu0 = child.cpu()?;
    let outcome = run_client(&spec, java);
    let cpu1 = child.cpu()?;
    child.stop();
    let mut outcome = outcome?;
    outcome.broker_cpu_s = (cpu1 - cpu0).as_secs_f64();
    Ok(outcome)
}

fn summarize(
    scenario: &Scenario,
    broker: &str,
    clients: &[(&str, &str, usize, u64)],
    results: &BTreeMap<&str, Vec<Outcome>>,
    reps: usize,
) -> String {
    let mut out = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "\n### {} on the {broker} broker: {}\n",
        scenario.name, scenario.title
    );
    let _ = writeln!(
        out,
        "| client | runs | records/s | records/s / librdkafka | records/s / rskafka | MB/s | p50 ms | p99 ms | p99.9 ms | client CPU s | client CPU s above null | client CPU s per M records | peak RSS MiB | broker CPU s | wire bytes per record |"
    );
    let _ = writeln!(
        out,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let med = |label: &str, f: &dyn Fn(&Outcome) -> f64| {
        median(
            results
                .get(label)
                .map(|v| v.iter().map(f).collect())
                .unwrap_or_default(),
        )
    };
    // The driver's own cost, which every client's CPU time holds (NaN when the null producer
    // did not run).
    let null_cpu = med("null", &|o| o.cpu_s);
    let above_null = |label: &str, client: &str| -> f64 {
        if client.starts_with("loopback") {
            f64::NAN
        } else {
            med(label, &|o| o.cpu_s) - null_cpu
        }
    };
    let or_na = |v: f64| {
        if v.is_finite() {
            format!("{v:.3}")
        } else {
            "n/a".to_string()
        }
    };
    // Ratios of per-repetition values (same repetition, interleaved), then their median.
    let ratio = |a: &str, b: &str, f: &dyn Fn(&Outcome) -> f64| -> f64 {
        let (Some(x), Some(y)) = (results.get(a), results.get(b)) else {
            return f64::NAN;
        };
        median(x.iter().zip(y).map(|(x, y)| f(x) / f(y)).collect())
    };
    // Records/s against librdkafka and against rskafka (whose `BatchProducer` is its batch
    // API), where they ran; the loopback runs are no producers.
    let rate_vs = |label: &str, client: &str, peer: &str| -> String {
        let r = ratio(label, peer, &|o| o.records_per_sec());
        if client.starts_with("loopback") || !r.is_finite() {
            "n/a".to_string()
        } else {
            format!("{r:.2}x")
        }
    };
    for (label, client, _, _) in clients {
        let runs = results.get(label).map_or(0, Vec::len);
        if runs == 0 {
            let _ = writeln!(
                out,
                "| {label} | 0/{reps} | failed | | | | | | | | | | | | |"
            );
            continue;
        }
        let wire = med(label, &|o| o.wire_bytes as f64 / o.records.max(1) as f64);
        let wire = if wire > 0.0 {
            format!("{wire:.1}")
        } else {
            "n/a".to_string()
        };
        let _ = writeln!(
            out,
            "| {label} | {runs}/{reps} | {:.0} | {} | {} | {:.1} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {:.3} | {:.1} | {:.3} | {wire} |",
            med(label, &|o| o.records_per_sec()),
            rate_vs(label, client, "librdkafka"),
            rate_vs(label, client, "rskafka"),
            med(label, &|o| o.records_per_sec() * scenario.size as f64 / 1048576.0),
            med(label, &|o| o.p50_us / 1e3),
            med(label, &|o| o.p99_us / 1e3),
            med(label, &|o| o.p999_us / 1e3),
            med(label, &|o| o.cpu_s),
            or_na(above_null(label, client)),
            med(label, &|o| o.cpu_per_million()),
            med(label, &|o| o.rss_bytes as f64 / 1048576.0),
            med(label, &|o| o.broker_cpu_s),
        );
    }
    let base = match scenario.name {
        "shards" => "kacrab 1 shard",
        _ => "librdkafka",
    };
    let _ = writeln!(out);
    let base_client = clients
        .iter()
        .find(|(label, _, _, _)| *label == base)
        .map_or(base, |(_, client, _, _)| client);
    for (label, client, _, _) in clients {
        if *label == base || client.starts_with("loopback") {
            continue;
        }
        // From the medians, as the table gives them: a per-repetition difference would carry
        // the noise of two runs.
        let over_null = above_null(label, client) / above_null(base, base_client);
        let over_null = if over_null.is_finite() {
            format!(", client CPU above null {over_null:.2}x")
        } else {
            String::new()
        };
        if *client == "null" {
            // Its latency is that of a result already known: no ratio to speak of.
            let _ = writeln!(
                out,
                "- {label} / {base}: records/s {:.2}x, client CPU per record {:.2}x (the driver alone), peak RSS {:.2}x",
                ratio(label, base, &|o| o.records_per_sec()),
                ratio(label, base, &|o| o.cpu_per_million()),
                ratio(label, base, &|o| o.rss_bytes as f64),
            );
            continue;
        }
        let _ = writeln!(
            out,
            "- {label} / {base}: records/s {:.2}x, client CPU per record {:.2}x{over_null}, peak RSS {:.2}x, p99 {:.2}x, p99.9 {:.2}x",
            ratio(label, base, &|o| o.records_per_sec()),
            ratio(label, base, &|o| o.cpu_per_million()),
            ratio(label, base, &|o| o.rss_bytes as f64),
            ratio(label, base, &|o| o.p99_us),
            ratio(label, base, &|o| o.p999_us),
        );
        let wire = ratio(label, base, &|o| o.wire_bytes as f64);
        if wire.is_finite() && wire > 0.0 {
            let _ = writeln!(out, "  wire bytes {wire:.2}x");
        }
    }
    if results.contains_key("loopback TCP") {
        let _ = writeln!(
            out,
            "- kacrab payload MB/s / loopback TCP MB/s: {:.2}x",
            ratio("kacrab", "loopback TCP", &|o| o.records_per_sec())
        );
    }
    out
}
