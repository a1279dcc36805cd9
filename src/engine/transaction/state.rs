//! The transaction states and their legal transitions (`TransactionManager.State`,
//! `TransactionManager.transitionTo`, docs/java-rules.md §6.1), and the manager's moves into the
//! error states (docs/java-rules.md §4.3).

use crate::error::{ErrorCause, ProduceError, TransactionError};

use super::{TransactionManager, TxnAction};

/// Java's `TransactionManager.State` (no PREPARED_TRANSACTION, no 2PC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionState {
    /// `init_transactions` has not been called.
    Uninitialized,
    /// `init_transactions` is under way (InitProducerId).
    Initializing,
    /// Ready to begin a transaction.
    Ready,
    /// A transaction is open.
    InTransaction,
    /// `commit_transaction` is under way.
    CommittingTransaction,
    /// `abort_transaction` is under way.
    AbortingTransaction,
    /// The transaction failed and can only be aborted.
    AbortableError,
    /// The producer can do nothing more (fenced, or a fatal error).
    FatalError,
}

impl TransactionState {
    /// Java's name of the state (`IN_TRANSACTION`, ...).
    pub fn name(self) -> &'static str {
        match self {
            TransactionState::Uninitialized => "UNINITIALIZED",
            TransactionState::Initializing => "INITIALIZING",
            TransactionState::Ready => "READY",
            TransactionState::InTransaction => "IN_TRANSACTION",
            TransactionState::CommittingTransaction => "COMMITTING_TRANSACTION",
            TransactionState::AbortingTransaction => "ABORTING_TRANSACTION",
            TransactionState::AbortableError => "ABORTABLE_ERROR",
            TransactionState::FatalError => "FATAL_ERROR",
        }
    }

    /// `TransactionManager.State.isTransitionValid` (docs/java-rules.md §6.1).
    pub fn is_transition_valid(self, target: TransactionState) -> bool {
        use TransactionState::*;
        match target {
            Uninitialized => matches!(self, Ready | AbortableError),
            Initializing => matches!(
                self,
                Uninitialized | CommittingTransaction | AbortingTransaction
            ),
            Ready => matches!(
                self,
                Initializing | CommittingTransaction | AbortingTransaction
            ),
            InTransaction => self == Ready,
            CommittingTransaction => self == InTransaction,
            AbortingTransaction => matches!(self, InTransaction | AbortableError),
            AbortableError => matches!(
                self,
                InTransaction | CommittingTransaction | AbortableError | Initializing
            ),
            FatalError => true,
        }
    }

    /// `TransactionManager.isCompleting`.
    pub fn is_completing(self) -> bool {
        matches!(
            self,
            TransactionState::CommittingTransaction | TransactionState::AbortingTransaction
        )
    }
}

impl TransactionManager {
    /// `TransactionManager.transitionTo` from an API call: an invalid transition is an error and
    /// changes nothing. Every transition to a state other than an error state clears `last_error`.
    pub(super) fn transition_to(
        &mut self,
        target: TransactionState,
        operation: &'static str,
    ) -> Result<(), TransactionError> {
        if !self.state.is_transition_valid(target) {
            return Err(TransactionError::InvalidState {
                operation,
                state: self.state.name(),
            });
        }
        tracing::info!(
            target: "kacrab::transaction",
            from = self.state.name(),
            to = target.name(),
            "transaction state"
        );
        self.state = target;
        self.last_error_is_authorization = false;
        if !matches!(
            target,
            TransactionState::AbortableError | TransactionState::FatalError
        ) {
            self.last_error = None;
        }
        Ok(())
    }

    /// A transition decided by a response: an invalid one poisons the manager (Java's
    /// `shouldPoisonStateOnInvalidTransition`, KAFKA-14831).
    pub(super) fn transition_internal(&mut self, target: TransactionState) {
        if let Err(err) = self.transition_to(target, "a transaction response") {
            self.transition_to_fatal(TransactionError::Fatal(ErrorCause::other(format!(
                "invalid transition from a response: {err}"
            ))));
        }
    }

