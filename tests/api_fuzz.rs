//! A seeded fuzzer of the public producer API against the reference cluster under faults.
//!
//! Each seed draws a producer configuration (shards, a small `buffer.memory` in some seeds so
//! that callers block, `max.block.ms`, `delivery.timeout.ms`, `linger.ms`, a `transactional.id`
//! in some), a few faults, and for each of 2-4 application threads (and, in some seeds, tokio
//! tasks) a sequence of public calls: `send`, `try_send`, `send_async`, `send_with_callback`
//! (whose callback may itself call a clone of the producer: send, flush, purge, metrics,
//! close, transactional calls, or drop the last handle), `flush`, `flush_timeout`, `purge`,
//! `metrics`, clones dropped, a late `close`, and transactions begun, committed and aborted.
//! A few seeds close early, while other threads wait for the topic's late metadata; a few
//! ("slow start") send to a second topic whose metadata comes late into a `buffer.memory` held
//! full. Every record carries its id and the seed in its payload. Then:
//!
//! 1. every blocking call returns within its stated bound: a watchdog fails the seed, naming
//!    the call, its thread and the seed, when one is still running `HANG` past its bound (the
//!    hung threads are left behind; nothing in the test thread waits on them), and a call
//!    that returned more than `LATE` past its bound fails it too; on a shard thread (in a
//!    delivery callback) no call may wait for a shard, so its bound is zero (`flush_timeout`'s
//!    is its timeout); a `send` blocked when a `close` returned returns within `WAKE`; a
//!    `close` returns only once every shard stopped, also when another `close` is under way;
//! 2. after `close` (or the drop of the last handle) every shard thread exits, every future
//!    and callback resolves, and `buffered_bytes()` is 0;
//! 3. the log, read back with librdkafka, keeps every outcome's promise: an acknowledged
//!    record is there exactly once at its offset (under `read_committed`, if its transaction
//!    committed; absent if it was aborted), a record whose error promises it is not in the
//!    log is not there, one of unknown outcome is there at most once, nothing is there twice,
//!    and each thread's records are in send order per partition.
//!
//! Seeds: `KACRAB_FUZZ_SEED=N` replays one; otherwise `KACRAB_FUZZ_SEEDS` seeds (default 30)
//! from `KACRAB_FUZZ_BASE` (default: days since the epoch × 1000, so CI covers a new window
//! every day). `KACRAB_FUZZ_CALLBACK_CALLS=0` keeps delivery callbacks from calling the
//! producer. The long run: `cargo test --release --features testkit --test api_fuzz --
//! --ignored --nocapture` (5000 seeds, or `KACRAB_FUZZ_SEEDS`, in 4 jobs of a cluster each, or
//! `KACRAB_FUZZ_JOBS`). A run stops at its first failed seed (`KACRAB_FUZZ_MAX_FAILURES`
//! lets it go on; a failed seed leaves its hung threads behind). `KACRAB_FUZZ_VERBOSE=1` prints
//! each seed's plan, each slow call, each transactional call's result and each record's error.
#![cfg(feature = "testkit")]

#[path = "api_fuzz/calls.rs"]
mod calls;
#[path = "api_fuzz/check.rs"]
mod check;
mod common;
#[path = "api_fuzz/watch.rs"]
mod watch;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kacrab::testkit::broker::error_codes::{
    CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
};
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::{ReferenceCluster, ANY_BROKER};
use kacrab::{
    DeliveryFuture, ProduceError, Producer, ProducerRecord, RecordMetadata, TransactionError,
};
use kafka_protocol::messages::ApiKey;

use check::run_seed;
use common::{read_back, Isolation};
use watch::{on_shard_thread, thread_name, verbose, Watch, IN_CALLBACK};

/// How long past its bound a call may still be running before the watchdog fails the seed.
const HANG: Duration = Duration::from_secs(10);
/// How long past its bound a call may return without failing the seed (scheduling noise).
const LATE: Duration = Duration::from_secs(2);
/// How long after a `close` returned a `send` blocked on metadata or memory may take to return.
const WAKE: Duration = Duration::from_secs(1);
/// The longest `metrics()` waits for the shards (`Producer::metrics`).
const METRICS_WAIT: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------------
// Seeds and plans

/// splitmix64: small, deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x6a09_e667_f3bc_c909)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
    fn fork(&mut self) -> Rng {
        Rng::new(self.next())
    }
}

