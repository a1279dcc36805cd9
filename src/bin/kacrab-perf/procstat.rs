//! CPU time and peak memory of this process and of its threads, from getrusage and /proc.

use std::time::Duration;

/// User + system CPU time of the whole process (every thread, live or exited).
pub fn process_cpu() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Peak resident set size of this process in bytes (VmHWM).
pub fn peak_rss_bytes() -> u64 {
    status_kib("VmHWM:").unwrap_or(0) * 1024
}

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// CPU time of the live threads of a process, by thread name (`comm`), from
/// `/proc/<pid>/task/<tid>/stat`. Threads that have exited are not listed.
pub fn threads_cpu(pid: &str) -> Vec<(u32, String, Duration)> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ...`: comm may contain spaces and parentheses; it ends at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // After comm: state(0) ... utime is field 14 of stat, index 11 here; stime index 12.
        let (Some(u), Some(s)) = (fields.get(11), fields.get(12)) else {
            continue;
        };
        let (Ok(u), Ok(s)) = (u.parse::<u64>(), s.parse::<u64>()) else {
            continue;
        };
        let tid = task.file_name().to_string_lossy().parse().unwrap_or(0);
        out.push((tid, comm, Duration::from_secs_f64((u + s) as f64 / ticks)));
    }
    out
}

/// The calling thread's id.
pub fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Live thread CPU of this process: shard threads (`kacrab-shard-*`), the sending thread
/// `sender_tid`, and the rest.
pub fn own_threads_breakdown(sender_tid: u32) -> ThreadBreakdown {
    let mut b = ThreadBreakdown::default();
    for (tid, comm, cpu) in threads_cpu("self") {
        if comm.starts_with("kacrab-shard") {
            b.shards += cpu;
        } else if tid == sender_tid {
            b.main += cpu;
        } else {
            b.other += cpu;
        }
    }
    b
}

#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadBreakdown {
    pub shards: Duration,
    pub main: Duration,
    pub other: Duration,
}
