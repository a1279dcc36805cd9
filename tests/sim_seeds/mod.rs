//! Which seeds a seeded simulator test runs, and the worker pool that runs them.
//!
//! A run without `KACRAB_SIM_FIRST_SEED` checks two ranges: the fixed seeds `0..N`, the same in
//! every run, and a window of `W` seeds at a start drawn afresh for every run from the wall
//! clock and the process's random hasher keys, so that repeated runs keep reaching seeds no
//! earlier run tried. The window is written to stderr before it runs (past the test harness's
//! output capture, so every CI log names it), with the command that replays it; a failing seed
//! is reported with its own replay command. `KACRAB_SIM_FIRST_SEED=S` runs `S..S+N` alone,
//! which replays a window.
#![allow(dead_code)]

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Moving windows start at or above this seed, clear of the fixed seeds and of the ranges
/// that longer runs by hand use (`0..15_000`, `7_000_000..`, `20_000_000..`).
pub const WINDOW_BASE: u64 = 1_000_000_000;
/// Moving windows start below `WINDOW_BASE + WINDOW_SPAN`.
pub const WINDOW_SPAN: u64 = 1_000_000_000_000;

pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}"))
    })
}

pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic without a message".to_string())
}

/// One contiguous range of seeds.
#[derive(Debug, Clone, Copy)]
pub struct SeedRange {
    pub first: u64,
    pub count: u64,
    /// Drawn for this run (the moving window), not fixed.
    pub moving: bool,
}

impl SeedRange {
    pub fn end(&self) -> u64 {
        self.first + self.count
    }

    pub fn label(&self) -> &'static str {
        if self.moving {
            "moving window"
        } else {
            "fixed seeds"
        }
    }
}

/// The ranges this run checks, from the environment (module doc):
/// - `KACRAB_SIM_FIRST_SEED=S`: `S..S+N` only;
/// - otherwise `0..N` and a moving window of `W` seeds (none when `W` is 0);
///
/// with `N` from `KACRAB_SIM_SEEDS` (default `default_seeds`) and `W` from
/// `KACRAB_SIM_WINDOW` (default `default_window`).
pub fn seed_ranges(default_seeds: u64, default_window: u64) -> Vec<SeedRange> {
    let count = env_u64("KACRAB_SIM_SEEDS").unwrap_or(default_seeds);
    if let Some(first) = env_u64("KACRAB_SIM_FIRST_SEED") {
        return vec![SeedRange {
            first,
            count,
            moving: false,
        }];
    }
    let mut ranges = vec![SeedRange {
        first: 0,
        count,
        moving: false,
    }];
    let window = env_u64("KACRAB_SIM_WINDOW").unwrap_or(default_window);
    if window > 0 {
        ranges.push(SeedRange {
            first: fresh_window_start(),
            count: window,
            moving: true,
        });
    }
    ranges
}

/// A start for this run's moving window in `WINDOW_BASE..WINDOW_BASE + WINDOW_SPAN`, from the
/// wall clock, the process id and the random keys std draws for each `RandomState`.
fn fresh_window_start() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
        .hash(&mut hasher);
    std::process::id().hash(&mut hasher);
    WINDOW_BASE + hasher.finish() % WINDOW_SPAN
}

/// Variables that change what a seed runs rather than which seeds run: a replay command
/// carries those that are set, or it would replay a different run of the same seed.
pub const RUN_SHAPING_VARS: &[&str] = &["KACRAB_SIM_TXN_VERSION"];

/// `NAME=value ` for each of [`RUN_SHAPING_VARS`] that `lookup` finds set and not empty.
pub fn run_shaping_prefix(lookup: impl Fn(&str) -> Option<String>) -> String {
    RUN_SHAPING_VARS
        .iter()
        .filter_map(|name| {
            lookup(name)
                .filter(|value| !value.is_empty())
                .map(|value| format!("{name}={value} "))
        })
        .collect()
}

fn env_prefix() -> String {
    run_shaping_prefix(|name| std::env::var(name).ok())
}

/// The command that runs `range` again (`test` is the test target, `filter` the test name).
pub fn range_replay_command(test: &str, filter: &str, range: &SeedRange) -> String {
    format!(
        "KACRAB_SIM_FIRST_SEED={} KACRAB_SIM_SEEDS={} {}cargo test --features testkit --test {test} -- {filter}",
        range.first,
        range.count,
        env_prefix()
    )
}

/// The command that replays one seed with its plan and report.
pub fn seed_replay_command(test: &str, seed: u64) -> String {
    format!(
        "KACRAB_SIM_SEED={seed} {}cargo test --features testkit --test {test} -- replay --nocapture",
        env_prefix()
    )
}

/// Writes a line to the process's stderr directly, past the test harness's capture.
pub fn announce(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Announces a moving window (see [`announce`]) with the command that replays it; a fixed
/// range needs no announcement.
pub fn announce_if_moving(test: &str, filter: &str, range: &SeedRange) {
    if range.moving {
        announce(&format!(
            "{test}: moving window {}..{} ({} seeds, drawn for this run); replay it: {}",
            range.first,
            range.end(),
            range.count,
            range_replay_command(test, filter, range)
        ));
    }
}

/// Runs `range` on `KACRAB_SIM_THREADS` threads (default: every core), folding each report
/// into `T` with `add`; returns the totals and the failing seeds with their messages, sorted.
pub fn run_range<R, T>(
    range: &SeedRange,
    run: impl Fn(u64) -> R + Sync,
    add: impl Fn(&mut T, &R) + Sync,
) -> (T, Vec<(u64, String)>)
where
    T: Default + Send,
{
    let next = AtomicU64::new(range.first);
    let end = range.end();
    let totals = Mutex::new(T::default());
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
                match catch_unwind(AssertUnwindSafe(|| run(seed))) {
                    Ok(report) => add(&mut totals.lock().unwrap(), &report),
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

/// The failure report for one range: up to 20 failing seeds, each with its replay command,
/// then the command that replays the whole range.
pub fn failure_report(
    test: &str,
    filter: &str,
    range: &SeedRange,
    failures: &[(u64, String)],
) -> String {
    let mut report = format!(
        "{} of {} seeds failed in the {} {}..{}:\n",
        failures.len(),
        range.count,
        range.label(),
        range.first,
        range.end()
    );
    for (seed, message) in failures.iter().take(20) {
        report.push_str(&format!(
            "  seed {seed}: {message}\n    replay: {}\n",
            seed_replay_command(test, *seed)
        ));
    }
    report.push_str(&format!(
        "  replay the range: {}\n",
        range_replay_command(test, filter, range)
    ));
    report
}
