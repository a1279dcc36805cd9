//! The transaction states and their legal transitions (`TM.State`, `TM.transitionTo`,
//! java-producer-state-machine.md §6.1), and the manager's moves into the error states
//! (§4.3).

use crate::error::{ProduceError, TransactionError};

use super::{TransactionManager, TxnAction};

/// Java's `TransactionManager.State` (TV1; no PREPARED_TRANSACTION, no 2PC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionState {
    Uninitialized,
    Initializing,
    Ready,
    InTransaction,
    CommittingTransaction,
    AbortingTransaction,
    AbortableError,
    FatalError,
}

impl TransactionState {
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

    /// `TM.State.isTransitionValid` (§6.1).
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

    /// `TM.isCompleting`.
    pub fn is_completing(self) -> bool {
        matches!(
            self,
            TransactionState::CommittingTransaction | TransactionState::AbortingTransaction
        )
    }
}

impl TransactionManager {
    /// `TM.transitionTo` from an API call: an invalid transition is an error and changes
    /// nothing. Every transition to a state other than an error state clears `last_error`.
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
            self.transition_to_fatal(TransactionError::Fatal(format!(
                "invalid transition from a response: {err}"
            )));
        }
    }

    /// `TM.transitionToAbortableError`: a no-op while aborting (the abort goes on).
    pub fn transition_to_abortable(&mut self, error: TransactionError) {
        match self.state {
            TransactionState::AbortingTransaction | TransactionState::FatalError => return,
            state if !state.is_transition_valid(TransactionState::AbortableError) => {
                return self.transition_to_fatal(TransactionError::Fatal(format!(
                    "abortable error in state {}: {error}",
                    state.name()
                )));
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
        let reason = error.to_string();
        self.last_error = Some(error);
        self.actions.push_back(TxnAction::Abortable {
            error: ProduceError::TransactionAbortable(reason),
        });
    }

    /// `TM.transitionToFatalError`: also fails the pending API call.
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
        self.actions.push_back(TxnAction::Fatal {
            error: ProduceError::Fatal(error.to_string()),
        });
        if let Some(handle) = self.pending.as_ref().map(|p| p.handle) {
            self.complete(handle, Err(error));
        }
    }

    /// `TM.maybeFailWithError`.
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
