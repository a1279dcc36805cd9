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
#[path = "peers/kacrab_clients.rs"]
mod kacrab_clients;
#[allow(dead_code, unused_imports)]
#[path = "../src/bin/kacrab-perf/latency.rs"]
mod latency;
#[allow(dead_code, unused_imports)]
#[path = "../src/bin/kacrab-perf/load.rs"]
mod load;
#[path = "peers/peer_clients.rs"]
mod peer_clients;
#[allow(dead_code, unused_imports)]
#[path = "../src/bin/kacrab-perf/procstat.rs"]
mod procstat;
#[path = "peers/scenarios.rs"]
mod scenarios;

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};

use embedded::BrokerChild;
use kacrab_clients::{run_kacrab, run_null};
use latency::Tracker;
use load::Pacer;
use peer_clients::{run_librdkafka, run_loopback, run_loopback_rtt, run_rskafka};
use scenarios::{scenarios, Scenario};

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
// Clients (each in its own process; `kacrab_clients` and `peer_clients` run them)
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
