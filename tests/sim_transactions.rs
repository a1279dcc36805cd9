//! Seeded random transactional runs of the deterministic simulator: a transactional producer
//! (one or two shards; shard 0 owns the transaction manager) runs transactions (begin, sends,
//! offsets, commit or abort, calls repeated after caller-side timeouts) against the reference
//! broker over a lossy network on a virtual clock. Every run is checked after every event (the
//! idempotence rules: no duplicate, no reorder, acks at their offsets, definite failures never
//! in the log, every send resolved) and at its end under read_committed: committed
//! transactions are visible whole, once and in order; aborted ones never; one of unknown
//! outcome (fenced, fatal) all or nothing; nothing else is visible. A healthy producer must
//! then commit one more transaction over every partition, and a run may end fatal only after
//! the coordinator's own timeout aborted a transaction (and so fenced the producer's epoch).
//!
//! The seeds (`sim_seeds` module doc):
//! - by default the fixed seeds `0..750` and a moving window of 250 seeds whose start is
//!   drawn afresh for every run (at or above 1,000,000,000); the window and the command that
//!   replays it go to stderr before it runs, and each failing seed is reported with its own
//!   replay command;
//! - `KACRAB_SIM_SEEDS=N` sets the fixed count (`0..N`), `KACRAB_SIM_WINDOW=W` the window's
//!   size (0: no window);
//! - `KACRAB_SIM_FIRST_SEED=S` runs `S..S+N` alone (N from `KACRAB_SIM_SEEDS`, default 750):
//!   a longer run by hand, or the replay of a window;
//! - `KACRAB_SIM_SEED=S` replays one seed (`-- replay`); add `KACRAB_SIM_DEBUG=1` to print
//!   the engines' state and the request trace when it fails;
//! - `KACRAB_SIM_THREADS=T` sets the worker threads (default: every core).
//!
//! The cluster's finalized `transaction.version`: by default even seeds run on a TV1 cluster
//! (level 1, Kafka 3.x transactions) and odd seeds on a TV2 cluster (level 2, KIP-890 part 2),
//! so a default run covers both in the time one took; `KACRAB_SIM_TXN_VERSION=1` or `=2` runs
//! every seed at that level (a replay takes the same variable, which the replay commands a run
//! prints carry).
#![cfg(feature = "testkit")]

mod sim_seeds;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use kacrab::testkit::sim::txn_random::{
    run_txn_seed_at, TxnPlan, TxnRunReport, DEFAULT_TRANSACTIONS,
};

use sim_seeds::{
    announce_if_moving, env_u64, failure_report, panic_message, run_range, run_shaping_prefix,
    seed_ranges, seed_replay_command,
};

const TEST: &str = "sim_transactions";
/// Fixed seeds and moving-window seeds of a default run: together about the 1,000 seeds the
/// debug-build CI budget holds.
const DEFAULT_SEEDS: u64 = 750;
const DEFAULT_WINDOW: u64 = 250;

/// The cluster's `transaction.version` for `seed`: `KACRAB_SIM_TXN_VERSION` when set (1 or 2),
/// else 1 for even seeds and 2 for odd ones.
fn transaction_version_of(seed: u64) -> i16 {
    match std::env::var("KACRAB_SIM_TXN_VERSION").ok().as_deref() {
        None | Some("") => {
            if seed % 2 == 0 {
                1
            } else {
                2
            }
        }
        Some("1") => 1,
        Some("2") => 2,
        Some(other) => panic!("KACRAB_SIM_TXN_VERSION={other}: expected 1 or 2"),
    }
}

/// The run of `seed` at its `transaction.version`.
fn run_txn_seed(seed: u64) -> TxnRunReport {
    run_txn_seed_at(seed, transaction_version_of(seed))
}

#[derive(Default)]
struct Totals {
    runs: u64,
    /// Runs on a TV2 cluster (the others ran on a TV1 cluster).
    tv2_runs: u64,
    fatal_runs: u64,
    /// The first runs that ended fatal, with their transaction manager's error, to replay.
    fatal_seeds: Vec<(u64, Option<String>)>,
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
    unreachable_brokers: u64,
    timed_out: u64,
    offsets_checked: u64,
    late_markers: u64,
    coordinator_moves: u64,
    idle_closes: u64,
    idle_crossings: u64,
    client_idle_closes: u64,
    sends_refused: u64,
    events: u64,
}

impl Totals {
    fn add(&mut self, r: &TxnRunReport) {
        self.runs += 1;
        self.tv2_runs += u64::from(r.transaction_version >= 2);
        self.fatal_runs += u64::from(r.fatal);
        if r.fatal && self.fatal_seeds.len() < 10 {
            self.fatal_seeds.push((r.seed, r.fatal_error.clone()));
        }
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
        self.unreachable_brokers += r.unreachable_brokers;
        self.timed_out += r.timed_out;
        self.offsets_checked += r.txn.offsets_checked;
        self.late_markers += r.late_markers;
        self.coordinator_moves += r.coordinator_moves;
        self.idle_closes += r.idle_closes;
        self.idle_crossings += r.idle_crossings;
        self.client_idle_closes += r.client_idle_closes;
        self.sends_refused += r.sends_refused;
        self.events += r.events;
    }
}

