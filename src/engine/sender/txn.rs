//! The engine's transactional side: the owner's request loop over the transaction manager
//! (`Sender.maybeSendAndPollTransactionalRequest`, `TxnRequestHandler`), the commands the driver
//! forwards, and the API calls (the participant's data plane is in `txn_participant.rs`). The
//! protocol between engines is described in `engine/transaction.rs`.
//!
//! Deviation from Java, on purpose: produce requests are not paused while a transactional
//! request is in flight (docs/java-rules.md §0 quirk). The drain gate (a partition's batches wait
//! for its AddPartitionsToTxn) and the EndTxn flush barrier are what order data and control; the
//! pause adds latency only.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, EndTxnResponse, FindCoordinatorResponse,
    InitProducerIdResponse, TxnOffsetCommitResponse,
};

use crate::config::TransactionVersion;
use crate::error::{ErrorCause, ProduceError, TransactionError};
use crate::protocol::api::ApiKey;
use crate::protocol::wire::{self, WireError};

use super::super::connection::InFlightHeader;
use super::super::identity::ProducerIdAndEpoch;
use super::super::partition::TopicPartition;
use super::super::transaction::{
    CoordinatorType, GroupMetadata, OffsetAndMetadata, QueuedRequest, TransactionManager,
    TransactionState, TxnAction, TxnHandle, TxnRequest,
};
use super::super::transaction_version;
use super::super::txn_requests::{self as requests, TxnOutcome, ADD_PARTITIONS_RETRY_BACKOFF_MS};
use super::super::{Delivery, Micros, NodeId};
use super::{Engine, RequestBody, TxnParticipant};

impl<D: Delivery> Engine<D> {
    pub fn is_transactional(&self) -> bool {
        self.config.transactional_id.is_some()
    }

    pub fn transaction_manager(&self) -> Option<&TransactionManager> {
        self.tm.as_ref()
    }

    pub fn txn_participant(&self) -> &TxnParticipant {
        &self.participant
    }

    fn tm_mut(&mut self) -> Result<&mut TransactionManager, TransactionError> {
        self.tm.as_mut().ok_or(TransactionError::NotTransactional)
    }

    /// The transactional actions emitted since the last call (see `engine/transaction.rs`).
    pub fn take_txn_actions(&mut self) -> Vec<TxnAction> {
        let mut out: Vec<TxnAction> = self.txn_actions.drain(..).collect();
        if let Some(tm) = self.tm.as_mut() {
            out.extend(tm.actions.drain(..));
        }
        out
    }

    pub fn has_txn_actions(&self) -> bool {
        !self.txn_actions.is_empty() || self.tm.as_ref().is_some_and(|tm| !tm.actions.is_empty())
    }

    // ----------------------------------------------------------------------------------------
    // API calls (owner only). Each returns at once; the result of a handle comes back as
    // `TxnAction::Completed` and is taken with `txn_result`.
    // ----------------------------------------------------------------------------------------

    pub fn init_transactions(&mut self) -> Result<TxnHandle, TransactionError> {
        self.tm_mut()?.init_transactions()
    }

    pub fn begin_transaction(&mut self) -> Result<(), TransactionError> {
        self.tm_mut()?.begin_transaction()
    }

    pub fn send_offsets_to_transaction(
        &mut self,
        offsets: BTreeMap<TopicPartition, OffsetAndMetadata>,
        group: GroupMetadata,
    ) -> Result<TxnHandle, TransactionError> {
        self.tm_mut()?.send_offsets_to_transaction(offsets, group)
    }

    pub fn commit_transaction(&mut self) -> Result<TxnHandle, TransactionError> {
        self.tm_mut()?.commit_transaction()
    }

    pub fn abort_transaction(&mut self) -> Result<TxnHandle, TransactionError> {
        self.tm_mut()?.abort_transaction()
    }

