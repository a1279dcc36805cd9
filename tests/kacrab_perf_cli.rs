//! The `kacrab-perf` binary end to end: a run against the embedded cluster read back in full,
//! machine-readable output, transactional runs, and the flags it refuses.

use std::process::Command;

fn perf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kacrab-perf"))
        .args(args)
        .output()
        .expect("run kacrab-perf")
}

/// Runs kacrab-perf, which must succeed; its standard output.
fn perf_ok(args: &[&str]) -> String {
    let out = perf(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn a_run_is_read_back_exactly_once_and_in_order() {
    let stdout = perf_ok(&[
        "--num-records",
        "20000",
        "--record-size",
        "100",
        "--partitions",
        "4",
        "--verify",
    ]);
    assert!(stdout.contains("20000 records sent"), "{stdout}");
    assert!(stdout.contains("99.9th"), "{stdout}");
    assert!(stdout.contains("client cpu:"), "{stdout}");
    assert!(stdout.contains("client peak rss:"), "{stdout}");
    assert!(
        stdout.contains("verified: 20000 of 20000, 0 duplicates, 0 out of order"),
        "{stdout}"
    );
}

#[test]
fn fetch_based_verification_reads_the_same_records() {
    // The reader used for external clusters (Metadata, ListOffsets, Fetch), pointed at the
    // embedded cluster.
    let stdout = perf_ok(&[
        "--num-records",
        "20000",
        "--record-size",
        "32",
        "--partitions",
        "3",
        "--verify-fetch",
    ]);
    assert!(
        stdout.contains("verified: 20000 of 20000, 0 duplicates, 0 out of order"),
        "{stdout}"
    );
}

#[test]
fn json_output_is_one_object_with_the_verification() {
    let stdout = perf_ok(&[
        "--num-records",
        "5000",
        "--record-size",
        "16",
        "--throughput",
        "50000",
        "--producer-props",
        "linger.ms=0",
        "--json",
        "--verify",
    ]);
    let line = stdout.trim();
    assert!(line.starts_with('{') && line.ends_with('}'), "{stdout}");
    assert!(line.contains("\"records\":5000"), "{line}");
    assert!(
        line.contains(
            "\"verify\":{\"found\":5000,\"expected\":5000,\"duplicates\":0,\"out_of_order\":0"
        ),
        "{line}"
    );
}

#[test]
fn a_transactional_run_commits_every_duration_and_is_read_back_exactly_once() {
    // Paced to last about a second, so transactions of 100 ms each commit several times.
    let stdout = perf_ok(&[
        "--num-records",
        "20000",
        "--record-size",
        "64",
        "--throughput",
        "20000",
        "--transactional-id",
        "perf-txn",
        "--transaction-duration-ms",
        "100",
        "--verify",
    ]);
    let committed: u64 = stdout
        .lines()
        .find_map(|l| l.strip_suffix(" transactions committed"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no commit count in {stdout}"));
    assert!(committed >= 3, "{committed} transactions in {stdout}");
    assert!(
        stdout.contains("verified: 20000 of 20000, 0 duplicates, 0 out of order"),
        "{stdout}"
    );
}

#[test]
fn a_transaction_duration_of_zero_is_refused() {
    let out = perf(&[
        "--num-records",
        "1",
        "--record-size",
        "8",
        "--transaction-duration-ms",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--transaction-duration-ms"));
}

#[test]
fn bad_flags_and_keys_are_errors() {
    let out = perf(&[
        "--num-records",
        "1",
        "--record-size",
        "8",
        "--producer-props",
        "lingr.ms=1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("linger.ms"));
    let out = perf(&["--num-records", "1", "--record-size", "4", "--verify"]);
    assert_eq!(out.status.code(), Some(2));
    let out = perf(&["--num-records", "1"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_sweep_writes_one_csv_row_per_run_of_every_point() {
    let dir = std::env::temp_dir().join(format!("kacrab-sweep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_arg = dir.to_str().expect("utf-8 temp dir");
    perf_ok(&[
        "--sweep",
        dir_arg,
        "--sweep-reps",
        "2",
        "--num-records",
        "2000",
        "--brokers",
        "1",
    ]);
    let csv = std::fs::read_to_string(dir.join("sweep.csv")).expect("sweep.csv");
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let points = |scenario: &str, axis: &str| {
        let mut values: Vec<&str> = rows
            .iter()
            .filter(|r| r[0] == scenario && r[1] == axis)
            .map(|r| r[2])
            .collect();
        let runs = values.len();
        values.dedup();
        assert_eq!(
            runs,
            2 * values.len(),
            "two runs per point of {scenario} {axis}"
        );
        values
    };
    assert_eq!(points("small", "linger.ms"), ["0", "1", "5", "20"]);
    assert_eq!(
        points("small", "batch.size"),
        ["4096", "16384", "65536", "262144"]
    );
    assert_eq!(
        points("latency", "kacrab.spin.before.park.us"),
        ["0", "50", "200"]
    );
    assert!(points("small", "placement").contains(&"same"));
    assert!(points("small", "kacrab.shards").contains(&"1"));
    for row in &rows {
        assert_eq!(row[11], "0", "no record failed: {row:?}");
        let rate: f64 = row[4].parse().expect("records/s");
        assert!(rate > 0.0, "{row:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
