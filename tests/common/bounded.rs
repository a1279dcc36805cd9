//! Bounded waits for tests whose waits have no timeout of their own: a whole test body run
//! under a deadline, and a future driven on the calling thread up to a deadline.

use std::future::Future;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// Runs `body` on a thread of its own and returns what it returns; panics if it has not
/// finished within `timeout` (a hang becomes a failure), and passes its panic on if it
/// panicked.
pub fn within<R: Send + 'static>(
    timeout: Duration,
    body: impl FnOnce() -> R + Send + 'static,
) -> R {
    let (done, finished) = mpsc::channel::<()>();
    let name = thread::current().name().unwrap_or("bounded").to_string();
    let handle = thread::Builder::new()
        .name(name)
        .spawn(move || {
            let result = body();
            let _ = done.send(());
            result
        })
        .expect("spawn the test body");
    match finished.recv_timeout(timeout) {
        // Disconnected: the body panicked before it could say it was done.
        Ok(()) | Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(RecvTimeoutError::Timeout) => panic!("the test did not finish within {timeout:?}"),
    }
}

/// Wakes the thread that polls.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives `future` on the calling thread, parked between polls until its waker is called;
/// `None` if it is not ready within `timeout`. A future that never calls its waker when it
/// becomes ready is polled again only at a spurious wake-up, so it times out here.
pub fn block_on_timeout<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + timeout;
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return Some(output);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::park_timeout(deadline - now);
    }
}
