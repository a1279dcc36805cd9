//! The io_uring pre-flight check: glommio panics (and poisons a global) or exits the process
//! when io_uring is unavailable, so the producer probes the syscall itself first and turns the
//! failure into a typed error.

use crate::error::RuntimeError;

/// Calls `io_uring_setup(4, ...)` and closes the ring. `EPERM` (seccomp, as under Docker's
/// default profile, or `kernel.io_uring_disabled`) and `ENOSYS` (kernels before 5.1) mean
/// io_uring is blocked.
pub fn io_uring_preflight(shards: usize, io_memory: usize) -> Result<(), RuntimeError> {
    // io_uring_params is 120 bytes on every Linux ABI; the kernel fills it in. Zeroed u64 words
    // keep the buffer aligned.
    let mut params = [0u64; 15];
    // SAFETY: the syscall reads `entries` and writes at most `sizeof(io_uring_params)` (120)
    // bytes into `params`, which is 120 bytes long and lives across the call. This is the
    // runtime's syscall edge: no other code here issues raw syscalls.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_io_uring_setup,
            4u32,
            params.as_mut_ptr() as *mut libc::c_void,
        )
    };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        return Err(RuntimeError::IoUringUnavailable {
            reason: match err.raw_os_error() {
                Some(libc::EPERM) => "io_uring_setup is not permitted (a seccomp profile or kernel.io_uring_disabled blocks it)".into(),
                Some(libc::ENOSYS) => "the kernel has no io_uring (Linux 5.8 or later is needed)".into(),
                _ => format!("io_uring_setup failed: {err}"),
            },
        });
    }
    // SAFETY: `fd` is a descriptor the syscall above just returned and nothing else owns.
    unsafe {
        libc::close(fd as libc::c_int);
    }
    check_memlock(shards, io_memory)
}

/// glommio refuses to start an executor while RLIMIT_MEMLOCK is below this, whatever the
/// process's capabilities (`Reactor::new`).
pub const GLOMMIO_MIN_MEMLOCK: u64 = 512 * 1024;

/// What one executor's io_uring rings lock (main, poll and latency rings at glommio's default
/// depth of 128), measured on Linux 6.x: charged to RLIMIT_MEMLOCK without CAP_IPC_LOCK, and
/// an executor whose rings do not fit fails to start.
pub const RING_MEMLOCK_PER_SHARD: u64 = 48 * 1024;

/// What `shards` executors lock without CAP_IPC_LOCK: their rings, and their `io_memory`
/// buffer registered once in each of the three rings. Never below glommio's floor.
pub fn memlock_needed(shards: usize, io_memory: usize) -> u64 {
    let per_shard = RING_MEMLOCK_PER_SHARD + 3 * io_memory as u64;
    (shards as u64 * per_shard).max(GLOMMIO_MIN_MEMLOCK)
}

/// Whether `limit` (RLIMIT_MEMLOCK's soft limit, `None` when unlimited) lets `shards`
/// executors start. Below glommio's floor nothing starts, capabilities or not. Without
/// CAP_IPC_LOCK the rings must fit too; a registered buffer that does not fit is only skipped
/// by glommio (the network path never uses it), so that case starts, with a warning.
pub fn memlock_verdict(
    limit: Option<u64>,
    can_lock_freely: bool,
    shards: usize,
    io_memory: usize,
) -> Result<(), RuntimeError> {
    let Some(limit) = limit else { return Ok(()) };
    let needed = if can_lock_freely {
        GLOMMIO_MIN_MEMLOCK
    } else {
        memlock_needed(shards, io_memory)
    };
    let rings = (shards as u64 * RING_MEMLOCK_PER_SHARD).max(GLOMMIO_MIN_MEMLOCK);
    if limit < GLOMMIO_MIN_MEMLOCK || (!can_lock_freely && limit < rings) {
        return Err(RuntimeError::MemlockTooLow {
            limit,
            needed,
            shards,
        });
    }
    if limit < needed {
        tracing::warn!(
            target: "kacrab::producer",
            limit,
            needed,
            shards,
            "RLIMIT_MEMLOCK is below what the shards' io_uring buffers need; glommio will skip \
             registering them"
        );
    }
    Ok(())
}

/// Reads RLIMIT_MEMLOCK and CAP_IPC_LOCK and applies [`memlock_verdict`].
fn check_memlock(shards: usize, io_memory: usize) -> Result<(), RuntimeError> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the valid, exclusively borrowed `limit`.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    if rc != 0 {
        return Ok(());
    }
    let soft = (limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur);
    memlock_verdict(soft, has_cap_ipc_lock(), shards, io_memory)
}

/// CAP_IPC_LOCK (capability 14) in this thread's effective set, read from
/// `/proc/self/status`: with it, locked memory is not charged to RLIMIT_MEMLOCK.
fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    #[test]
    fn below_glommios_floor_nothing_starts_even_with_cap_ipc_lock() {
        match memlock_verdict(Some(256 * KIB), true, 2, 64 << 10) {
            Err(RuntimeError::MemlockTooLow {
                limit,
                needed,
                shards,
            }) => assert_eq!((limit, needed, shards), (256 * KIB, 512 * KIB, 2)),
            other => panic!("expected MemlockTooLow, got {other:?}"),
        }
        assert!(memlock_verdict(Some(512 * KIB), true, 64, 10 << 20).is_ok());
        assert!(memlock_verdict(None, false, 64, 10 << 20).is_ok());
    }

    #[test]
    fn without_cap_ipc_lock_the_rings_of_every_shard_must_fit_and_the_error_names_the_full_need() {
        // 16 shards' rings are 768 KiB: a 640 KiB limit starts none of them.
        match memlock_verdict(Some(640 * KIB), false, 16, 64 << 10) {
            Err(RuntimeError::MemlockTooLow { needed, .. }) => {
                assert_eq!(needed, 16 * (48 + 3 * 64) * KIB)
            }
            other => panic!("expected MemlockTooLow, got {other:?}"),
        }
        // Rings fit, buffers do not: glommio skips the registration, so it starts.
        assert!(memlock_verdict(Some(1024 * KIB), false, 16, 64 << 10).is_ok());
        assert_eq!(memlock_needed(2, 64 << 10), 512 * KIB);
        assert_eq!(memlock_needed(4, 64 << 10), 4 * 240 * KIB);
    }
}
