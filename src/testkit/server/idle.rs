//! A connection's idle time on the brokers' clock, and its close past
//! `connections.max.idle.ms`, as a Kafka broker's `Selector` closes a connection on which it
//! has read or written nothing for that long (`maybeCloseOldestConnection`), without a word to
//! the client. A request the client wrote that the broker had not read yet is lost with the
//! connection.
//!
//! On real time the connection's socket receive timeout does it (`connection.rs`): a read
//! waiting longer than the limit ends the connection. On a frozen clock (`clock.rs`) nothing
//! idles between the test's advances, and each advance sweeps every connection accepted while
//! the clock was frozen ([`IdleWatch::sweep`]):
//! - a connection is active when accepted, when a request is read and when its answer is
//!   written (Kafka's `IdleExpiryManager.update` on every read and write);
//! - a request in service is waited for: requests take no time on a frozen clock, so an advance
//!   comes after the requests already read (the simulator likewise never closes a connection
//!   owing an answer);
//! - a connection idle for at least its limit is closed: the broker reads nothing from it any
//!   more, and the next request that arrives on it is dropped unread (an idle crossing) and
//!   the socket shut down. Kafka closes one connection per poll; an advance closes them all;
//! - otherwise the close reaches the client (the socket is shut down) at the next advance:
//!   nothing moves between advances, the FIN's transit included, so a request the client
//!   writes meanwhile crosses the close on the wire, as one written during a real network's
//!   transit time does. A test thereby makes a request cross a close by construction.

use std::net::{Shutdown, TcpStream};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::clock::BrokerClock;

/// One connection's idle bookkeeping, shared by its thread and the sweeps.
#[derive(Debug)]
pub(crate) struct IdleWatch {
    /// The limit swept on the frozen clock. `None`: the connection is never swept (no limit,
    /// or accepted on real time, where `read_timeout` applies).
    limit: Option<Duration>,
    /// The socket's receive timeout: the limit, for a connection accepted on real time.
    read_timeout: Option<Duration>,
    state: Mutex<IdleState>,
    /// Signalled when a request's service ends.
    served: Condvar,
}

#[derive(Debug)]
struct IdleState {
    last_activity: Instant,
    /// A request was read and its answer is not written yet.
    serving: bool,
    /// Closed for idling: nothing more is served. Never unset.
    closed: bool,
    /// The close was delivered (the socket shut down). Only after `closed`.
    shut_down: bool,
}

impl IdleWatch {
    /// The watch of a connection accepted now, whose `connections.max.idle.ms` is `limit`.
    pub(crate) fn new(clock: &BrokerClock, limit: Option<Duration>) -> IdleWatch {
        let frozen = clock.is_frozen();
        IdleWatch {
            limit: limit.filter(|_| frozen),
            read_timeout: limit.filter(|_| !frozen),
            state: Mutex::new(IdleState {
                last_activity: clock.now(),
                serving: false,
                closed: false,
                shut_down: false,
            }),
            served: Condvar::new(),
        }
    }

    /// The receive timeout to give the connection's socket.
    pub(crate) fn read_timeout(&self) -> Option<Duration> {
        self.read_timeout
    }

    /// A request was read: the returned guard marks it in service until dropped, which must
    /// happen before its answer is flushed (so that, once the client has the answer, the
    /// connection's activity is recorded at the instant it was served). `None` when the
    /// connection was closed for idling first: the request is lost with it.
    pub(crate) fn serve<'a>(&'a self, clock: &'a BrokerClock) -> Option<Serving<'a>> {
        let mut state = self.lock();
        if state.closed {
            return None;
        }
        state.serving = true;
        state.last_activity = clock.now();
        Some(Serving { watch: self, clock })
    }

    /// One advance of the frozen clock to `now`: waits out a request in service, then delivers
    /// a close made at an earlier advance, or closes the connection if it has been idle for its
    /// limit. True when it closed the connection now.
    pub(crate) fn sweep(&self, now: Instant, stream: &TcpStream) -> bool {
        let Some(limit) = self.limit else {
            return false;
        };
        let mut state = self.lock();
        while state.serving {
            state = self
                .served
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        if state.closed {
            if !state.shut_down {
                state.shut_down = true;
                let _ = stream.shutdown(Shutdown::Both);
            }
            return false;
        }
        if now.saturating_duration_since(state.last_activity) < limit {
            return false;
        }
        state.closed = true;
        true
    }

    fn lock(&self) -> MutexGuard<'_, IdleState> {
        // The state is consistent at every unlock; a panic elsewhere leaves it usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A request in service; dropping it records the connection's activity and wakes a sweep
/// waiting for it (also when the thread serving it panics).
pub(crate) struct Serving<'a> {
    watch: &'a IdleWatch,
    clock: &'a BrokerClock,
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        let mut state = self.watch.lock();
        state.serving = false;
        state.last_activity = self.clock.now();
        drop(state);
        self.watch.served.notify_all();
    }
}