#[test]
fn random_transactions_are_atomic_and_visible_only_when_committed() {
    if let Some(seed) = env_u64("KACRAB_SIM_SEED") {
        println!("KACRAB_SIM_SEED={seed} is set: see the replay test");
        return;
    }
    let mut reports = Vec::new();
    for range in seed_ranges(DEFAULT_SEEDS, DEFAULT_WINDOW) {
        announce_if_moving(TEST, "random_transactions", &range);
        let started = Instant::now();
        let (totals, failures) = run_range(&range, run_txn_seed, Totals::add);
        let elapsed = started.elapsed();
        if !totals.fatal_seeds.is_empty() {
            println!("runs that ended fatal (first 10):");
            for (seed, error) in &totals.fatal_seeds {
                println!(
                    "  {seed}: {}",
                    error.as_deref().unwrap_or("no error recorded")
                );
            }
        }
        println!(
            "{} {} seeds ({}..{}) in {elapsed:.1?}: {} transactions committed, {} aborted, {} \
             of unknown outcome ({} runs ended fatal); {} records ({} acked, {} failed \
             definitely, {} outcome unknown); read_committed showed {} records, {} aborted \
             records stayed hidden, {} markers; {} repeated calls after a caller timeout, {} \
             leader moves, {} broker failures, {} transactions aborted by the coordinator's \
             timeout, {} events, {} failed",
            range.label(),
            range.count,
            range.first,
            range.end(),
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
            totals.events,
            failures.len()
        );
        println!(
            "clusters: {} runs at transaction.version 2, {} at 1",
            totals.tv2_runs,
            totals.runs - totals.tv2_runs
        );
        println!(
            "committed consumer offsets checked against the transactions that sent them: {} \
             group partitions; {} transactions had their markers written after EndTxn was \
             answered; {} coordinator moves; {} idle closes by the brokers ({} requests \
             crossed one), {} by the producer; {} records refused by send inside a \
             transaction",
            totals.offsets_checked,
            totals.late_markers,
            totals.coordinator_moves,
            totals.idle_closes,
            totals.idle_crossings,
            totals.client_idle_closes,
            totals.sends_refused
        );
        if !failures.is_empty() {
            reports.push(failure_report(
                TEST,
                "random_transactions",
                &range,
                &failures,
            ));
            continue;
        }
        assert_eq!(totals.runs, range.count);
        // The runs must have exercised both outcomes, not ended fatal at the first request.
        assert!(
            totals.committed > range.count && totals.aborted > 0 && totals.markers > 0,
            "the runs committed {} and aborted {} transactions with {} markers",
            totals.committed,
            totals.aborted,
            totals.markers
        );
        // Coverage floors: over a hundred seeds or more, every fault class of the plans was
        // drawn.
        if range.count >= 100 {
            for (what, drawn) in [
                ("committed offsets checked", totals.offsets_checked),
                ("markers written after EndTxn", totals.late_markers),
                ("coordinator moves", totals.coordinator_moves),
                ("leader moves", totals.leader_moves),
                ("broker failures", totals.broker_failures),
                ("unreachable brokers", totals.unreachable_brokers),
                ("idle closes by the brokers", totals.idle_closes),
                ("idle closes by the producer", totals.client_idle_closes),
                ("records refused by send", totals.sends_refused),
                (
                    "calls repeated after a caller timeout",
                    totals.repeated_calls,
                ),
            ] {
                assert!(drawn > 0, "no run drew {what}");
            }
            if std::env::var_os("KACRAB_SIM_TXN_VERSION").is_none() {
                assert!(
                    totals.tv2_runs > 0 && totals.tv2_runs < totals.runs,
                    "both cluster transaction versions ran: {} of {} at 2",
                    totals.tv2_runs,
                    totals.runs
                );
            }
        }
    }
    assert!(reports.is_empty(), "{}", reports.concat());
}

/// Seeds that once failed, each with what it found; run in every test run.
#[test]
fn seeds_that_found_engine_bugs_pass() {
    for (seed, bug) in [(
        70059656,
        "lost record: a batch overtaken on a fresh partition (a broker without the producer's \
         state had appended a later batch first) failed and gave its sequence back, so a later \
         batch took the overtaking batch's sequence and was acknowledged at its offset",
    )] {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| run_txn_seed(seed))) {
            panic!(
                "seed {seed} ({bug}): {}\n  replay: {}",
                panic_message(payload.as_ref()),
                seed_replay_command(TEST, seed)
            );
        }
    }
}

/// Replays `KACRAB_SIM_SEED` (seed 0 when unset), printing its plan and report.
#[test]
fn replay() {
    let seed = env_u64("KACRAB_SIM_SEED").unwrap_or(0);
    let plan = TxnPlan::from_seed(seed, DEFAULT_TRANSACTIONS)
        .at_transaction_version(transaction_version_of(seed));
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

/// A replay command names the `transaction.version` the failing run was forced to, so that it
/// replays that run and not the seed's default level.
#[test]
fn a_replay_command_carries_the_transaction_version_it_ran_at() {
    let forced = |name: &str| (name == "KACRAB_SIM_TXN_VERSION").then(|| "2".to_string());
    assert_eq!(run_shaping_prefix(forced), "KACRAB_SIM_TXN_VERSION=2 ");
    assert_eq!(run_shaping_prefix(|_| None), "");
    assert_eq!(run_shaping_prefix(|_| Some(String::new())), "");
}
