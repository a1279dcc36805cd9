//! Command-line flags, in the manner of Kafka's `kafka-producer-perf-test`.

use anyhow::{anyhow, bail, Context, Result};

pub const USAGE: &str = "\
usage: kacrab-perf --num-records N --record-size BYTES [options]

Produces N records as fast as allowed and reports throughput, latency, client CPU and memory,
in the manner of Kafka's kafka-producer-perf-test. Without --bootstrap-servers (or
bootstrap.servers in the producer properties) it starts the embedded reference cluster
(3 brokers) in a child process and creates the topic there.

  --topic NAME                   topic to produce to (default: perf-test)
  --num-records N                number of records to produce (required)
  --record-size BYTES            value size of each record (required; at least 8 with --verify:
                                 each value starts with the record's id, big-endian)
  --throughput N                 maximum records/s; -1 means unthrottled (default: -1)
  --producer-props K=V [K=V ...] producer properties (Java names); override --producer.config
  --producer.config FILE         a .properties file of producer settings
  --bootstrap-servers LIST       an external cluster instead of the embedded one
  --shards N                     kacrab.shards
  --cores LIST                   kacrab.cores, e.g. 0,1
  --partitions N                 partitions of the topic the embedded cluster creates (default: 6)
  --brokers N                    brokers of the embedded cluster (default: 3)
  --reporting-interval MS        progress line interval (default: 5000)
  --verify                       read everything back and report exactly-once and order:
                                 from the embedded cluster's log, or with Fetch requests from
                                 an external cluster (the topic must keep every record)
  --verify-fetch                 --verify with Fetch requests, also for the embedded cluster
  --print-metrics                print the producer's metrics (Kafka's names) at the end
  --json                         print the results as one JSON object on stdout (progress
                                 lines go to stderr)
  --transactional-id ID          send in transactions with this transactional.id (default, when
                                 only --transaction-duration-ms is given:
                                 performance-producer-default-transactional-id)
  --transaction-duration-ms MS   commit and begin the next transaction every MS (default 3000
                                 when transactional); the last one commits at the end
  --app-core CPU                 pin the sending thread (the application's thread) to CPU
  --on-shard                     send from a task on each shard to the partitions it owns
                                 (thread-per-core: no record crosses a thread); unpaced
  --sweep DIR                    instead of one run: sweep shards, placement against the
                                 sending thread, linger.ms, batch.size and spin, several runs
                                 per point (--sweep-reps N, default 3); writes DIR/sweep.csv
                                 and DIR/sweep-small.svg, DIR/sweep-latency.svg (the plots
                                 need the `perf` feature). Other flags go to every run.
  --help                         this text
";

/// Kafka's `ProducerPerformance` defaults.
pub const DEFAULT_TRANSACTIONAL_ID: &str = "performance-producer-default-transactional-id";
pub const DEFAULT_TRANSACTION_DURATION_MS: u64 = 3000;

#[derive(Debug, Clone)]
pub struct Args {
    pub topic: String,
    pub num_records: u64,
    pub record_size: usize,
    /// Records per second; `None` is unthrottled.
    pub throughput: Option<f64>,
    pub producer_props: Vec<(String, String)>,
    pub producer_config: Option<String>,
    pub bootstrap_servers: Option<String>,
    pub shards: Option<String>,
    pub cores: Option<String>,
    pub partitions: i32,
    pub brokers: usize,
    pub reporting_interval_ms: u64,
    pub verify: bool,
    /// Verify with Fetch requests even against the embedded cluster.
    pub verify_fetch: bool,
    pub json: bool,
    /// Print `Producer::metrics` at the end (Kafka's `--print-metrics`).
    pub print_metrics: bool,
    /// Transactions: the transactional id and how long each transaction lasts.
    pub transactions: Option<(String, u64)>,
    /// The CPU the sending thread is pinned to.
    pub app_core: Option<usize>,
    /// Send from tasks on the shards, each to its own partitions (`Producer::spawn_on_shard`).
    pub on_shard: bool,
}

/// What the command line asks for.
pub enum Mode {
    Help,
    Run(Box<Args>),
    /// The hidden child mode: run the embedded cluster.
    BrokerProcess {
        topic: String,
        partitions: i32,
        brokers: usize,
        retention: Option<usize>,
    },
}

fn value<'a>(flag: &str, it: &mut impl Iterator<Item = &'a String>) -> Result<&'a String> {
    it.next().ok_or_else(|| anyhow!("{flag} needs a value"))
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    v.parse()
        .map_err(|e| anyhow!("{flag}: `{v}` is not a valid number ({e})"))
}