#[derive(Debug)]
struct Plan {
    seed: u64,
    partitions: i32,
    shards: usize,
    buffer_memory: usize,
    max_block: Duration,
    request_timeout: Duration,
    delivery_timeout: Duration,
    linger_ms: u64,
    transactional: bool,
    threads: usize,
    ops: usize,
    async_tasks: usize,
    multi_thread_runtime: bool,
    /// The test's own handle is dropped first, so the last drop is an app thread's, a tokio
    /// task's or a callback's; otherwise it closes the producer once the threads are done.
    handle_dropped_first: bool,
    /// In a few seeds the last app thread closes the producer at this step, early, while
    /// other threads may still wait for the topic's metadata.
    early_close: Option<usize>,
    /// In a few seeds the topic's metadata comes just before `max.block.ms`, and then
    /// `buffer.memory` is full, its records held by slow answers: a `send` waits for both,
    /// and must still return within `max.block.ms`.
    slow_start: bool,
    callback_calls: bool,
}

impl Plan {
    fn draw(seed: u64, callback_calls: bool) -> Plan {
        let mut rng = Rng::new(seed);
        let request_timeout = rng.millis(500, 1500);
        let linger_ms = rng.range(0, 10);
        let mut plan = Plan {
            seed,
            partitions: rng.range(3, 6) as i32,
            shards: rng.range(1, 2) as usize,
            buffer_memory: if rng.chance(35) {
                rng.range(16, 64) as usize * 1024
            } else {
                4 << 20
            },
            max_block: rng.millis(200, 2000),
            request_timeout,
            delivery_timeout: request_timeout
                + Duration::from_millis(linger_ms)
                + rng.millis(1000, 4000),
            linger_ms,
            transactional: rng.chance(25),
            threads: rng.range(2, 4) as usize,
            ops: rng.range(20, 60) as usize,
            async_tasks: if rng.chance(50) {
                rng.range(1, 3) as usize
            } else {
                0
            },
            multi_thread_runtime: rng.chance(50),
            handle_dropped_first: rng.chance(30),
            early_close: rng.chance(8).then(|| rng.range(0, 4) as usize),
            slow_start: false,
            callback_calls,
        };
        if rng.chance(5) {
            plan.slow_start = true;
            plan.max_block = rng.millis(4000, 5000);
            // Held records keep their memory: none expires while the second topic's send waits.
            plan.delivery_timeout = plan.max_block * 3;
            plan.buffer_memory = 16 * 1024;
            plan.transactional = false;
            plan.early_close = None;
        }
        plan
    }

    fn producer(&self, cluster: &ReferenceCluster) -> Producer {
        let mut builder = Producer::builder()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("kacrab.shards", self.shards.to_string())
            .set("buffer.memory", self.buffer_memory.to_string())
            .set("max.block.ms", self.max_block.as_millis().to_string())
            .set(
                "request.timeout.ms",
                self.request_timeout.as_millis().to_string(),
            )
            .set(
                "delivery.timeout.ms",
                self.delivery_timeout.as_millis().to_string(),
            )
            .set("linger.ms", self.linger_ms.to_string())
            .set("batch.size", "4096")
            .set("retry.backoff.ms", "20")
            .set("reconnect.backoff.max.ms", "200");
        if self.transactional {
            builder = builder
                .set("transactional.id", format!("fuzz-{}", self.seed))
                .set("transaction.timeout.ms", "30000");
        }
        builder
            .build()
            .unwrap_or_else(|e| panic!("seed {}: build: {e}", self.seed))
    }
}

/// Adds one fault, drawn from `rng`, to the cluster's plan.
fn add_fault(cluster: &ReferenceCluster, rng: &mut Rng, transactional: bool) {
    let faults = cluster.faults();
    match rng.below(if transactional { 8 } else { 6 }) {
        0 => {
            faults.drop_response_after_append(ANY_BROKER, ApiKey::Produce, rng.range(1, 2) as usize)
        }
        1 => faults.reset_connection(ANY_BROKER, ApiKey::Produce, 1, rng.chance(50)),
        2 => faults.delay_response(ANY_BROKER, ApiKey::Produce, 1, rng.millis(50, 1500)),
        3 => faults.inject_error(
            ANY_BROKER,
            ApiKey::Produce,
            NOT_LEADER_OR_FOLLOWER,
            rng.range(1, 3) as usize,
        ),
        4 => faults.append_then_answer(
            ANY_BROKER,
            ApiKey::Produce,
            NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            1,
        ),
        5 => faults.delay_response(ANY_BROKER, ApiKey::Metadata, 1, rng.millis(100, 2500)),
        6 => faults.inject_error(
            ANY_BROKER,
            ApiKey::AddPartitionsToTxn,
            CONCURRENT_TRANSACTIONS,
            1,
        ),
        _ => faults.inject_error(ANY_BROKER, ApiKey::EndTxn, NOT_COORDINATOR, 1),
    }
}

// ---------------------------------------------------------------------------------------------
// What was sent, and what became of it

