//! The runtime: one pinned glommio executor per shard, each driving its own [`Engine`] over its
//! own broker sockets. Protocol decisions live in the engine; this layer only moves bytes,
//! keeps time and carries commands between threads.
//!
//! Thread-per-core rules kept here: a shard's engine, sockets and timers never leave its
//! executor; application threads reach a shard only through its bounded command queue; no
//! call on a shard blocks its thread (DNS goes to glommio's blocking pool).
//!
//! [`Engine`]: crate::engine::Engine

pub(crate) mod command;
mod connection;
mod identity_replica;
pub(crate) mod inbox;
pub(crate) mod intake;
mod sendmsg;
pub(crate) mod shard;
mod stats;
pub mod ticket_ring;
mod tls;
pub(crate) mod txn_driver;
mod uring;

pub(crate) use stats::RuntimeCounters;
pub use stats::{
    ConnectionError, ConnectionFailure, ConnectionReport, FramePart, RuntimeStats, RuntimeWatch,
    ShardReport, RECENT_FAILURES,
};
pub use uring::{io_uring_preflight, memlock_needed, memlock_verdict, GLOMMIO_MIN_MEMLOCK};

/// Why the runtime could not start or run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    #[error("io_uring is unavailable: {reason}")]
    IoUringUnavailable { reason: String },
    /// `needed` is what `shards` executors lock (glommio's floor of 524288 bytes, and without
    /// CAP_IPC_LOCK about 48 KiB of rings plus 3 × `kacrab.io.memory.bytes` per shard).
    #[error("RLIMIT_MEMLOCK is {limit} bytes; {shards} shard(s) need {needed} (raise LimitMEMLOCK / ulimit -l, or lower kacrab.shards or kacrab.io.memory.bytes)")]
    MemlockTooLow {
        limit: u64,
        needed: u64,
        shards: usize,
    },
    #[error("kacrab.cores names CPU {cpu}, which this process may not run on (its affinity mask: {online:?})")]
    CoreNotOnline { cpu: usize, online: Vec<usize> },
    #[error("failed to start shard {shard}: {reason}")]
    ShardStart { shard: usize, reason: String },
}

/// The CPUs this process may run on, in order: its affinity mask (`sched_getaffinity`, which
/// a container's cpuset or `taskset` narrows).
pub fn online_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .map(|ids| ids.into_iter().map(|c| c.id).collect())
        .unwrap_or_else(|| vec![0])
}

/// The CPUs a producer places its shards on when `kacrab.shards` and `kacrab.cores` are unset:
/// those of [`online_cores`], no more than the CPU time this process's cgroup may use
/// ([`cgroup_cpu_limit`]): a container limited to 2 CPUs on a 64-CPU host gets 2 shards.
pub fn default_shard_cores() -> Vec<usize> {
    let mut cores = online_cores();
    if let Some(limit) = cgroup_cpu_limit() {
        cores.truncate(limit.max(1));
    }
    cores
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
    use super::cpu_max_limit;

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
