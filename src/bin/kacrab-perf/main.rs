//! `kacrab-perf`: a producer load generator in the manner of Kafka's
//! `kafka-producer-perf-test`, with exactly-once read-back verification.
//!
//! Measurement choices (see BENCHMARKS.md):
//! - The embedded reference cluster runs in a child process (this binary re-executed with
//!   `--broker-process`), so getrusage and VmHWM of this process are the client's alone: the
//!   sending thread, the shard threads and glommio's helper threads. The broker's CPU is asked
//!   from the child and reported apart.
//! - `--verify` reads the embedded cluster's log directly (in the child); against an external
//!   cluster it reads the run's records back with Fetch requests (`fetch.rs`). Both decode the
//!   batches with the crate's own decoder, reached through `testkit::internals`: builds without
//!   the `testkit` feature cannot verify.
//! - Latency is per record, from just before `send` to the moment the record's delivery is
//!   completed: the waker registered on its `DeliveryFuture` takes the timestamp on the thread
//!   that completes it.

mod args;
mod embedded;
#[cfg(feature = "testkit")]
mod fetch;
#[cfg(not(feature = "testkit"))]
mod fetch {
    //! Without the `testkit` feature the crate's record batch decoder is out of reach, so there
    //! is no reader: `connect` refuses, and no `TopicReader` ever exists.

    use anyhow::{bail, Result};

    use super::embedded::Verification;

    pub enum TopicReader {}

    impl TopicReader {
        pub fn connect(_bootstrap: &str, _topic: &str) -> Result<TopicReader> {
            bail!(
                "--verify against an external cluster decodes what it reads back with kacrab's \
                 own decoder, which this build (without the `testkit` feature) does not have: \
                 build with --features perf"
            )
        }

        pub fn end_offsets(&mut self) -> Result<Vec<i64>> {
            match *self {}
        }

        pub fn verify(&mut self, _start: &[i64], _expected: u64) -> Result<Verification> {
            match *self {}
        }
    }
}
mod latency;
mod load;
mod procstat;
mod sweep;

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use kacrab::{ConfigError, Producer, ProducerConfigBuilder};

use args::{Args, Mode};
use embedded::{BrokerChild, Verification};
use latency::Tracker;
use load::{drive_kacrab, drive_on_shards, Deliveries, Pacer, Payloads, TransactionPacing};

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match sweep::parse(&argv) {
        Ok(Some(s)) => {
            return match sweep::run(&s) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kacrab-perf: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Ok(None) => {}
        Err(e) => {
            eprintln!("kacrab-perf: {e:#}");
            return ExitCode::from(2);
        }
    }
    let mode = match args::parse(&argv) {
        Ok(mode) => mode,
        Err(e) => {
            eprintln!("kacrab-perf: {e:#}");
            return ExitCode::from(2);
        }
    };
    let result = match mode {
        Mode::Help => {
            print!("{}", args::USAGE);
            Ok(())
        }
        Mode::BrokerProcess {
            topic,
            partitions,
            brokers,
            retention,
        } => broker_process(&topic, partitions, brokers, retention),
        Mode::Run(a) => run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kacrab-perf: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "testkit")]
fn broker_process(
    topic: &str,
    partitions: i32,
    brokers: usize,
    retention: Option<usize>,
) -> Result<()> {
    embedded::broker_process_main(topic, partitions, brokers, retention)
}

#[cfg(not(feature = "testkit"))]
fn broker_process(_: &str, _: i32, _: usize, _: Option<usize>) -> Result<()> {
    bail!("this build has no embedded cluster (built without the `testkit` feature)")
}

/// Everything the summary reports.
struct Summary {
    records: u64,
    record_size: usize,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
    latency_ns: Latencies,
    client_cpu: Duration,
    shard_cpu: Duration,
    sender_cpu: Duration,
    peak_rss: u64,
    broker_cpu: Option<Duration>,
    shards: usize,
    partitions: Option<i32>,
    verification: Option<Verification>,
}

struct Latencies {
    avg: f64,
    max: u64,
    p50: u64,
    p95: u64,
    p99: u64,
    p999: u64,
}

fn build_config(a: &Args) -> Result<ProducerConfigBuilder> {
    let mut builder = ProducerConfigBuilder::new();
    if let Some(file) = &a.producer_config {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
        builder = builder.set_properties(&text);
    }
    for (k, v) in &a.producer_props {
        builder = builder.set(k, v.as_str());
    }
    if let Some(servers) = &a.bootstrap_servers {
        builder = builder.bootstrap_servers(servers.as_str());
    }
    if let Some(shards) = &a.shards {
        builder = builder.set("kacrab.shards", shards.as_str());
    }
    if let Some(cores) = &a.cores {
        builder = builder.set("kacrab.cores", cores.as_str());
    }
    Ok(builder)
}