#[derive(Debug, Clone, Copy, PartialEq)]
enum Member {
    /// Not a transactional producer.
    NotTransactional,
    /// Sent while transaction n was open, before its end was called.
    Txn(u64),
    /// Transactional, but which transaction (if any) took it is not known.
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fate {
    Committed,
    Aborted,
}

struct Sent {
    how: &'static str,
    /// The app thread or tokio task that sent it (records sent in callbacks have none).
    lane: Option<u32>,
    partition: Option<i32>,
    member: Member,
}

enum Outcome {
    Result(Result<RecordMetadata, ProduceError>),
    /// `try_send` gave it back: it was never queued.
    NotQueued,
}

struct Ledger {
    seed: u64,
    topic: String,
    transactional: bool,
    next_id: AtomicU64,
    sent: Mutex<HashMap<u64, Sent>>,
    futures: Mutex<Vec<(u64, DeliveryFuture)>>,
    outcomes: Mutex<HashMap<u64, Outcome>>,
    callbacks: Mutex<HashSet<u64>>,
    outcome_added: Condvar,
    /// Transaction generation: odd while transaction (gen - 1) / 2 is open for sends.
    gen: AtomicU64,
    fates: Mutex<HashMap<u64, Fate>>,
    /// A transactional call made in a callback succeeded: fates are not the controller's.
    fates_unreliable: AtomicBool,
}

// ---------------------------------------------------------------------------------------------
// The calls

struct Ctx {
    plan: Plan,
    ledger: Ledger,
    watch: Watch,
    cluster: Arc<ReferenceCluster>,
    /// A transactional seed's first transaction is begun (or failed to be): the other
    /// threads start sending.
    started: (Mutex<bool>, Condvar),
}

/// What a delivery callback does with its clone of the producer.
#[derive(Debug, Clone, Copy)]
enum Nested {
    Nothing,
    Send,
    TrySend,
    FlushTimeout(Duration),
    Flush,
    Purge,
    Metrics,
    CloseZero,
    Transaction(u64),
}

// ---------------------------------------------------------------------------------------------
// The tests

fn env_u64(key: &str) -> Option<u64> {
    std::env::var(key).ok().and_then(|v| v.parse().ok())
}

fn fuzz(default_seeds: u64, default_jobs: u64) {
    let seeds: Vec<u64> = match env_u64("KACRAB_FUZZ_SEED") {
        Some(seed) => vec![seed],
        None => {
            let days = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs()
                / 86_400;
            let base = env_u64("KACRAB_FUZZ_BASE").unwrap_or(days * 1000);
            let count = env_u64("KACRAB_FUZZ_SEEDS").unwrap_or(default_seeds);
            (base..base + count).collect()
        }
    };
    let callback_calls = env_u64("KACRAB_FUZZ_CALLBACK_CALLS") != Some(0);
    let max_failures = env_u64("KACRAB_FUZZ_MAX_FAILURES").unwrap_or(1) as usize;
    let jobs = env_u64("KACRAB_FUZZ_JOBS").unwrap_or(default_jobs).max(1) as usize;
    println!(
        "api_fuzz: seeds {}..={} ({}) in {jobs} job(s); replay one with KACRAB_FUZZ_SEED=<seed>",
        seeds[0],
        seeds[seeds.len() - 1],
        seeds.len()
    );
    let started = Instant::now();
    let failures = Mutex::new(Vec::new());
    let run = AtomicU64::new(0);
    // Each job runs every `jobs`-th seed against a cluster of its own (faults are per cluster).
    std::thread::scope(|scope| {
        for job in 0..jobs {
            let (seeds, failures, run) = (&seeds, &failures, &run);
            scope.spawn(move || {
                let cluster = Arc::new(ReferenceCluster::start(3, BrokerRules::default()));
                let mut healthy = true;
                for &seed in seeds.iter().skip(job).step_by(jobs) {
                    if failures.lock().unwrap().len() >= max_failures {
                        break;
                    }
                    run.fetch_add(1, Ordering::Relaxed);
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        run_seed(&cluster, seed, callback_calls)
                    }))
                    .unwrap_or_else(|panic| {
                        let why = panic.downcast_ref::<String>().cloned();
                        let why =
                            why.or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                        Err(format!("seed {seed} panicked: {}", why.unwrap_or_default()))
                    });
                    match result {
                        Ok(summary) => println!("{summary}"),
                        Err(failure) => {
                            println!("FAILED {failure}");
                            failures.lock().unwrap().push(failure);
                            healthy = false;
                        }
                    }
                }
                if !healthy {
                    // A failed seed may leave hung threads holding producer handles and
                    // connections: the cluster is left running rather than joined.
                    std::mem::forget(cluster);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    println!(
        "api_fuzz: {} seeds in {:?}, {} failed",
        run.into_inner(),
        started.elapsed(),
        failures.len()
    );
    if !failures.is_empty() {
        panic!(
            "{} seed(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
}

#[test]
fn random_public_calls_never_hang_and_every_outcome_keeps_its_promise() {
    fuzz(30, 1);
}

#[test]
#[ignore]
fn five_thousand_seeds_of_random_public_calls_never_hang_and_keep_every_promise() {
    fuzz(5000, 4);
}
