//! Waiting without blocking a thread, for [`Producer::send_async`](super::Producer::send_async):
//! a list of wakers that `buffer.memory` and the metadata snapshot wake when they change, and
//! a deadline timer that works under any executor (tokio, async-std, glommio, `block_on`).
//!
//! The timer is one process-wide thread, started on first use, that sleeps until the earliest
//! deadline and wakes its waker. It serves only senders that found the buffer full or a
//! topic's metadata missing, so it holds at most one entry per such send, each gone by its
//! deadline (`max.block.ms`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// Wakers of tasks waiting for a change; `wake_all` is one atomic load when nobody waits.
#[derive(Default)]
pub(crate) struct WaitList {
    count: AtomicUsize,
    wakers: Mutex<Vec<Waker>>,
}

impl WaitList {
    /// Registers `waker` for the next `wake_all`. The caller checks its condition again after
    /// this (a change between its first check and this registration is not missed then).
    pub(crate) fn register(&self, waker: &Waker) {
        let mut wakers = self.wakers.lock().expect("wait list lock");
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
    }

    /// Wakes every registered waker (after the change they wait for is visible).
    pub(crate) fn wake_all(&self) {
        fence(Ordering::SeqCst);
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let wakers = {
            let mut wakers = self.wakers.lock().expect("wait list lock");
            self.count.store(0, Ordering::Relaxed);
            std::mem::take(&mut *wakers)
        };
        for waker in wakers {
            waker.wake();
        }
    }
}

struct Timer {
    entries: Mutex<Vec<(Instant, Waker)>>,
    changed: Condvar,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            entries: Mutex::new(Vec::new()),
            changed: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("kacrab-timer".into())
            .spawn(move || timer.run())
            .expect("spawn the producer's timer thread");
        timer
    })
}

impl Timer {
    fn run(&self) {
        let mut entries = self.entries.lock().expect("timer lock");
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            entries.retain(|(at, waker)| {
                if *at <= now {
                    due.push(waker.clone());
                    false
                } else {
                    true
                }
            });
            if !due.is_empty() {
                drop(entries);
                due.into_iter().for_each(Waker::wake);
                entries = self.entries.lock().expect("timer lock");
                continue;
            }
            entries = match entries.iter().map(|(at, _)| *at).min() {
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
}

/// Resolves at `deadline` (or soon after), under any executor.
pub(crate) struct Deadline {
    at: Instant,
    registered: bool,
}

impl Deadline {
    pub(crate) fn new(at: Instant) -> Self {
        Deadline {
            at,
            registered: false,
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
            return Poll::Ready(());
        }
        if !self.registered {
            self.registered = true;
            let timer = timer();
            timer
                .entries
                .lock()
                .expect("timer lock")
                .push((self.at, cx.waker().clone()));
            timer.changed.notify_one();
        }
        Poll::Pending
    }
}

/// Resolves when `list` is woken (or at once if `ready()` already holds after registering).
pub(crate) struct Changed<'a, F: Fn() -> bool> {
    pub(crate) list: &'a WaitList,
    pub(crate) ready: F,
    pub(crate) registered: bool,
}

impl<F: Fn() -> bool + Unpin> Future for Changed<'_, F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.registered || (self.ready)() {
            // Woken once since registering (or ready already): let the caller look again.
            return Poll::Ready(());
        }
        self.list.register(cx.waker());
        self.registered = true;
        if (self.ready)() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}
