//! The runtime: one pinned glommio executor per shard, each driving its own [`Engine`] over its
//! own broker sockets. Protocol decisions live in the engine; this layer only moves bytes,
//! keeps time and carries commands between threads.
//!
//! Thread-per-core rules kept here: a shard's engine, sockets and timers never leave its
//! executor; application threads reach a shard only through its bounded command queue; no
//! call on a shard blocks its thread (DNS goes to glommio's blocking pool).
//!
//! [`Engine`]: crate::engine::Engine

pub(crate) mod buffer_memory;
pub(crate) mod command;
pub(crate) mod completion;
mod connection;
pub(crate) mod delivery_handle;
mod identity_replica;
pub(crate) mod inbox;
pub(crate) mod intake;
pub(crate) mod metadata_snapshot;
pub(crate) mod partition_load;
pub(crate) mod partition_queue;
mod sendmsg;
pub(crate) mod shard;
mod stats;
pub mod ticket_ring;
mod tls;
pub(crate) mod txn_driver;
pub(crate) mod txn_status;
mod uring;
pub(crate) mod waiters;

pub(crate) use stats::{shared_gauges, RuntimeCounters};
pub use stats::{
    ConnectionError, ConnectionFailure, ConnectionReport, FramePart, RuntimeStats, RuntimeWatch,
    ShardReport, RECENT_FAILURES,
};
pub(crate) use uring::io_uring_preflight;

/// The CPUs this process may run on, in order: its affinity mask (`sched_getaffinity`, which
/// a container's cpuset or `taskset` narrows).
pub fn online_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .map(|ids| ids.into_iter().map(|c| c.id).collect())
        .unwrap_or_else(|| vec![0])
}

/// The CPUs a producer places its shards on when `kacrab.shards` and `kacrab.cores` are unset:
/// [`default_shard_count`] shards on the last CPUs of [`online_cores`], the CPUs usable being
/// those of the affinity mask, no more than the CPU time this process's cgroup may use
/// ([`cgroup_cpu_limit`]). A container limited to 2 CPUs on a 64-CPU host gets 1 shard; a
/// 16-CPU host without a quota gets 15.
pub fn default_shard_cores() -> Vec<usize> {
    default_shard_cores_of(&online_cores(), cgroup_cpu_limit())
}

/// How many shards a producer starts by default on `usable` CPUs: one per CPU it can spare,
/// `usable - 1`, and never fewer than one. The threads that call `send` are not shards (they
/// partition, check sizes and hand each record over) and need a CPU too: on 2 CPUs, one shard
/// moved 1.70 M small records/s and two 1.31 M at nearly twice the CPU per record (medians in
/// `tuning/sweep/sweep.csv`), because the second shard had no CPU that the sending thread did
/// not also want.
pub fn default_shard_count(usable: usize) -> usize {
    usable.saturating_sub(1).max(1)
}

/// The default shards' CPUs, out of `mask` (the affinity mask, in order) under a cgroup quota
/// of `cpu_limit` whole CPUs: the usable CPUs are the mask's, no more than the quota, and the
/// [`default_shard_count`] shards take the last CPUs of the mask. The application's own threads
/// are not pinned, so the scheduler runs them wherever it likes; leaving the first CPU without
/// a shard gives them one where no shard competes, and it is the first CPU that services pin
/// their own threads to by habit (`taskset -c 0`, `kacrab-perf --app-core 0`). Under a quota
/// every CPU of the mask is as good as another, so the shards take the same end of it.
fn default_shard_cores_of(mask: &[usize], cpu_limit: Option<usize>) -> Vec<usize> {
    let usable = match cpu_limit {
        Some(limit) => mask.len().min(limit.max(1)),
        None => mask.len(),
    };
    let count = default_shard_count(usable).min(mask.len());
    mask[mask.len() - count..].to_vec()
}