fn needs_bootstrap(err: &ConfigError) -> bool {
    matches!(err, ConfigError::InvalidValue { key, value, .. }
        if key == kacrab::config::keys::BOOTSTRAP_SERVERS && value.is_empty())
}

fn run(a: &Args) -> Result<()> {
    let mut builder = build_config(a)?;
    if let Some((id, _)) = &a.transactions {
        builder = builder.set("transactional.id", id.as_str());
    }
    let (builder, config, mut broker) = match builder.clone().build() {
        Ok(config) => (builder, config, None),
        Err(e) if needs_bootstrap(&e) => {
            let child = start_embedded(a)?;
            let builder = builder.bootstrap_servers(child.bootstrap.as_str());
            let config = builder.clone().build().map_err(|e| anyhow!("{e}"))?;
            (builder, config, Some(child))
        }
        Err(e) => return Err(anyhow!("{e}")),
    };
    // transactional.id among the producer properties alone also makes the run transactional.
    let transactions = config.transactional_id.as_ref().map(|_| TransactionPacing {
        duration: Duration::from_millis(
            a.transactions
                .as_ref()
                .map_or(args::DEFAULT_TRANSACTION_DURATION_MS, |(_, ms)| *ms),
        ),
        call_timeout: config.delivery_timeout.max(config.max_block),
    });
    let log = |line: &str| {
        if a.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    if let Some(child) = &broker {
        log(&format!(
            "embedded reference cluster: {} brokers at {} (pid {}), topic {} with {} partitions",
            a.brokers,
            child.bootstrap,
            child.pid(),
            a.topic,
            a.partitions
        ));
    }

    let tracker = Tracker::install();
    // Fetch-based verification reads from each partition's end before the run.
    let mut fetch_start = if a.verify && (broker.is_none() || a.verify_fetch) {
        let mut reader =
            fetch::TopicReader::connect(&config.bootstrap_servers.join(","), &a.topic)?;
        let start = reader.end_offsets()?;
        Some((reader, start))
    } else {
        None
    };
    let producer = Producer::builder().config(|_| builder).build()?;
    if let Some(cpu) = a.app_core {
        // The sending thread stands for the application's own pinned thread. Pinned after
        // the shards start: the producer reads the CPUs it may use from this thread's mask.
        if !core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
            bail!("--app-core {cpu}: could not pin the sending thread there");
        }
    }
    if let Some(t) = transactions {
        producer
            .init_transactions(t.call_timeout)
            .context("init_transactions")?;
    }
    let shards = producer.shard_cores().len();
    let sender_tid = procstat::current_tid();
    let broker_cpu_start = broker.as_mut().map(|b| b.cpu()).transpose()?;
    let cpu_start = procstat::process_cpu();
    let threads_start = procstat::own_threads_breakdown(sender_tid);

    let stop = Arc::new(AtomicBool::new(false));
    let reporter = spawn_reporter(stop.clone(), a.reporting_interval_ms, a.record_size, a.json);

    let mut payloads = Payloads::new(a.record_size);
    let pacer = a.throughput.map(Pacer::new);
    let start = Instant::now();
    let Deliveries {
        errors,
        first_error,
        transactions_committed,
    } = if a.on_shard {
        drive_on_shards(
            &producer,
            &a.topic,
            a.num_records,
            a.partitions,
            &mut payloads,
        )
    } else {
        drive_kacrab(
            &producer,
            &a.topic,
            a.num_records,
            &mut payloads,
            pacer.as_ref(),
            transactions,
            |_| None,
        )
    };
    if transactions.is_some() {
        log(&format!("{transactions_committed} transactions committed"));
    }
    let elapsed = start.elapsed();
    let client_cpu = procstat::process_cpu().saturating_sub(cpu_start);
    let threads = procstat::own_threads_breakdown(sender_tid);
    let peak_rss = procstat::peak_rss_bytes();
    stop.store(true, Ordering::Release);
    reporter.thread().unpark();
    let _ = reporter.join();
    let broker_cpu = match (broker.as_mut(), broker_cpu_start) {
        (Some(b), Some(s)) => Some(b.cpu()?.saturating_sub(s)),
        _ => None,
    };
    producer.close(Duration::from_secs(30));
    // After close: every shard published its final counts as it stopped.
    let metrics = a.print_metrics.then(|| producer.metrics());

    // The embedded cluster's log is read directly; an external cluster (or --verify-fetch) is
    // read back with Fetch requests.
    let verification = match broker.as_mut() {
        Some(b) if a.verify && !a.verify_fetch => {
            Some(b.verify(&a.topic, a.partitions, a.num_records)?)
        }
        _ if a.verify => {
            let (reader, start) = fetch_start.as_mut().expect("opened before the run");
            Some(reader.verify(start, a.num_records)?)
        }
        _ => None,
    };
    if let Some(b) = broker.take() {
        b.stop();
    }
    let h = &tracker.histogram;
    let summary = Summary {
        records: a.num_records,
        record_size: a.record_size,
        errors,
        first_error,
        elapsed,
        latency_ns: Latencies {
            avg: h.mean(),
            max: h.max(),
            p50: h.quantile(0.50),
            p95: h.quantile(0.95),
            p99: h.quantile(0.99),
            p999: h.quantile(0.999),
        },
        client_cpu,
        shard_cpu: threads.shards.saturating_sub(threads_start.shards),
        sender_cpu: threads.main.saturating_sub(threads_start.main),
        peak_rss,
        broker_cpu,
        shards,
        partitions: (a.bootstrap_servers.is_none()).then_some(a.partitions),
        verification,
    };
    if a.json {
        println!("{}", json(&summary, a));
    } else {
        print!("{}", text(&summary));
    }
    if let Some(metrics) = metrics {
        // stdout holds only the JSON object with --json.
        if a.json {
            eprint!("{}", metrics_table(&metrics));
        } else {
            print!("{}", metrics_table(&metrics));
        }
    }
    if errors > 0 {
        bail!("{errors} records failed");
    }
    if let Some(v) = verification {
        if v.found != v.expected || v.duplicates != 0 || v.out_of_order != 0 || v.unexpected != 0 {
            bail!("verification failed");
        }
    }
    Ok(())
}

