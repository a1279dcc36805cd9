//! The synchronization primitives of the modules whose cross-thread protocols are model-checked
//! with loom: std's in every normal build, loom's when built with `RUSTFLAGS="--cfg loom"`.
//!
//! Only the modules with a model import from here (`runtime::inbox`, `runtime::ticket_ring`,
//! `runtime::completion` and `runtime::buffer_memory`); everything else keeps
//! std's, and under loom nothing but the models runs (a loom object may only be touched inside
//! `loom::model`). The models run with:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --lib loom
//! ```
//!
//! Where loom has no equivalent, the stand-in below keeps the synchronization the protocol
//! relies on and says what it leaves out.

#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard, OnceLock,
};

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    Mutex, MutexGuard,
};

#[cfg(loom)]
pub(crate) use self::model::{Condvar, OnceLock};

/// Runs a loom model with the bound every model here uses: all interleavings with up to three
/// preemptions, enough for the races each models and small enough for CI.
#[cfg(all(test, loom))]
pub(crate) fn check(model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(model);
}

#[cfg(loom)]
mod model {
    use std::sync::{LockResult, PoisonError};
    use std::time::Duration;

    use loom::cell::UnsafeCell;
    use loom::sync::atomic::{AtomicU8, Ordering};
    use loom::sync::MutexGuard;

    /// loom's condvar with std's timed waits. loom has no time: a timed wait is a plain wait
    /// that never times out, so a model checks the path where the wake comes before the
    /// deadline (a lost wake shows as a deadlock, not as a late timeout).
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    /// Never timed out (see [`Condvar`]).
    #[derive(Debug)]
    pub(crate) struct WaitTimeoutResult;

    impl Condvar {
        pub(crate) fn new() -> Condvar {
            Condvar(loom::sync::Condvar::new())
        }

        pub(crate) fn wait<'a, T>(
            &self,
            guard: MutexGuard<'a, T>,
        ) -> LockResult<MutexGuard<'a, T>> {
            self.0.wait(guard)
        }

        pub(crate) fn wait_timeout<'a, T>(
            &self,
            guard: MutexGuard<'a, T>,
            _: Duration,
        ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
            match self.0.wait(guard) {
                Ok(guard) => Ok((guard, WaitTimeoutResult)),
                Err(e) => Err(PoisonError::new((e.into_inner(), WaitTimeoutResult))),
            }
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }

    const EMPTY: u8 = 0;
    const WRITING: u8 = 1;
    const WRITTEN: u8 = 2;

    /// std's `OnceLock` as the completion protocol uses it (`set` once, `get`), with the same
    /// synchronization: the writer claims the cell, writes it, and publishes it with a release
    /// store that `get`'s acquire load pairs with. loom sees the value's cell, so a read of a
    /// half-written slot is a reported data race. One difference: a `set` that loses the race
    /// returns at once, where std's waits for the winner to finish writing; the losing caller
    /// (`CompletionBlock::complete`) does nothing else, so nothing depends on that wait.
    pub(crate) struct OnceLock<T> {
        state: AtomicU8,
        value: UnsafeCell<Option<T>>,
    }

    impl<T> OnceLock<T> {
        pub(crate) fn new() -> OnceLock<T> {
            OnceLock {
                state: AtomicU8::new(EMPTY),
                value: UnsafeCell::new(None),
            }
        }

        pub(crate) fn set(&self, value: T) -> Result<(), T> {
            if self
                .state
                .compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Acquire)
                .is_err()
            {
                return Err(value);
            }
            // SAFETY: the claim above makes this the only writer, and no reader looks before
            // the release store below.
            self.value.with_mut(|v| unsafe { *v = Some(value) });
            self.state.store(WRITTEN, Ordering::Release);
            Ok(())
        }

        pub(crate) fn get(&self) -> Option<&T> {
            if self.state.load(Ordering::Acquire) != WRITTEN {
                return None;
            }
            // SAFETY: written once and never again; the acquire load above sees the write.
            self.value.with(|v| unsafe { (*v).as_ref() })
        }
    }

    // SAFETY: as std's `OnceLock`: shared only through `set` (one writer, claimed
    // atomically) and `get` (after the release store).
    unsafe impl<T: Send + Sync> Sync for OnceLock<T> {}
    unsafe impl<T: Send> Send for OnceLock<T> {}
}
