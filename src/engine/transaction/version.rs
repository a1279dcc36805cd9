//! The transaction manager under transactions V2 (KIP-890 part 2): when the protocol is chosen
//! (`TransactionManager.maybeUpdateTransactionV2Enabled`), what it changes in the recovery from
//! an abortable error (`canHandleAbortableError`, `needToTriggerEpochBumpFromClient`), and the
//! identity an EndTxn v5 returns (`EndTxnHandler.handleResponse`). The protocol chosen for a
//! transaction holds until it ends; see `engine/transaction_version.rs` for the choice itself.

use kafka_protocol::messages::ApiVersionsResponse;

use crate::error::{ErrorCause, TransactionError};
use crate::protocol::api::NegotiatedVersions;

use super::super::identity::ProducerIdAndEpoch;
use super::super::transaction_version;
use super::super::NodeId;
use super::{TransactionManager, TxnAction};

impl TransactionManager {
    /// Java's `isTransactionV2Enabled`: the current (or, between transactions, the next)
    /// transaction runs under transactions V2.
    pub fn is_transaction_v2(&self) -> bool {
        self.transaction_v2
    }

    /// The protocol of the transaction in progress: while it is being committed or aborted,
    /// the one it began with, whatever was chosen for the next (a participant's late partition
    /// is added as the transaction's own protocol says).
    pub fn current_transaction_v2(&self) -> bool {
        self.completing_v2.unwrap_or(self.transaction_v2)
    }

    /// An ApiVersions answer on one of the owner's connections (Java's `ApiVersions.update`).
    /// It changes nothing by itself: the protocol is chosen only at the two points of
    /// [`maybe_update_transaction_v2`](Self::maybe_update_transaction_v2).
    pub fn on_api_versions(
        &mut self,
        node: NodeId,
        response: &ApiVersionsResponse,
        negotiated: &NegotiatedVersions,
    ) {
        self.cluster.on_api_versions(node, response, negotiated);
    }

    /// `TransactionManager.maybeUpdateTransactionV2Enabled(onInitialization)`: chooses the
    /// protocol from what the brokers said. Called when `init_transactions` obtained its producer
    /// id (`on_initialization`) and when a commit or abort begins, after its EndTxn took the
    /// protocol of the ending transaction. A move from V1 to V2 between two transactions makes
    /// the ending one bump the epoch from the client (InitProducerId after EndTxn), as Java does:
    /// the coordinator then cannot count a V1 transaction's partitions into the V2 one.
    ///
    /// The error (only with `kacrab.transaction.version=2`, against brokers without the V2
    /// versions) is returned at initialization; when a transaction ends, the protocol stays as
    /// it was and the drain refuses the broker that lacks Produce v12 instead
    /// (`sender/drain.rs`).
    pub fn maybe_update_transaction_v2(
        &mut self,
        on_initialization: bool,
    ) -> Result<(), TransactionError> {
        let v2 = match transaction_version::decide(self.transaction_version_config, &self.cluster) {
            Ok(v2) => v2,
            Err(err) if on_initialization => return Err(err),
            Err(_) => return Ok(()),
        };
        let was = self.transaction_v2;
        self.transaction_v2 = v2;
        if was != v2 {
            tracing::info!(
                target: "kacrab::transaction",
                transaction_v2 = v2,
                finalized_features_epoch = self.cluster.finalized_features_epoch,
                "transaction protocol chosen"
            );
        }
        if !on_initialization && !was && v2 {
            self.epoch_bump_required = true;
        }
        Ok(())
    }

    /// `TransactionManager.canHandleAbortableError`: recovering from an abortable error needs
    /// a new epoch, from the client (InitProducerId v3+, KIP-360) or from the coordinator at
    /// every EndTxn (transactions V2).
    pub fn can_handle_abortable_error(&self) -> bool {
        self.coordinator_supports_bumping_epoch || self.transaction_v2
    }

    /// `TransactionManager.needToTriggerEpochBumpFromClient`: under transactions V2 the
    /// coordinator bumps the epoch at every EndTxn, so the client never asks for one.
    pub fn need_to_trigger_epoch_bump_from_client(&self) -> bool {
        self.coordinator_supports_bumping_epoch && !self.transaction_v2
    }

    /// EndTxn v5 succeeded with the identity the coordinator bumped to (`EndTxnHandler`: a
    /// producer id other than -1 is adopted, the epoch overflow's new producer id at epoch 0
    /// included, and every partition's sequences start again at 0 under it). Below v5 the
    /// answer carries -1 and nothing changes. Returns the identity to adopt, if any; an answer
    /// that names a producer id with a negative epoch is broken and fatal.
    pub fn adopt_end_txn_identity(
        &mut self,
        returned: ProducerIdAndEpoch,
    ) -> Result<Option<ProducerIdAndEpoch>, TransactionError> {
        if returned.producer_id == -1 {
            return Ok(None);
        }
        if !returned.is_valid() || returned.epoch < 0 {
            return Err(TransactionError::Fatal(ErrorCause::other(format!(
                "EndTxn returned an invalid identity {returned:?}"
            ))));
        }
        let from = self.producer_id_and_epoch;
        if from == returned {
            return Ok(None);
        }
        self.producer_id_and_epoch = returned;
        self.actions
            .push_back(TxnAction::IdentityReplaced { from, to: returned });
        Ok(Some(returned))
    }
}
