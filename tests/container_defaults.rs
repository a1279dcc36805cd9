//! Defaults that fit a container: shards only on the CPUs this process may use, one CPU left
//! to the application. Each check runs in a child process started under `taskset` (an
//! affinity mask of one or two CPUs), so the mask is the one the producer really sees, and this
//! process's own mask is left alone; the memlock check runs its child under `prlimit`.

use std::process::Command;

use kacrab::error::RuntimeError;
use kacrab::{Error, Producer};

const CHILD: &str = "KACRAB_AFFINITY_CHILD";

/// The CPUs of this process's affinity mask, in order, as the producer reads them.
fn online_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .map(|ids| ids.into_iter().map(|c| c.id).collect())
        .unwrap_or_else(|| vec![0])
}

/// Runs this test binary's `test` alone under `taskset -c cpus`, with `CHILD` set to the list.
fn run_pinned(cpus: &[usize], test: &str) {
    let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
    let list = list.join(",");
    let status = Command::new("taskset")
        .args(["-c", &list])
        .arg(std::env::current_exe().expect("test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, &list)
        .status()
        .expect("taskset (util-linux) runs");
    assert!(status.success(), "{test} failed under taskset -c {list}");
}

/// The CPU list a child was pinned to, from `CHILD`.
fn child_cpus(list: &str) -> Vec<usize> {
    list.split(',').map(|c| c.parse().expect("cpu")).collect()
}

fn producer() -> Result<Producer, Error> {
    // Nothing listens there: the producer starts its shards and keeps trying to connect.
    Producer::builder()
        .set("bootstrap.servers", "127.0.0.1:9")
        .build()
}

#[test]
fn under_an_affinity_mask_of_one_cpu_the_producer_starts_one_shard_on_that_cpu() {
    match std::env::var(CHILD) {
        Ok(cpus) => {
            let cpu = child_cpus(&cpus)[0];
            let producer = producer().expect("producer");
            assert_eq!(producer.shard_cores(), &[cpu]);
            producer.close(std::time::Duration::from_secs(1));
        }
        Err(_) => {
            let last = *online_cores().last().expect("a cpu");
            run_pinned(
                &[last],
                "under_an_affinity_mask_of_one_cpu_the_producer_starts_one_shard_on_that_cpu",
            );
        }
    }
}

#[test]
fn kacrab_cores_outside_the_affinity_mask_is_refused_with_the_mask() {
    match std::env::var(CHILD) {
        Ok(cpus) => {
            let cpu = child_cpus(&cpus)[0];
            let outside = if cpu == 0 { 1 } else { 0 };
            let err = Producer::builder()
                .set("bootstrap.servers", "127.0.0.1:9")
                .set("kacrab.cores", outside.to_string())
                .build()
                .expect_err("a CPU outside the mask");
            match err {
                Error::Runtime(RuntimeError::CoreNotOnline { cpu: named, online }) => {
                    assert_eq!((named, online), (outside, vec![cpu]));
                }
                other => panic!("expected CoreNotOnline, got {other:?}"),
            }
        }
        Err(_) => {
            let online = online_cores();
            if online.len() < 2 {
                eprintln!("one CPU only: no CPU outside a one-CPU mask to name");
                return;
            }
            run_pinned(
                &online[1..2],
                "kacrab_cores_outside_the_affinity_mask_is_refused_with_the_mask",
            );
        }
    }
}

#[test]
fn under_an_affinity_mask_of_two_cpus_the_producer_starts_one_shard_on_the_second() {
    match std::env::var(CHILD) {
        Ok(cpus) => {
            // Whatever cgroup quota applies, it allows at least one CPU: one shard either way.
            let cpus = child_cpus(&cpus);
            let producer = producer().expect("producer");
            assert_eq!(producer.shard_cores(), &cpus[1..]);
            producer.close(std::time::Duration::from_secs(1));
        }
        Err(_) => {
            let online = online_cores();
            if online.len() < 2 {
                eprintln!("one CPU only: no mask of two CPUs to run under");
                return;
            }
            run_pinned(
                &online[online.len() - 2..],
                "under_an_affinity_mask_of_two_cpus_the_producer_starts_one_shard_on_the_second",
            );
        }
    }
}

#[test]
fn kacrab_shards_alone_still_places_its_shards_from_the_first_cpu_of_the_mask() {
    match std::env::var(CHILD) {
        Ok(cpus) => {
            let cpus = child_cpus(&cpus);
            let producer = Producer::builder()
                .set("bootstrap.servers", "127.0.0.1:9")
                .set("kacrab.shards", "2")
                .build()
                .expect("producer");
            assert_eq!(producer.shard_cores(), &cpus[..]);
            producer.close(std::time::Duration::from_secs(1));
        }
        Err(_) => {
            let online = online_cores();
            if online.len() < 2 {
                eprintln!("one CPU only: no mask of two CPUs to run under");
                return;
            }
            run_pinned(
                &online[online.len() - 2..],
                "kacrab_shards_alone_still_places_its_shards_from_the_first_cpu_of_the_mask",
            );
        }
    }
}

const MEMLOCK_CHILD: &str = "KACRAB_MEMLOCK_CHILD";

#[test]
fn a_memlock_limit_below_what_the_shards_need_is_refused_with_the_number_needed() {
    if std::env::var(MEMLOCK_CHILD).is_ok() {
        let err = Producer::builder()
            .set("bootstrap.servers", "127.0.0.1:9")
            .set("kacrab.shards", "1")
            .build()
            .expect_err("RLIMIT_MEMLOCK of 256 KiB");
        assert!(err.to_string().contains("need 524288"), "{err}");
        match err {
            Error::Runtime(RuntimeError::MemlockTooLow {
                limit,
                needed,
                shards,
            }) => {
                assert_eq!((limit, needed, shards), (256 << 10, 512 << 10, 1));
            }
            other => panic!("expected MemlockTooLow, got {other:?}"),
        }
        return;
    }
    let test = "a_memlock_limit_below_what_the_shards_need_is_refused_with_the_number_needed";
    let status = Command::new("prlimit")
        .arg("--memlock=262144:262144")
        .arg(std::env::current_exe().expect("test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(MEMLOCK_CHILD, "1")
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(
        status.success(),
        "{test} failed under prlimit --memlock=262144"
    );
}
