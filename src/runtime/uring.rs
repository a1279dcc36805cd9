//! The io_uring pre-flight check: glommio panics (and poisons a global) or exits the process
//! when io_uring is unavailable, so the producer probes the syscall itself first and turns the
//! failure into a typed error.

use super::RuntimeError;

/// Calls `io_uring_setup(4, ...)` and closes the ring. `EPERM` (seccomp, as under Docker's
/// default profile, or `kernel.io_uring_disabled`) and `ENOSYS` (kernels before 5.1) mean
/// io_uring is blocked.
pub fn io_uring_preflight() -> Result<(), RuntimeError> {
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
    check_memlock()
}

/// glommio refuses to start below 512 KiB of RLIMIT_MEMLOCK (unless the process can lock
/// memory regardless, as root with CAP_IPC_LOCK can).
fn check_memlock() -> Result<(), RuntimeError> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the valid, exclusively borrowed `limit`.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    if rc != 0 || limit.rlim_cur == libc::RLIM_INFINITY || limit.rlim_cur >= 512 * 1024 {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    Err(RuntimeError::MemlockTooLow {
        limit: limit.rlim_cur,
    })
}