/// The metrics as Kafka's tools print them (`ToolsUtils.printMetrics`): one line per metric,
/// `group:name:{tags}` padded to the longest, then its value, sorted by that name.
fn metrics_table(metrics: &kacrab::ProducerMetrics) -> String {
    let mut rows: Vec<(String, f64)> = metrics
        .entries()
        .into_iter()
        .map(|m| (m.display_name(), m.value))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(out, "\n{:<width$}   Value", "Metric Name");
    for (name, value) in rows {
        let _ = writeln!(out, "{name:<width$} : {value:.3}");
    }
    out
}

fn start_embedded(a: &Args) -> Result<BrokerChild> {
    if !cfg!(feature = "testkit") {
        bail!(
            "no bootstrap.servers given, and this build has no embedded cluster (built \
             without the `testkit` feature): pass --bootstrap-servers"
        );
    }
    let exe = std::env::current_exe().context("locating this executable")?;
    let mut args = vec![
        "--broker-process".to_string(),
        "--topic".to_string(),
        a.topic.clone(),
        "--partitions".to_string(),
        a.partitions.to_string(),
        "--brokers".to_string(),
        a.brokers.to_string(),
    ];
    if !a.verify {
        // Nothing is read back: bound the broker's memory (it keeps the log in RAM).
        args.extend(["--retention-bytes".to_string(), (64 << 20).to_string()]);
    }
    BrokerChild::spawn(&exe, &args)
}