    /// A call's result once it is done (taking it ends the call, docs/java-rules.md §6.3).
    pub fn txn_result(&mut self, handle: TxnHandle) -> Option<Result<(), TransactionError>> {
        self.tm.as_mut()?.take_result(handle)
    }

    /// Whether a record may be sent now (`maybeAddPartition`'s checks).
    pub fn txn_check_send(&self) -> Result<(), TransactionError> {
        match &self.tm {
            Some(tm) => tm.check_send(),
            None => Err(TransactionError::NotTransactional),
        }
    }

    // ----------------------------------------------------------------------------------------
    // Commands forwarded by the driver
    // ----------------------------------------------------------------------------------------

    /// Owner: `kacrab.transaction.version` (the default is `auto`). Set before
    /// `init_transactions`; a participant ignores it (it follows the owner).
    pub fn set_transaction_version(&mut self, version: TransactionVersion) {
        if let Some(tm) = self.tm.as_mut() {
            tm.transaction_version_config = version;
        }
    }

    /// Owner: the protocol of the transaction in progress, which every participant learns
    /// with the `PartitionsAdded` that opens its gate (`txn_set_transaction_v2`).
    pub fn txn_transaction_v2(&self) -> bool {
        self.tm
            .as_ref()
            .is_some_and(|tm| tm.current_transaction_v2())
    }

    /// Participant: the transaction in progress runs under transactions V2 (`v2`) or V1; the
    /// driver calls it with every `PartitionsAdded`, before `txn_partitions_added`.
    pub fn txn_set_transaction_v2(&mut self, v2: bool) {
        self.participant.transaction_v2 = v2;
    }

    /// Owner: a participant's partitions want in.
    pub fn txn_add_partitions(&mut self, partitions: &[TopicPartition]) {
        let v2 = self.txn_transaction_v2();
        self.participant.transaction_v2 = v2;
        let Some(tm) = self.tm.as_mut() else { return };
        let already = tm.add_partitions(partitions);
        if !already.is_empty() {
            tm.actions.push_back(TxnAction::PartitionsAdded {
                partitions: already,
            });
        }
    }

