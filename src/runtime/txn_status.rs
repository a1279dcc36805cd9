//! The transactional check `send` makes, published by the transaction's owner shard
//! ([`TxnStatus`]): whether a record may join the open transaction, and the barrier token that
//! orders it against a commit or abort called from another thread
//! (`runtime::txn_driver` publishes it and admits records by their token).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::engine::TransactionState;
use crate::error::TransactionError;

/// What `send` checks before it appends a record (`TransactionManager.maybeAddPartition`'s checks),
/// as the owner last published it, and the barrier tokens of commit and abort calls.
///
/// A record and a commit (or abort) called from another thread race: the record passed the
/// check while its transaction was open, and only reaches its shard later. Java decides the
/// race under the transaction manager's lock (`send` adds its partition before it returns, and
/// in COMMITTING_TRANSACTION it throws). Here the decision is the barrier token:
/// - [`check_send`](Self::check_send) hands a record the number of commit/abort calls begun so
///   far, and refuses it while one of them has not been handled by the owner yet (the owner's
///   check would still say IN_TRANSACTION);
/// - the call's barrier goes into every shard's data queue before the call reaches the owner,
///   so a record that passed the check with an older token and was queued behind that barrier
///   is refused by its shard ([`TxnDriver::admit`](super::txn_driver::TxnDriver::admit)), and one queued before it is in the flush
///   of that commit or abort.
///
/// So a record racing a commit is either in the committed transaction or refused with
/// [`TransactionError::InvalidState`] before it reached the engine (not in the log), and no
/// record reaches a participant after its transaction ended.
pub(crate) struct TxnStatus {
    state: Mutex<StatusState>,
    /// The token a record may carry, read without the lock: `started` while every call begun
    /// was handled and the owner's check passes, [`NOT_SENDABLE`] otherwise. It is stored under
    /// the lock after every change of `state`, so a load sees `state` as of some moment between
    /// two changes, as a send holding the lock would. `send` takes the lock only to build the
    /// error it refuses a record with, so calling threads share one read-only line per record
    /// rather than a lock.
    sendable: AtomicU64,
}

/// `TxnStatus::sendable` while records are refused.
const NOT_SENDABLE: u64 = u64::MAX;

/// Whether a transaction is open, as `close` needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ongoing {
    /// No transaction (not initialized, ready, initializing, fatal).
    None,
    /// Begun and not completing (IN_TRANSACTION, ABORTABLE_ERROR): to abort.
    Open,
    Committing,
    Aborting,
}

impl Ongoing {
    pub(super) fn of(state: Option<TransactionState>) -> Ongoing {
        match state {
            Some(TransactionState::InTransaction | TransactionState::AbortableError) => {
                Ongoing::Open
            }
            Some(TransactionState::CommittingTransaction) => Ongoing::Committing,
            Some(TransactionState::AbortingTransaction) => Ongoing::Aborting,
            _ => Ongoing::None,
        }
    }
}

struct StatusState {
    /// The owner's check, as of the last call it handled.
    check: Result<(), TransactionError>,
    /// The owner's transaction, as of the same moment.
    ongoing: Ongoing,
    /// Barrier tokens handed to commit and abort calls (the last one handed out).
    started: u64,
    /// The newest token whose call the owner handled, or that its call gave back unsent.
    settled: u64,
    /// The state the newest call moves the manager to.
    ending: &'static str,
}

impl Default for TxnStatus {
    fn default() -> Self {
        TxnStatus {
            state: Mutex::new(StatusState {
                check: Err(TransactionError::InvalidState {
                    operation: "send",
                    state: "UNINITIALIZED",
                }),
                ongoing: Ongoing::None,
                started: 0,
                settled: 0,
                ending: "",
            }),
            sendable: AtomicU64::new(NOT_SENDABLE),
        }
    }
}

impl StatusState {
    fn sendable(&self) -> u64 {
        if self.started <= self.settled && self.check.is_ok() {
            self.started
        } else {
            NOT_SENDABLE
        }
    }
}

/// The state name a commit (`true`) or an abort moves the transaction manager to.
pub(crate) fn ending_state(commit: bool) -> &'static str {
    if commit {
        "COMMITTING_TRANSACTION"
    } else {
        "ABORTING_TRANSACTION"
    }
}

impl TxnStatus {
    /// Whether a record may be sent now; if so, the barrier token it carries to its shard.
    pub(crate) fn check_send(&self) -> Result<u64, TransactionError> {
        let token = self.sendable.load(Ordering::Acquire);
        if token != NOT_SENDABLE {
            return Ok(token);
        }
        let state = self.state.lock().expect("txn status lock");
        if state.started > state.settled {
            return Err(TransactionError::InvalidState {
                operation: "send",
                state: state.ending,
            });
        }
        state.check.clone().map(|()| state.started)
    }

    /// A commit (`true`) or abort call begins: its barrier token. Sends are refused from now
    /// until the owner has handled the call ([`settle`](Self::settle) if it never reaches it).
    pub(crate) fn begin_ending(&self, commit: bool) -> u64 {
        let mut state = self.state.lock().expect("txn status lock");
        state.started += 1;
        state.ending = ending_state(commit);
        self.sendable.store(state.sendable(), Ordering::Release);
        state.started
    }

    /// The call of `token` gave up before reaching the owner: the transaction's state is what
    /// the owner last published.
    pub(crate) fn settle(&self, token: u64) {
        let mut state = self.state.lock().expect("txn status lock");
        state.settled = state.settled.max(token);
        self.sendable.store(state.sendable(), Ordering::Release);
    }

    /// A status with a transaction open, as the owner publishes it (the `handoff` bench).
    #[cfg(feature = "testkit")]
    pub(crate) fn open_for_bench() -> Self {
        let status = TxnStatus::default();
        status.publish(Ok(()), 0, Ongoing::Open);
        status
    }

    /// Whether the owner's transaction manager has a transaction open or ending.
    pub(crate) fn ongoing(&self) -> Ongoing {
        self.state.lock().expect("txn status lock").ongoing
    }

    /// The owner's check after it handled every call up to barrier `handled`.
    pub(super) fn publish(
        &self,
        check: Result<(), TransactionError>,
        handled: u64,
        ongoing: Ongoing,
    ) {
        let mut state = self.state.lock().expect("txn status lock");
        state.check = check;
        state.ongoing = ongoing;
        state.settled = state.settled.max(handled);
        self.sendable.store(state.sendable(), Ordering::Release);
    }
}
