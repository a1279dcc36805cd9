//! Seeded random transactional runs of the deterministic simulator: a transactional producer
//! (one or two shards; shard 0 owns the transaction manager) runs transactions (begin, sends,
//! offsets, commit or abort, calls repeated after caller-side timeouts) against the reference
//! broker over a lossy network on a virtual clock. Every run is checked after every event (the
//! idempotence rules: no duplicate, no reorder, acks at their offsets, definite failures never
//! in the log, every send resolved) and at its end under read_committed: committed
//! transactions are visible whole, once and in order; aborted ones never; one of unknown
//! outcome (fenced, fatal) all or nothing; nothing else is visible. A healthy producer must
//! then commit one more transaction over every partition.
//!
//! - `KACRAB_SIM_SEEDS=N` runs seeds `0..N` (default 1000); `KACRAB_SIM_FIRST_SEED=S` starts
//!   at `S` instead of 0.
//! - `KACRAB_SIM_SEED=S` replays one seed (`-- replay`); add `KACRAB_SIM_DEBUG=1` to print
//!   the engines' state and the request trace when it fails.
//! - `KACRAB_SIM_THREADS=T` sets the worker threads (default: every core).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use kacrab::testkit::sim::txn_random::{run_txn_seed, TxnPlan, TxnRunReport, DEFAULT_TRANSACTIONS};

const DEFAULT_SEEDS: u64 = 1_000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}"))
    })
}

fn replay_command(seed: u64) -> String {
    format!(
        "KACRAB_SIM_SEED={seed} cargo test --features testkit --test sim_transactions -- replay --nocapture"
    )
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic without a message".to_string())
}

#[derive(Default)]
struct Totals {
    runs: u64,
    fatal_runs: u64,
    records: u64,
    acked: u64,
    failed: u64,
    unknown: u64,
    committed: u64,
    aborted: u64,
    unknown_txns: u64,
    visible: u64,
    aborted_in_log: u64,
    markers: u64,
    repeated_calls: u64,
    leader_moves: u64,
    broker_failures: u64,
    timed_out: u64,
    offsets_checked: u64,
    late_markers: u64,
    coordinator_moves: u64,
    events: u64,
}

impl Totals {
    fn add(&mut self, r: &TxnRunReport) {
        self.runs += 1;
        self.fatal_runs += u64::from(r.fatal);
        self.records += r.checker.sent;
        self.acked += r.checker.acked;
        self.failed += r.checker.failed_definitely;
        self.unknown += r.checker.failed_unknown;
        self.committed += r.txn.committed;
        self.aborted += r.txn.aborted;
        self.unknown_txns += r.txn.unknown;
        self.visible += r.txn.visible_records;
        self.aborted_in_log += r.txn.aborted_records_in_log;
        self.markers += r.txn.markers;
        self.repeated_calls += r.repeated_calls;
        self.leader_moves += r.leader_moves;
        self.broker_failures += r.broker_failures;
        self.timed_out += r.timed_out;
        self.offsets_checked += r.txn.offsets_checked;
        self.late_markers += r.late_markers;
        self.coordinator_moves += r.coordinator_moves;
        self.events += r.events;
    }
}

/// Runs `first..first + count` on every core; returns the failing seeds with their messages.
fn run_seeds(first: u64, count: u64) -> (Totals, Vec<(u64, String)>) {
    let next = AtomicU64::new(first);
    let end = first + count;
    let totals = Mutex::new(Totals::default());
    let failures = Mutex::new(Vec::new());
    let threads = env_u64("KACRAB_SIM_THREADS").map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |t| t.max(1) as usize,
    );
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end {
                    break;
                }
                match catch_unwind(AssertUnwindSafe(|| run_txn_seed(seed))) {
                    Ok(report) => totals.lock().unwrap().add(&report),
                    Err(payload) => failures
                        .lock()
                        .unwrap()
                        .push((seed, panic_message(payload.as_ref()))),
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    (totals.into_inner().unwrap(), failures)
}