    /// Participant: these partitions are in the transaction.
    pub fn txn_partitions_added(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            if let Some(i) = self.partition_index.get(tp) {
                if self.participant.requested.remove(&i) {
                    self.participant.added.insert(i);
                }
            }
        }
    }

    /// Owner: a participant's batch failed.
    pub fn txn_produce_failed(&mut self, error: &ProduceError, needs_bump: bool, fatal: bool) {
        if let Some(tm) = self.tm.as_mut() {
            tm.produce_failed(error, needs_bump, fatal);
        }
    }

    /// Participant: `send` refused a record of the transaction before it reached an engine
    /// (`error`: its size, its partition, its topic's metadata, `buffer.memory`). As Java's
    /// `KafkaProducer.doSend` hands such an `ApiException` to
    /// `TransactionManager.maybeTransitionToErrorState`, the owner makes the transaction abortable,
    /// so it cannot commit without the record. The caller queued it on this shard's data queue
    /// behind the records it sent before, so it reaches the owner before this shard's `Flushed` for
    /// any commit that began after the refusal.
    pub fn txn_send_refused(&mut self, error: ProduceError) {
        if self.is_transactional() {
            self.txn_actions.push_back(TxnAction::ProduceFailed {
                error,
                needs_bump: false,
                fatal: false,
            });
        }
    }

    /// Participant: the transaction must be aborted; unsent batches fail.
    pub fn txn_abortable(&mut self, error: ProduceError) {
        if self.participant.fail_unsent.is_none() {
            self.participant.fail_unsent = Some(error);
        }
    }

    /// Participant: commit or abort began.
    pub fn txn_flush(&mut self, round: u64, abort: bool) {
        if abort {
            self.participant.fail_unsent = Some(ProduceError::TransactionAborted);
        }
        if self.participant.flush_round.is_none() {
            self.flushes += 1;
        }
        self.participant.flush_round = Some(round);
    }

    /// Owner: every participant has flushed `round`.
    pub fn txn_all_flushed(&mut self, round: u64) {
        if let Some(tm) = self.tm.as_mut() {
            tm.all_flushed(round);
        }
    }

    /// Participant: the transaction ended; the next one starts with no partition added.
    pub fn txn_ended(&mut self) {
        self.participant.added.clear();
        self.participant.requested.clear();
        self.participant.fail_unsent = None;
    }

    /// Participant: the transaction manager is fatal. Set directly, not by `become_fatal`:
    /// the manager's own error needs no report back to it.
    pub fn txn_fatal(&mut self, error: ProduceError) {
        if self.fatal.is_none() {
            self.fatal = Some(error);
        }
    }

    // ----------------------------------------------------------------------------------------
    // Owner: the transactional request loop
    // ----------------------------------------------------------------------------------------

    /// `Sender.shouldHandleAuthorizationError` (docs/java-rules.md §0 step 3), in the loop after
    /// the fatal check and before any transactional request: an InitProducerId refused for
    /// authorization left the manager abortable; the pending requests fail and it returns to
    /// UNINITIALIZED, so the application may call `init_transactions` again (docs/java-rules.md §9
    /// item 18; the idempotent producer, `init_producer_id.rs`, asks again by itself). Drivers poll
    /// after feeding an answer and before they route its actions (`runtime/shard.rs`), so the
    /// application learns that the call failed only once the manager is UNINITIALIZED.
    pub(super) fn maybe_handle_txn_authorization_error(&mut self) {
        if let Some(tm) = self.tm.as_mut() {
            if tm.should_handle_authorization_error() {
                tm.transition_to_uninitialized();
            }
        }
    }

    /// `Sender.maybeSendAndPollTransactionalRequest`: at most one request in flight.
    pub(super) fn maybe_send_txn_request(&mut self, now: Micros) {
        loop {
            let Some(tm) = self.tm.as_mut() else { return };
            if tm.in_flight.is_some() {
                return;
            }
            let Some(request) = tm.next_request(now) else {
                return;
            };
            let target = match request.request.coordinator() {
                None => match self.least_loaded_ready() {
                    Some(node) => node,
                    None => {
                        self.tm.as_mut().expect("checked").requeue(request, now);
                        self.ensure_some_connection(now);
                        return;
                    }
                },
                Some(kind) => {
                    let tm = self.tm.as_mut().expect("checked");
                    let known = match kind {
                        CoordinatorType::Transaction => tm.transaction_coordinator,
                        CoordinatorType::Group => tm.group_coordinator,
                    };
                    match known {
                        Some(node) => node,
                        None => {
                            let key = coordinator_key(tm, &request.request, kind);
                            tm.lookup_coordinator(kind, key);
                            tm.requeue(request, now);
                            continue;
                        }
                    }
                }
            };
            if !self.connections.get(&target).is_some_and(|c| c.is_ready()) {
                if self.wait_for_coordinator(now, target, request) {
                    // FindCoordinator was queued: send it now, not at some later event (its
                    // retry time is already past, so no timer would fire for it).
                    continue;
                }
                return;
            }
            self.txn_wait = None;
            self.send_txn_request(now, target, request);
            return;
        }
    }

    /// The coordinator's connection is not ready: connect, and after `request.timeout.ms` of
    /// waiting find the coordinator again (`Sender.awaitNodeReady` →
    /// `maybeFindCoordinatorAndRetry`). `true` when the wait ended and the coordinator is to be
    /// looked up again.
    fn wait_for_coordinator(
        &mut self,
        now: Micros,
        target: NodeId,
        request: QueuedRequest,
    ) -> bool {
        let since = match self.txn_wait {
            Some((node, since)) if node == target => since,
            _ => {
                self.txn_wait = Some((target, now));
                now
            }
        };
        let timed_out = now >= since + self.config.request_timeout;
        let tm = self.tm.as_mut().expect("owner");
        if timed_out {
            if let Some(kind) = request.request.coordinator() {
                let key = coordinator_key(tm, &request.request, kind);
                tm.lookup_coordinator(kind, key);
            }
            self.txn_wait = None;
        }
        tm.requeue(request, now);
        if !timed_out {
            self.maybe_connect(now, target);
        }
        timed_out
    }

    fn send_txn_request(&mut self, now: Micros, node: NodeId, request: QueuedRequest) {
        let tm = self.tm.as_ref().expect("owner");
        let transactional_id = tm.transactional_id.clone();
        let identity = tm.producer_id_and_epoch;
        let timeout = tm.transaction_timeout_ms;
        let api = match &request.request {
            TxnRequest::FindCoordinator { .. } => ApiKey::FindCoordinator,
            TxnRequest::InitProducerId { .. } => ApiKey::InitProducerId,
            TxnRequest::AddPartitions => ApiKey::AddPartitionsToTxn,
            TxnRequest::AddOffsets { .. } => ApiKey::AddOffsetsToTxn,
            TxnRequest::TxnOffsetCommit { .. } => ApiKey::TxnOffsetCommit,
            TxnRequest::EndTxn { .. } => ApiKey::EndTxn,
        };
        // A V1 transaction caps EndTxn and TxnOffsetCommit at v4; a V2 one needs v5
        // (`transaction_version::version_for`).
        let v2 = match &request.request {
            TxnRequest::EndTxn { v2, .. } | TxnRequest::TxnOffsetCommit { v2, .. } => *v2,
            _ => false,
        };
        let negotiated = self.connections[&node]
            .versions
            .version(api)
            .map_err(|e| e.to_string())
            .and_then(|v| transaction_version::version_for(api, v, v2));
        let version = match negotiated {
            Ok(v) => v,
            Err(error) => {
                // Java: UnsupportedVersionException is fatal.
                let tm = self.tm.as_mut().expect("owner");
                tm.fail_request(
                    &request,
                    TransactionError::Fatal(ErrorCause::UnsupportedVersion {
                        broker: node,
                        error,
                    }),
                );
                return;
            }
        };
        // Java builds the request (`AbstractRequest.Builder.build(version)`) before anything
        // is in flight, and TxnOffsetCommit's builder may refuse the negotiated version (group
        // metadata below v3). The refusal is a version mismatch, fatal as above; nothing is
        // written and no request is in flight.
        let offset_commit = match &request.request {
            TxnRequest::TxnOffsetCommit { group, .. } => {
                let tm = self.tm.as_mut().expect("owner");
                match requests::txn_offset_commit_request(
                    version,
                    &transactional_id,
                    identity,
                    group,
                    &tm.pending_txn_offset_commits,
                ) {
                    Ok(r) => Some(r),
                    Err(err) => {
                        tm.fail_request(&request, err);
                        return;
                    }
                }
            }
            _ => None,
        };
        {
            let tm = self.tm.as_mut().expect("owner");
            tm.in_flight = Some(request.clone());
            if matches!(request.request, TxnRequest::InitProducerId { .. }) {
                // KIP-360: only v3+ carries the identity to bump.
                tm.coordinator_supports_bumping_epoch = version >= 3;
            }
        }
        let body = RequestBody::Txn;
        let tm = self.tm.as_ref().expect("owner");
        match &request.request {
            TxnRequest::FindCoordinator { key_type, key } => {
                let r = requests::find_coordinator_request(version, *key_type, key);
                self.send_request(now, node, api, version, &r, body);
            }
            TxnRequest::InitProducerId { bump } => {
                let from = (*bump && version >= 3).then_some(identity);
                let r = requests::init_producer_id_request(&transactional_id, timeout, from);
                self.send_request(now, node, api, version, &r, body);
            }
            TxnRequest::AddPartitions => {
                let r = requests::add_partitions_request(
                    &transactional_id,
                    identity,
                    tm.pending_partitions.iter(),
                );
                self.send_request(now, node, api, version, &r, body);
            }
            TxnRequest::AddOffsets { group, .. } => {
                let r = requests::add_offsets_request(&transactional_id, identity, &group.group_id);
                self.send_request(now, node, api, version, &r, body);
            }
            TxnRequest::TxnOffsetCommit { .. } => {
                let r = offset_commit.expect("built before the request went in flight");
                self.send_request(now, node, api, version, &r, body);
            }
            TxnRequest::EndTxn { commit, .. } => {
                let r = requests::end_txn_request(&transactional_id, identity, *commit);
                self.send_request(now, node, api, version, &r, body);
            }
        }
    }

    /// The in-flight transactional request's connection is gone: find its coordinator again
    /// and retry (`TxnRequestHandler.onComplete`, disconnected).
    pub(super) fn txn_request_lost(&mut self, now: Micros) {
        let retry_at = now + self.config.retry_backoff;
        let Some(tm) = self.tm.as_mut() else { return };
        let Some(request) = tm.in_flight.take() else {
            return;
        };
        tm.on_answer_lost(&request);
        if let Some(kind) = request.request.coordinator() {
            let key = coordinator_key(tm, &request.request, kind);
            tm.lookup_coordinator(kind, key);
        }
        tm.requeue(request, retry_at);
    }

    /// Applies an error outcome; `false` when the outcome is `Done` (the caller applies the
    /// success).
    fn apply_txn_outcome(&mut self, now: Micros, request: QueuedRequest, outcome: TxnOutcome) {
        let backoff = self.config.retry_backoff;
        let tm = self.tm.as_mut().expect("owner");
        match outcome {
            TxnOutcome::Done => unreachable!("success is applied by the handler"),
            TxnOutcome::Retry { short } => {
                let wait = if short {
                    (ADD_PARTITIONS_RETRY_BACKOFF_MS * 1000).min(backoff)
                } else {
                    backoff
                };
                tm.requeue(request, now + wait);
            }
            TxnOutcome::LookupCoordinator(kind) => {
                let key = coordinator_key(tm, &request.request, kind);
                tm.lookup_coordinator(kind, key);
                tm.requeue(request, now + backoff);
            }
            TxnOutcome::Abortable(err) => {
                if request.request == TxnRequest::AddPartitions {
                    tm.on_partitions_rejected(&request, err);
                } else {
                    tm.fail_request(&request, err);
                }
            }
            TxnOutcome::AbortableIfPossible(err) => {
                // `TxnRequestHandler.abortableErrorIfPossible`: under transactions V2 the
                // abort's EndTxn brings the new epoch, so no client bump is owed.
                if tm.can_handle_abortable_error() {
                    if tm.need_to_trigger_epoch_bump_from_client() {
                        tm.epoch_bump_required = true;
                    }
                    tm.fail_request(&request, err);
                } else {
                    let cause = ErrorCause::Transaction(Box::new(err));
                    tm.fail_request(
                        &request,
                        TransactionError::Fatal(ErrorCause::NoEpochBump(Box::new(cause))),
                    );
                }
            }
            TxnOutcome::Fatal(err) => tm.fail_request(&request, err),
        }
    }

    /// A transactional response arrived (`TxnRequestHandler.onComplete` → `handleResponse`).
    pub(super) fn handle_txn_response(
        &mut self,
        now: Micros,
        header: InFlightHeader,
        body: Bytes,
    ) -> Result<(), WireError> {
        let Some(request) = self.tm.as_mut().and_then(|tm| tm.in_flight.take()) else {
            return Ok(());
        };
        let version = header.version;
        macro_rules! decode {
            ($t:ty) => {
                match wire::decode_response::<$t>(header.api, version, body) {
                    Ok(r) => r,
                    Err(e) => {
                        // No usable answer: as a lost connection.
                        self.tm.as_mut().expect("owner").in_flight = Some(request);
                        self.txn_request_lost(now);
                        return Err(e);
                    }
                }
            };
        }
        match request.request.clone() {
            TxnRequest::FindCoordinator { key_type, .. } => {
                let response = decode!(FindCoordinatorResponse);
                match requests::classify_find_coordinator(version, &response) {
                    Ok(found) => self.on_coordinator_found(key_type, found),
                    Err(outcome) => self.apply_txn_outcome(now, request, outcome),
                }
            }
            TxnRequest::InitProducerId { .. } => {
                let response = decode!(InitProducerIdResponse);
                self.on_txn_init_producer_id(now, request, &response);
            }
            TxnRequest::AddPartitions => {
                let response = decode!(AddPartitionsToTxnResponse);
                let tm = self.tm.as_ref().expect("owner");
                let requested: Vec<TopicPartition> =
                    tm.pending_partitions.iter().cloned().collect();
                let nothing_in = tm.partitions_in_transaction.is_empty();
                match requests::classify_add_partitions(&response, &requested, nothing_in) {
                    TxnOutcome::Done => self.tm.as_mut().expect("owner").on_partitions_added(),
                    outcome => self.apply_txn_outcome(now, request, outcome),
                }
            }
            TxnRequest::AddOffsets { .. } => {
                let response = decode!(AddOffsetsToTxnResponse);
                match requests::classify_add_offsets(response.error_code) {
                    TxnOutcome::Done => self.tm.as_mut().expect("owner").on_offsets_added(&request),
                    outcome => self.apply_txn_outcome(now, request, outcome),
                }
            }
            TxnRequest::TxnOffsetCommit { group, .. } => {
                let response = decode!(TxnOffsetCommitResponse);
                let decided = requests::classify_txn_offset_commit(&response);
                match decided.outcome {
                    TxnOutcome::Done => {
                        let retry_at = now + self.config.retry_backoff;
                        let tm = self.tm.as_mut().expect("owner");
                        if decided.lookup {
                            tm.lookup_coordinator(CoordinatorType::Group, group.group_id.clone());
                        }
                        tm.on_offsets_committed(request, &decided.committed, retry_at);
                    }
                    outcome => {
                        self.tm
                            .as_mut()
                            .expect("owner")
                            .pending_txn_offset_commits
                            .clear();
                        self.apply_txn_outcome(now, request, outcome);
                    }
                }
            }
            TxnRequest::EndTxn { commit, .. } => {
                let response = decode!(EndTxnResponse);
                let started = self.tm.as_ref().expect("owner").transaction_started;
                match requests::classify_end_txn(response.error_code, commit, started) {
                    TxnOutcome::Done => self.on_end_txn_done(now, request, &response),
                    outcome => self.apply_txn_outcome(now, request, outcome),
                }
            }
        }
        Ok(())
    }

    /// EndTxn succeeded (`EndTxnHandler.handleResponse`). A v5 answer carries the identity the
    /// coordinator bumped to at this commit or abort (KIP-890 part 2), also when it answers a
    /// retry of an EndTxn it had already completed: the owner runs under it at once, the driver
    /// carries it to the other engines (`TxnAction::IdentityReplaced`), and each partition's
    /// sequences start again at 0 under it, before the next transaction's first batch.
    fn on_end_txn_done(&mut self, now: Micros, request: QueuedRequest, response: &EndTxnResponse) {
        let returned = ProducerIdAndEpoch::new(response.producer_id.0, response.producer_epoch);
        let tm = self.tm.as_mut().expect("owner");
        match tm.adopt_end_txn_identity(returned) {
            Ok(adopted) => {
                tm.on_end_txn(&request);
                if let Some(identity) = adopted {
                    self.on_identity(identity);
                }
            }
            Err(err) => self.apply_txn_outcome(now, request, TxnOutcome::Fatal(err)),
        }
    }

    /// The transactional InitProducerId answered (`InitProducerIdHandler.handleResponse`,
    /// docs/java-rules.md §5.2).
    fn on_txn_init_producer_id(
        &mut self,
        now: Micros,
        request: QueuedRequest,
        response: &InitProducerIdResponse,
    ) {
        let outcome = requests::classify_init_producer_id(response.error_code);
        let identity = ProducerIdAndEpoch::new(response.producer_id.0, response.producer_epoch);
        match outcome {
            TxnOutcome::Done if identity.is_valid() && identity.epoch >= 0 => {
                let installed = self
                    .tm
                    .as_mut()
                    .expect("owner")
                    .on_init_producer_id(&request, identity);
                // The owner runs under the new identity at once; the driver carries it
                // to the other engines (`TxnAction::IdentityReplaced`).
                if installed {
                    self.on_identity(identity);
                }
            }
            TxnOutcome::Done => self.apply_txn_outcome(
                now,
                request,
                TxnOutcome::Fatal(TransactionError::Fatal(ErrorCause::other(format!(
                    "InitProducerId returned an invalid identity {identity:?}"
                )))),
            ),
            TxnOutcome::Abortable(err)
                if requests::is_init_producer_id_authorization_failure(response.error_code) =>
            {
                self.tm
                    .as_mut()
                    .expect("owner")
                    .fail_unauthorized(&request, err)
            }
            outcome => self.apply_txn_outcome(now, request, outcome),
        }
    }

    /// FindCoordinator answered with the `key_type` coordinator: it is known by its node from
    /// now on, and reachable at the address it came with.
    fn on_coordinator_found(
        &mut self,
        key_type: CoordinatorType,
        found: requests::FoundCoordinator,
    ) {
        self.metadata
            .nodes
            .entry(found.node)
            .or_insert_with(|| format!("{}:{}", found.host, found.port));
        let tm = self.tm.as_mut().expect("owner");
        let slot = match key_type {
            CoordinatorType::Transaction => &mut tm.transaction_coordinator,
            CoordinatorType::Group => &mut tm.group_coordinator,
        };
        tracing::info!(
            target: "kacrab::transaction",
            coordinator = ?key_type,
            node = found.node,
            host = %found.host,
            port = found.port,
            "coordinator found"
        );
        *slot = Some(found.node);
    }

    /// When the transactional loop next has something to do by time alone: the queued
    /// request's retry time and the deadline of a wait for its coordinator's connection. They
    /// are reported apart because the driver keeps only future times: a request requeued
    /// while its coordinator's connection is not ready is due at once, and folding the two
    /// into their minimum would hide the wait's deadline behind that past time.
    pub(super) fn txn_next_wakeups(&self) -> [Option<Micros>; 2] {
        let Some(tm) = self.tm.as_ref() else {
            return [None, None];
        };
        let wait_deadline = self
            .txn_wait
            .map(|(_, since)| since + self.config.request_timeout);
        [tm.next_retry_at(), wait_deadline]
    }

    /// Owner-side checks for the simulator and tests.
    pub(super) fn txn_assert_invariants(&self) {
        if let Some(tm) = &self.tm {
            tm.assert_invariants();
            if tm.state() == TransactionState::FatalError {
                assert!(self.fatal.is_some() || tm.last_error().is_some());
            }
        }
        assert!(
            self.participant
                .added
                .is_disjoint(&self.participant.requested),
            "a partition is both added and requested"
        );
    }
}

/// The FindCoordinator key for a request's coordinator. Only TxnOffsetCommit goes to the
/// group coordinator (`TxnRequest::coordinator`); AddOffsetsToTxn, though it names the group,
/// goes to the transaction coordinator and looks that one up again
/// (`AddOffsetsToTxnHandler`).
fn coordinator_key(tm: &TransactionManager, request: &TxnRequest, kind: CoordinatorType) -> String {
    match (kind, request) {
        (CoordinatorType::Group, TxnRequest::TxnOffsetCommit { group, .. }) => {
            group.group_id.clone()
        }
        _ => tm.transactional_id.clone(),
    }
}