pub fn parse(argv: &[String]) -> Result<Mode> {
    let mut topic = "perf-test".to_string();
    let mut num_records = None;
    let mut record_size = None;
    let mut throughput = None;
    let mut producer_props = Vec::new();
    let mut producer_config = None;
    let mut bootstrap_servers = None;
    let mut shards = None;
    let mut cores = None;
    let mut partitions = 6;
    let mut brokers = 3;
    let mut reporting_interval_ms = 5000;
    let mut verify = false;
    let mut verify_fetch = false;
    let mut json = false;
    let mut print_metrics = false;
    let mut transactional_id = None;
    let mut transaction_duration_ms = None;
    let mut broker_process = false;
    let mut retention = None;
    let mut app_core = None;
    let mut on_shard = false;

    let mut it = argv.iter().peekable();
    while let Some(arg) = it.next() {
        // `--flag=value` is accepted as well as `--flag value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") && f != "--producer-props" => {
                (f.to_string(), Some(v.to_string()))
            }
            _ => (arg.clone(), None),
        };
        let take = |it: &mut std::iter::Peekable<std::slice::Iter<'_, String>>| match &inline {
            Some(v) => Ok(v.clone()),
            None => value(&flag, it).cloned(),
        };
        match flag.as_str() {
            "--help" | "-h" => return Ok(Mode::Help),
            "--topic" => topic = take(&mut it)?,
            "--num-records" => num_records = Some(number::<u64>(&flag, &take(&mut it)?)?),
            "--record-size" => record_size = Some(number::<usize>(&flag, &take(&mut it)?)?),
            "--throughput" => {
                let t: f64 = number(&flag, &take(&mut it)?)?;
                throughput = if t < 0.0 {
                    None
                } else if t == 0.0 {
                    bail!("--throughput must be positive, or -1 for unthrottled")
                } else {
                    Some(t)
                };
            }
            "--producer-props" => {
                let mut any = false;
                while let Some(next) = it.peek() {
                    if next.starts_with("--") {
                        break;
                    }
                    let kv = it.next().expect("peeked");
                    let (k, v) = kv
                        .split_once('=')
                        .ok_or_else(|| anyhow!("--producer-props: `{kv}` is not KEY=VALUE"))?;
                    producer_props.push((k.trim().to_string(), v.trim().to_string()));
                    any = true;
                }
                if !any {
                    bail!("--producer-props needs at least one KEY=VALUE");
                }
            }
            "--producer.config" | "--producer-config" => producer_config = Some(take(&mut it)?),
            "--bootstrap-servers" => bootstrap_servers = Some(take(&mut it)?),
            "--shards" => shards = Some(take(&mut it)?),
            "--cores" => cores = Some(take(&mut it)?),
            "--partitions" => {
                partitions = number(&flag, &take(&mut it)?)?;
                if partitions < 1 {
                    bail!("--partitions must be at least 1");
                }
            }
            "--brokers" => {
                brokers = number(&flag, &take(&mut it)?)?;
                if brokers < 1 {
                    bail!("--brokers must be at least 1");
                }
            }
            "--reporting-interval" => reporting_interval_ms = number(&flag, &take(&mut it)?)?,
            "--verify" => verify = true,
            "--verify-fetch" => {
                verify = true;
                verify_fetch = true;
            }
            "--json" => json = true,
            "--print-metrics" => print_metrics = true,
            "--transactional-id" => transactional_id = Some(take(&mut it)?),
            "--transaction-duration-ms" => {
                let ms: u64 = number(&flag, &take(&mut it)?)?;
                if ms < 1 {
                    bail!("--transaction-duration-ms must be at least 1");
                }
                transaction_duration_ms = Some(ms);
            }
            "--app-core" => app_core = Some(number::<usize>(&flag, &take(&mut it)?)?),
            "--on-shard" => on_shard = true,
            "--broker-process" => broker_process = true,
            "--retention-bytes" => retention = Some(number(&flag, &take(&mut it)?)?),
            other => bail!("unknown argument `{other}` (see --help)"),
        }
    }
    if broker_process {
        return Ok(Mode::BrokerProcess {
            topic,
            partitions,
            brokers,
            retention,
        });
    }
    let num_records = num_records.context("--num-records is required (see --help)")?;
    let record_size = record_size.context("--record-size is required (see --help)")?;
    if verify && record_size < 8 {
        bail!("--verify needs --record-size of at least 8: each value carries its record id");
    }
    Ok(Mode::Run(Box::new(Args {
        topic,
        num_records,
        record_size,
        throughput,
        producer_props,
        producer_config,
        bootstrap_servers,
        shards,
        cores,
        partitions,
        brokers,
        reporting_interval_ms: reporting_interval_ms.max(1),
        verify,
        verify_fetch,
        json,
        print_metrics,
        transactions: match (transactional_id, transaction_duration_ms) {
            (None, None) => None,
            (id, ms) => Some((
                id.unwrap_or_else(|| DEFAULT_TRANSACTIONAL_ID.to_string()),
                ms.unwrap_or(DEFAULT_TRANSACTION_DURATION_MS),
            )),
        },
        app_core,
        on_shard,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn kafka_style_flags() {
        let Mode::Run(a) = parse(&args(
            "--topic t --num-records 10 --record-size 100 --throughput -1 \
             --producer-props acks=all linger.ms=5 --shards=2 --verify --print-metrics",
        ))
        .unwrap() else {
            panic!("not a run");
        };
        assert_eq!(a.topic, "t");
        assert_eq!(a.num_records, 10);
        assert_eq!(a.record_size, 100);
        assert_eq!(a.throughput, None);
        assert_eq!(
            a.producer_props,
            vec![
                ("acks".to_string(), "all".to_string()),
                ("linger.ms".to_string(), "5".to_string())
            ]
        );
        assert_eq!(a.shards.as_deref(), Some("2"));
        assert!(a.verify);
        assert!(a.print_metrics);
    }

    #[test]
    fn errors_are_plain() {
        assert!(parse(&args("--record-size 10"))
            .err()
            .unwrap()
            .to_string()
            .contains("--num-records"));
        assert!(parse(&args("--num-records 1 --record-size 4 --verify")).is_err());
        assert!(parse(&args("--num-records 1 --record-size 4 --bogus")).is_err());
        assert!(parse(&args("--num-records 1 --record-size 4 --producer-props x")).is_err());
    }
}