    /// `TransactionManager.transitionToAbortableError`: a no-op while aborting (the abort goes on).
    pub fn transition_to_abortable(&mut self, error: TransactionError) {
        match self.state {
            TransactionState::AbortingTransaction | TransactionState::FatalError => return,
            state if !state.is_transition_valid(TransactionState::AbortableError) => {
                return self.transition_to_fatal(TransactionError::Fatal(ErrorCause::Other {
                    code: error.code(),
                    reason: format!("abortable error in state {}: {error}", state.name()),
                }));
            }
            _ => {}
        }
        tracing::warn!(
            target: "kacrab::transaction",
            from = self.state.name(),
            error = %error,
            "transaction state AbortableError: the transaction must be aborted"
        );
        self.state = TransactionState::AbortableError;
        let cause = ErrorCause::Transaction(Box::new(error.clone()));
        self.last_error = Some(error);
        self.last_error_is_authorization = false;
        self.actions.push_back(TxnAction::Abortable {
            error: ProduceError::TransactionAbortable(cause),
        });
    }

    /// `TransactionManager.transitionToFatalError`: also fails the pending API call.
    pub fn transition_to_fatal(&mut self, error: TransactionError) {
        if self.state == TransactionState::FatalError {
            return;
        }
        tracing::error!(
            target: "kacrab::transaction",
            from = self.state.name(),
            error = %error,
            "transaction state FatalError"
        );
        self.state = TransactionState::FatalError;
        self.last_error = Some(error.clone());
        self.last_error_is_authorization = false;
        self.actions.push_back(TxnAction::Fatal {
            error: ProduceError::Fatal(ErrorCause::Transaction(Box::new(error.clone()))),
        });
        if let Some(handle) = self.pending.as_ref().map(|p| p.handle) {
            self.complete(handle, Err(error));
        }
    }

    /// `Sender.shouldHandleAuthorizationError`: the abortable error in force is InitProducerId's
    /// authorization failure, so the sender must return the manager to UNINITIALIZED
    /// ([`transition_to_uninitialized`](Self::transition_to_uninitialized)).
    pub fn should_handle_authorization_error(&self) -> bool {
        self.state == TransactionState::AbortableError && self.last_error_is_authorization
    }

    /// The sender's way out of an InitProducerId authorization failure
    /// (docs/java-rules.md §0 step 3, §5.2, §9 item 18): `TransactionManager.failPendingRequests`
    /// (every queued request's call fails with the error, unsent), then
    /// `TransactionManager.transitionToUninitialized` (the pending call fails too, and
    /// `last_error` is cleared). From UNINITIALIZED only `init_transactions` is accepted: no
    /// transaction may begin, and no abort may lead to READY, without a producer id.
    ///
    /// Batches: the abortable transition already told every participant to fail its unsent
    /// ones (`TxnAction::Abortable`), and none can be in flight: InitProducerId is sent in
    /// INITIALIZING, where `send` is refused, and an epoch bump's only after the abort's flush
    /// left nothing incomplete. `TxnAction::Ended` then clears the participants' gates, or the
    /// abortable command would fail the first batches after a later successful
    /// `init_transactions`. No request is in flight: the one answered was the only one
    /// (docs/java-rules.md §0).
    pub fn transition_to_uninitialized(&mut self) {
        if !self.should_handle_authorization_error() {
            return;
        }
        let Some(error) = self.last_error.clone() else {
            return;
        };
        tracing::warn!(
            target: "kacrab::transaction",
            error = %error,
            "InitProducerId was not authorized: back to UNINITIALIZED, init_transactions may be called again"
        );
        for request in std::mem::take(&mut self.queue) {
            if let Some(op) = request.op {
                self.complete(op, Err(error.clone()));
            }
        }
        if let Some(handle) = self.pending.as_ref().map(|p| p.handle) {
            self.complete(handle, Err(error));
        }
        self.forget_transaction();
        self.epoch_bump_required = false;
        self.transition_internal(TransactionState::Uninitialized);
        self.actions.push_back(TxnAction::Ended);
    }

    /// `TransactionManager.maybeFailWithError`.
    pub(super) fn fail_if_error(&self) -> Result<(), TransactionError> {
        match &self.last_error {
            Some(err)
                if matches!(
                    self.state,
                    TransactionState::AbortableError | TransactionState::FatalError
                ) =>
            {
                Err(err.clone())
            }
            _ => Ok(()),
        }
    }
}
