//! A deadline timer for [`Producer::send_async`](super::Producer::send_async) that works
//! under any executor (tokio, async-std, glommio, `block_on`): one process-wide thread,
//! started on first use, that sleeps until the earliest deadline and wakes its waker. A
//! `send_async` call holds at most one entry, removed when its deadline fires or its call ends.
//! The lists of waits for room and for metadata are the runtime's (`runtime::waiters`).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// The deadlines of pending waits, earliest first.
pub(crate) struct Timer {
    entries: Mutex<TimerEntries>,
    changed: Condvar,
}

#[derive(Default)]
struct TimerEntries {
    next_id: u64,
    /// By deadline, then registration (two waits may share an instant).
    due: BTreeMap<(Instant, u64), Waker>,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer::new()));
        std::thread::Builder::new()
            .name("kacrab-timer".into())
            .spawn(move || timer.run())
            .expect("spawn the producer's timer thread");
        timer
    })
}

impl Timer {
    fn new() -> Timer {
        Timer {
            entries: Mutex::new(TimerEntries::default()),
            changed: Condvar::new(),
        }
    }

    fn run(&self) {
        let mut entries = self.entries.lock().expect("timer lock");
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            while let Some(entry) = entries.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
            if !due.is_empty() {
                drop(entries);
                due.into_iter().for_each(Waker::wake);
                entries = self.entries.lock().expect("timer lock");
                continue;
            }
            entries = match entries.due.first_key_value().map(|(key, _)| key.0) {
                Some(next) => {
                    self.changed
                        .wait_timeout(entries, next - now)
                        .expect("timer lock")
                        .0
                }
                None => self.changed.wait(entries).expect("timer lock"),
            };
        }
    }

    /// Registers (or re-arms with a new waker) the entry `key` for `at`.
    fn register(&self, key: &mut Option<(Instant, u64)>, at: Instant, waker: &Waker) {
        let mut entries = self.entries.lock().expect("timer lock");
        let key = *key.get_or_insert_with(|| {
            entries.next_id += 1;
            (at, entries.next_id)
        });
        match entries.due.get_mut(&key) {
            Some(w) if w.will_wake(waker) => return,
            Some(w) => *w = waker.clone(),
            None => {
                // New, or fired already while its wait was not looking: arm it again.
                let earliest = entries.due.first_key_value().is_none_or(|(k, _)| key < *k);
                entries.due.insert(key, waker.clone());
                if !earliest {
                    return;
                }
            }
        }
        drop(entries);
        self.changed.notify_one();
    }

    fn unregister(&self, key: (Instant, u64)) {
        self.entries.lock().expect("timer lock").due.remove(&key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().expect("timer lock").due.len()
    }
}

/// Resolves at `deadline` (or soon after), under any executor. Holds one timer entry while
/// pending, removed when it resolves or is dropped.
pub(crate) struct Deadline {
    at: Instant,
    timer: &'static Timer,
    key: Option<(Instant, u64)>,
}

impl Deadline {
    pub(crate) fn new(at: Instant) -> Self {
        Deadline {
            at,
            timer: timer(),
            key: None,
        }
    }

    pub(crate) fn passed(&self) -> bool {
        Instant::now() >= self.at
    }
}

impl Future for Deadline {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.passed() {
            if let Some(key) = self.key.take() {
                self.timer.unregister(key);
            }
            return Poll::Ready(());
        }
        let (timer, at) = (self.timer, self.at);
        timer.register(&mut self.key, at, cx.waker());
        Poll::Pending
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.timer.unregister(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::runtime::waiters::test_waker::{poll, waker};

    #[test]
    fn a_deadline_polled_many_times_holds_one_timer_entry_removed_when_it_is_dropped() {
        let timer: &'static Timer = Box::leak(Box::new(Timer::new()));
        let mut deadline = Deadline {
            at: Instant::now() + Duration::from_secs(3600),
            timer,
            key: None,
        };
        let (_, first) = waker();
        let (_, second) = waker();
        for round in 0..100 {
            let waker = if round % 2 == 0 { &first } else { &second };
            assert!(poll(&mut deadline, waker).is_pending());
        }
        assert_eq!(timer.len(), 1, "one entry however often it is polled");
        drop(deadline);
        assert_eq!(timer.len(), 0, "a dropped deadline leaves no entry behind");
    }
}