/// The CPUs' worth of time this process's cgroup allows, rounded up: cgroup v2's `cpu.max`, or
/// v1's `cpu.cfs_quota_us` over `cpu.cfs_period_us`; `None` when there is no quota.
pub fn cgroup_cpu_limit() -> Option<usize> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        if controllers.is_empty() {
            let file = format!("/sys/fs/cgroup{path}/cpu.max");
            if let Some(limit) = std::fs::read_to_string(file)
                .ok()
                .and_then(|s| cpu_max_limit(&s))
            {
                return Some(limit);
            }
        } else if controllers.split(',').any(|c| c == "cpu") {
            for mount in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
                let read = |name: &str| std::fs::read_to_string(format!("{mount}{path}/{name}"));
                if let (Ok(quota), Ok(period)) =
                    (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us"))
                {
                    if let Some(limit) =
                        cpu_max_limit(&format!("{} {}", quota.trim(), period.trim()))
                    {
                        return Some(limit);
                    }
                }
            }
        }
    }
    None
}

/// `QUOTA PERIOD` (cgroup v2's `cpu.max`, or v1's quota and period) as whole CPUs, rounded up;
/// `None` for no quota (`max`, or v1's -1).
fn cpu_max_limit(cpu_max: &str) -> Option<usize> {
    let mut fields = cpu_max.split_whitespace();
    let quota: i64 = fields.next()?.parse().ok()?;
    let period: i64 = fields.next().unwrap_or("100000").parse().ok()?;
    if quota <= 0 || period <= 0 {
        return None;
    }
    Some(((quota + period - 1) / period) as usize)
}

#[cfg(test)]
mod tests {
    use super::{cpu_max_limit, default_shard_cores_of, default_shard_count};

    fn cpus(n: usize) -> Vec<usize> {
        (0..n).collect()
    }

    #[test]
    fn every_cpu_but_one_gets_a_shard_and_there_is_always_one() {
        let counts: Vec<usize> = [0, 1, 2, 3, 4, 16, 64]
            .into_iter()
            .map(default_shard_count)
            .collect();
        assert_eq!(counts, [1, 1, 1, 2, 3, 15, 63]);
    }

    #[test]
    fn a_one_cpu_process_gets_one_shard_on_that_cpu() {
        assert_eq!(default_shard_cores_of(&[3], None), [3]);
    }

    #[test]
    fn a_two_cpu_process_gets_one_shard_on_its_second_cpu() {
        assert_eq!(default_shard_cores_of(&cpus(2), None), [1]);
    }

    #[test]
    fn a_sixteen_cpu_host_gets_fifteen_shards_on_all_but_its_first_cpu() {
        assert_eq!(default_shard_cores_of(&cpus(16), None), cpus(16)[1..]);
    }

    #[test]
    fn a_cgroup_quota_of_two_cpus_on_a_sixteen_cpu_host_gets_one_shard_on_the_last_cpu() {
        assert_eq!(default_shard_cores_of(&cpus(16), Some(2)), [15]);
    }

    #[test]
    fn a_cgroup_quota_of_four_cpus_on_a_sixteen_cpu_host_gets_three_shards_on_the_last_cpus() {
        assert_eq!(default_shard_cores_of(&cpus(16), Some(4)), [13, 14, 15]);
    }

    #[test]
    fn a_fractional_quota_counts_as_the_whole_cpus_it_touches() {
        let limit = cpu_max_limit("250000 100000");
        assert_eq!(default_shard_cores_of(&cpus(16), limit), [14, 15]);
    }

    #[test]
    fn a_quota_larger_than_the_affinity_mask_is_capped_by_the_mask() {
        assert_eq!(default_shard_cores_of(&cpus(4), Some(8)), [1, 2, 3]);
    }

    #[test]
    fn an_affinity_mask_with_gaps_gives_its_last_cpus_in_its_order() {
        assert_eq!(default_shard_cores_of(&[2, 5, 7, 11], None), [5, 7, 11]);
        assert_eq!(default_shard_cores_of(&[2, 5], None), [5]);
    }

    #[test]
    fn a_cpu_quota_is_read_as_whole_cpus_rounded_up_and_no_quota_as_none() {
        assert_eq!(cpu_max_limit("max 100000\n"), None);
        assert_eq!(cpu_max_limit("-1 100000"), None);
        assert_eq!(cpu_max_limit("200000 100000\n"), Some(2));
        assert_eq!(cpu_max_limit("150000 100000"), Some(2));
        assert_eq!(cpu_max_limit("50000 100000"), Some(1));
        assert_eq!(cpu_max_limit("garbage"), None);
    }
}
