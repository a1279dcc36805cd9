//! The watchdog of the API fuzzer: every blocking call with its bound.

use super::*;

pub(crate) struct Running {
    pub(crate) what: String,
    pub(crate) started: Instant,
    pub(crate) bound: Duration,
}

#[derive(Default)]
pub(crate) struct WatchState {
    pub(crate) next: u64,
    pub(crate) running: HashMap<u64, Running>,
    /// Threads of the seed (app threads, the tokio thread, the finisher) still running.
    pub(crate) workers: usize,
    pub(crate) failures: Vec<String>,
    /// When a `close` called on an app thread returned.
    pub(crate) closed_at: Option<Instant>,
}

/// Every blocking call of a seed, with its bound: the test thread waits on it, and fails the
/// seed as soon as a call is still running `HANG` past its bound.
#[derive(Default)]
pub(crate) struct Watch {
    pub(crate) state: Mutex<WatchState>,
    pub(crate) changed: Condvar,
}

/// A call in progress; its drop marks it returned.
pub(crate) struct CallGuard<'a> {
    pub(crate) watch: &'a Watch,
    pub(crate) key: u64,
    /// A send that a `close` must wake.
    pub(crate) woken_by_close: bool,
}

thread_local! {
    /// This thread runs a delivery callback (a shard's, or the app thread's own when the
    /// record failed before it was queued).
    pub(crate) static IN_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `KACRAB_FUZZ_VERBOSE=1`: print each seed's plan, each call slower than 300 ms, each
/// transactional call's result and each record's error.
pub(crate) fn verbose() -> bool {
    static VERBOSE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *VERBOSE.get_or_init(|| std::env::var("KACRAB_FUZZ_VERBOSE").is_ok_and(|v| v != "0"))
}

pub(crate) fn thread_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .to_string()
}

pub(crate) fn on_shard_thread() -> bool {
    std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("kacrab-shard"))
}

impl Watch {
    pub(crate) fn enter(&self, what: &str, bound: Duration) -> CallGuard<'_> {
        let what = if IN_CALLBACK.get() {
            format!("`{what}` in a delivery callback on {}", thread_name())
        } else {
            format!("`{what}` on {}", thread_name())
        };
        let mut state = self.state.lock().unwrap();
        state.next += 1;
        let key = state.next;
        state.running.insert(
            key,
            Running {
                what,
                started: Instant::now(),
                bound,
            },
        );
        drop(state);
        // The test thread sleeps until the earliest deadline it knows of: a new call may be
        // due earlier.
        self.changed.notify_all();
        CallGuard {
            watch: self,
            key,
            woken_by_close: false,
        }
    }

    /// Runs `f` inside the call `key` without counting its time against that call's bound: a
    /// delivery callback that `send_with_callback` runs on the calling thread, before it
    /// returns, for a record that failed before it was queued. The callback's own calls are
    /// watched with their own bounds.
    pub(crate) fn excluding<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let paused = self.state.lock().unwrap().running.remove(&key);
        let started = Instant::now();
        let result = f();
        if let Some(mut running) = paused {
            running.started += started.elapsed();
            self.state.lock().unwrap().running.insert(key, running);
        }
        self.changed.notify_all();
        result
    }

    pub(crate) fn call<R>(&self, what: &str, bound: Duration, f: impl FnOnce() -> R) -> R {
        let _guard = self.enter(what, bound);
        f()
    }

    pub(crate) fn fail(&self, failure: String) {
        self.state.lock().unwrap().failures.push(failure);
        self.changed.notify_all();
    }

    pub(crate) fn worker_done(&self) {
        self.state.lock().unwrap().workers -= 1;
        self.changed.notify_all();
    }

    pub(crate) fn closed(&self) {
        self.state.lock().unwrap().closed_at = Some(Instant::now());
    }

    /// Waits until `done` holds of the state; `Err` naming every call past its bound + `HANG`
    /// as soon as there is one, or when `cap` passed first.
    pub(crate) fn wait(
        &self,
        cap: Duration,
        what: &str,
        done: impl Fn(&WatchState) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + cap;
        let mut state = self.state.lock().unwrap();
        loop {
            let now = Instant::now();
            let mut overdue: Vec<&Running> = state
                .running
                .values()
                .filter(|r| now > r.started + r.bound + HANG)
                .collect();
            if !overdue.is_empty() {
                overdue.sort_by_key(|r| r.started + r.bound);
                let calls: Vec<String> = overdue
                    .iter()
                    .map(|r| {
                        format!(
                            "{} did not return within its bound {:?} + {HANG:?} (running for {:?})",
                            r.what,
                            r.bound,
                            now - r.started
                        )
                    })
                    .collect();
                return Err(calls.join("; "));
            }
            if done(&state) {
                return Ok(());
            }
            if now >= deadline {
                let running: Vec<&str> = state.running.values().map(|r| r.what.as_str()).collect();
                return Err(format!(
                    "{what} not done within {cap:?}; calls running: {running:?}"
                ));
            }
            let next = state
                .running
                .values()
                .map(|r| r.started + r.bound + HANG)
                .chain([deadline])
                .min()
                .expect("the deadline");
            let pause = next.saturating_duration_since(now) + Duration::from_millis(1);
            state = self.changed.wait_timeout(state, pause).unwrap().0;
        }
    }
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.watch.state.lock().unwrap();
        let running = state.running.remove(&self.key).expect("registered");
        let now = Instant::now();
        let elapsed = now - running.started;
        if verbose() && elapsed > Duration::from_millis(300) {
            println!(
                "{} returned after {elapsed:?} (woken by close: {}, close returned {:?} after it started)",
                running.what,
                self.woken_by_close,
                state.closed_at.map(|c| c.checked_duration_since(running.started))
            );
        }
        if elapsed > running.bound + LATE {
            state.failures.push(format!(
                "{} returned after {elapsed:?}, past its bound {:?} + {LATE:?}",
                running.what, running.bound
            ));
        }
        if let Some(closed_at) = state.closed_at {
            if self.woken_by_close && running.started < closed_at && now > closed_at + WAKE {
                state.failures.push(format!(
                    "{} was still blocked when `close` returned and returned only {:?} later (close must wake it: {WAKE:?} allowed)",
                    running.what,
                    now - closed_at
                ));
            }
        }
        drop(state);
        self.watch.changed.notify_all();
    }
}