#[test]
fn random_transactions_are_atomic_and_visible_only_when_committed() {
    if let Some(seed) = env_u64("KACRAB_SIM_SEED") {
        println!("KACRAB_SIM_SEED={seed} is set: see the replay test");
        return;
    }
    let first = env_u64("KACRAB_SIM_FIRST_SEED").unwrap_or(0);
    let count = env_u64("KACRAB_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS);
    let started = Instant::now();
    let (totals, failures) = run_seeds(first, count);
    let elapsed = started.elapsed();
    println!(
        "{count} seeds ({first}..{}) in {elapsed:.1?}: {} transactions committed, {} aborted, \
         {} of unknown outcome ({} runs ended fatal); {} records ({} acked, {} failed definitely, \
         {} outcome unknown); read_committed showed {} records, {} aborted records stayed \
         hidden, {} markers; {} repeated calls after a caller timeout, {} leader moves, \
         {} broker failures, {} transactions aborted by the coordinator's timeout, {} events",
        first + count,
        totals.committed,
        totals.aborted,
        totals.unknown_txns,
        totals.fatal_runs,
        totals.records,
        totals.acked,
        totals.failed,
        totals.unknown,
        totals.visible,
        totals.aborted_in_log,
        totals.markers,
        totals.repeated_calls,
        totals.leader_moves,
        totals.broker_failures,
        totals.timed_out,
        totals.events
    );
    println!(
        "committed consumer offsets checked against the transactions that sent them: {} group \
         partitions; {} transactions had their markers written after EndTxn was answered; {} \
         coordinator moves",
        totals.offsets_checked, totals.late_markers, totals.coordinator_moves
    );
    if !failures.is_empty() {
        let mut report = format!("{} of {count} seeds failed:\n", failures.len());
        for (seed, message) in failures.iter().take(20) {
            report.push_str(&format!(
                "  seed {seed}: {message}\n    replay: {}\n",
                replay_command(*seed)
            ));
        }
        panic!("{report}");
    }
    assert_eq!(totals.runs, count);
    // Coverage floors: over a hundred seeds or more, every fault class of the plans was drawn.
    if count >= 100 {
        for (what, drawn) in [
            ("committed offsets checked", totals.offsets_checked),
            ("markers written after EndTxn", totals.late_markers),
            ("coordinator moves", totals.coordinator_moves),
            ("leader moves", totals.leader_moves),
            ("broker failures", totals.broker_failures),
            (
                "calls repeated after a caller timeout",
                totals.repeated_calls,
            ),
        ] {
            assert!(drawn > 0, "no run drew {what}");
        }
    }
    // The runs must have exercised both outcomes, not ended fatal at the first request.
    assert!(
        totals.committed > count && totals.aborted > 0 && totals.markers > 0,
        "the runs committed {} and aborted {} transactions with {} markers",
        totals.committed,
        totals.aborted,
        totals.markers
    );
}

/// Replays `KACRAB_SIM_SEED` (seed 0 when unset), printing its plan and report.
#[test]
fn replay() {
    let seed = env_u64("KACRAB_SIM_SEED").unwrap_or(0);
    let plan = TxnPlan::from_seed(seed, DEFAULT_TRANSACTIONS);
    println!("seed {seed}: {plan:#?}");
    let started = Instant::now();
    let report = run_txn_seed(seed);
    println!("{report:#?}\nin {:.1?}", started.elapsed());
    assert_eq!(
        report.checker.sent,
        report.checker.acked + report.checker.failed_definitely + report.checker.failed_unknown
    );
}

/// One seed, run twice, gives the same run.
#[test]
fn a_transactional_seed_reproduces_its_run() {
    for seed in [1, 7, 42] {
        assert_eq!(
            run_txn_seed(seed),
            run_txn_seed(seed),
            "seed {seed} ran differently twice"
        );
    }
}