/// A progress line every `interval_ms`: records completed in the window, their rate, and the
/// window's average and maximum latency (Kafka's tool prints the same).
fn spawn_reporter(
    stop: Arc<AtomicBool>,
    interval_ms: u64,
    record_size: usize,
    to_stderr: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("perf-reporter".into())
        .spawn(move || {
            let tracker = Tracker::get();
            let interval = Duration::from_millis(interval_ms);
            let mut last = Instant::now();
            tracker.take_window();
            loop {
                let deadline = last + interval;
                while !stop.load(Ordering::Acquire) {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    std::thread::park_timeout(deadline - now);
                }
                if stop.load(Ordering::Acquire) {
                    return;
                }
                let now = Instant::now();
                let (count, sum, max) = tracker.take_window();
                let secs = (now - last).as_secs_f64();
                last = now;
                let rate = count as f64 / secs;
                let line = format!(
                    "{count} records sent, {rate:.1} records/sec ({:.2} MB/sec), {:.3} ms avg \
                     latency, {:.3} ms max latency.",
                    rate * record_size as f64 / (1024.0 * 1024.0),
                    if count == 0 {
                        0.0
                    } else {
                        sum as f64 / count as f64 / 1e6
                    },
                    max as f64 / 1e6
                );
                if to_stderr {
                    eprintln!("{line}");
                } else {
                    println!("{line}");
                }
            }
        })
        .expect("spawn the reporter thread")
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn text(s: &Summary) -> String {
    let secs = s.elapsed.as_secs_f64();
    let rate = s.records as f64 / secs;
    let l = &s.latency_ns;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.3} ms avg latency, {:.3} ms max \
         latency, {:.3} ms 50th, {:.3} ms 95th, {:.3} ms 99th, {:.3} ms 99.9th.",
        s.records,
        rate,
        rate * s.record_size as f64 / (1024.0 * 1024.0),
        l.avg / 1e6,
        ms(l.max),
        ms(l.p50),
        ms(l.p95),
        ms(l.p99),
        ms(l.p999)
    );
    let per_million = s.client_cpu.as_secs_f64() * 1e6 / s.records.max(1) as f64;
    let _ = writeln!(
        out,
        "client cpu: {:.3} s ({per_million:.3} s per million records; shards {:.3} s, sending \
         thread {:.3} s), {} shard{}",
        s.client_cpu.as_secs_f64(),
        s.shard_cpu.as_secs_f64(),
        s.sender_cpu.as_secs_f64(),
        s.shards,
        if s.shards == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        out,
        "client peak rss: {:.1} MiB",
        s.peak_rss as f64 / (1024.0 * 1024.0)
    );
    if let Some(cpu) = s.broker_cpu {
        let _ = writeln!(
            out,
            "broker cpu (embedded cluster, own process): {:.3} s",
            cpu.as_secs_f64()
        );
    }
    if s.errors > 0 {
        let _ = writeln!(
            out,
            "errors: {} (first: {})",
            s.errors,
            s.first_error.as_deref().unwrap_or("?")
        );
    }
    if let Some(v) = s.verification {
        let _ = writeln!(
            out,
            "verified: {} of {}, {} duplicates, {} out of order",
            v.found, v.expected, v.duplicates, v.out_of_order
        );
        if v.unexpected > 0 {
            let _ = writeln!(
                out,
                "unexpected records (no id of this run): {}",
                v.unexpected
            );
        }
    }
    out
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json(s: &Summary, a: &Args) -> String {
    let secs = s.elapsed.as_secs_f64();
    let rate = s.records as f64 / secs;
    let l = &s.latency_ns;
    let mut out = String::from("{");
    let _ = write!(
        out,
        "\"topic\":{},\"records\":{},\"record_size\":{},\"throughput_limit\":{},\
         \"shards\":{},\"partitions\":{},\"elapsed_s\":{secs:.6},\"records_per_sec\":{rate:.1},\
         \"mb_per_sec\":{:.3},\"latency_ms\":{{\"avg\":{:.4},\"max\":{:.4},\"p50\":{:.4},\
         \"p95\":{:.4},\"p99\":{:.4},\"p999\":{:.4}}},\"client_cpu_s\":{:.4},\
         \"client_cpu_s_per_million\":{:.4},\"shard_cpu_s\":{:.4},\"sender_cpu_s\":{:.4},\
         \"peak_rss_bytes\":{},\"broker_cpu_s\":{},\"errors\":{}",
        json_str(&a.topic),
        s.records,
        s.record_size,
        a.throughput.map_or("null".to_string(), |t| t.to_string()),
        s.shards,
        s.partitions.map_or("null".to_string(), |p| p.to_string()),
        rate * s.record_size as f64 / (1024.0 * 1024.0),
        l.avg / 1e6,
        ms(l.max),
        ms(l.p50),
        ms(l.p95),
        ms(l.p99),
        ms(l.p999),
        s.client_cpu.as_secs_f64(),
        s.client_cpu.as_secs_f64() * 1e6 / s.records.max(1) as f64,
        s.shard_cpu.as_secs_f64(),
        s.sender_cpu.as_secs_f64(),
        s.peak_rss,
        s.broker_cpu
            .map_or("null".to_string(), |c| format!("{:.4}", c.as_secs_f64())),
        s.errors,
    );
    if let Some(e) = &s.first_error {
        let _ = write!(out, ",\"first_error\":{}", json_str(e));
    }
    if let Some(v) = s.verification {
        let _ = write!(
            out,
            ",\"verify\":{{\"found\":{},\"expected\":{},\"duplicates\":{},\"out_of_order\":{},\
             \"unexpected\":{},\"records_in_log\":{}}}",
            v.found, v.expected, v.duplicates, v.out_of_order, v.unexpected, v.records
        );
    }
    out.push('}');
    out
}
