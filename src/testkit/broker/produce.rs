//! Produce: the checks a Produce request passes through before its batches reach a partition's
//! log, in Kafka's order (`KafkaApis.handleProduceRequest`, then `ReplicaManager`, then
//! `UnifiedLog.append`), and KIP-890 verification of transactional batches: part 1's check
//! that the partition is in the transaction (Produce up to v11), part 2's implicit add of the
//! partition to the transaction (Produce v12+, TV2).
//!
//! The per-batch producer-state verdicts are the partition's (`partition`, `producer_state`);
//! this file decides which partitions get that far and answers the rest.

use super::error_codes::*;
use super::producer_state::Verification;
use super::transaction_version::TransactionVersion;
use super::Cluster;
use crate::testkit::batch::{BatchError, BatchHeader};

/// One partition's answer to a produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducePartitionResult {
    /// The error code (0: none).
    pub error_code: i16,
    /// First offset assigned, the original first offset for a duplicate, -1 on error.
    pub base_offset: i64,
    /// The append time under LogAppendTime, else -1.
    pub log_append_time_ms: i64,
    /// The partition's first stored offset.
    pub log_start_offset: i64,
    /// The error's message, where Kafka sends one.
    pub error_message: Option<String>,
    /// On NOT_LEADER_OR_FOLLOWER: the current (leader, leader epoch), for Produce v10+
    /// (KIP-951 `CurrentLeader`).
    pub current_leader: Option<(i32, i32)>,
    /// Whether the batch was written (false for duplicates and errors).
    pub appended: bool,
}

impl ProducePartitionResult {
    /// The answer of an error, with nothing appended.
    pub fn error(error_code: i16) -> Self {
        ProducePartitionResult {
            error_code,
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
            error_message: None,
            current_leader: None,
            appended: false,
        }
    }

    fn with_message(mut self, message: &str) -> Self {
        self.error_message = Some(message.to_string());
        self
    }
}

/// One partition of a produce request.
#[derive(Debug, Clone, Copy)]
pub struct ProduceInput<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The partition.
    pub partition: i32,
    /// `None` for a null records field.
    pub records: Option<&'a [u8]>,
}

impl Cluster {
    /// Produce of one partition; see [`produce_request`](Self::produce_request).
    #[allow(clippy::too_many_arguments)]
    pub fn produce(
        &mut self,
        broker: i32,
        topic: &str,
        partition: i32,
        records: &[u8],
        acks: i16,
        transactional_id: Option<&str>,
        now_ms: i64,
    ) -> ProducePartitionResult {
        let input = [ProduceInput {
            topic,
            partition,
            records: Some(records),
        }];
        self.produce_request(broker, acks, transactional_id, &input, now_ms)
            .pop()
            .expect("one result per partition")
    }

    /// A whole Produce request of v3-v11 (TV1); see
    /// [`produce_request_at_version`](Self::produce_request_at_version).
    pub fn produce_request(
        &mut self,
        broker: i32,
        acks: i16,
        transactional_id: Option<&str>,
        partitions: &[ProduceInput<'_>],
        now_ms: i64,
    ) -> Vec<ProducePartitionResult> {
        self.produce_request_at_version(broker, 11, acks, transactional_id, partitions, now_ms)
    }

    /// A whole Produce request of `version`, in the check order of
    /// `KafkaApis.handleProduceRequest` → `ReplicaManager.handleProduceAppend`/
    /// `appendToLocalLog` → `UnifiedLog.append`: transactional id present, then per partition
    /// topic and `ProduceRequest.validateRecords`, then the single (pid, epoch) of
    /// transactional batches, then verification (v12+: the implicit add), then acks, then
    /// leadership, then the log append. One result per input, in order.
    ///
    /// A v12+ request that finds its transaction's previous end still writing markers is
    /// answered CONCURRENT_TRANSACTIONS at once; Kafka's broker first retries for up to
    /// 100 ms (`ReplicaManager` `maybeRetryOnConcurrentTransactions`), which the TCP face does
    /// around this call ([`transaction_is_completing`](Self::transaction_is_completing)).
    pub fn produce_request_at_version(
        &mut self,
        broker: i32,
        version: i16,
        acks: i16,
        transactional_id: Option<&str>,
        partitions: &[ProduceInput<'_>],
        now_ms: i64,
    ) -> Vec<ProducePartitionResult> {
        let txn_version = TransactionVersion::for_produce(version);
        if !self.is_broker_up(broker) {
            return partitions
                .iter()
                .map(|_| ProducePartitionResult::error(NETWORK_EXCEPTION))
                .collect();
        }
        let headers: Vec<Result<BatchHeader, BatchError>> = partitions
            .iter()
            .map(|p| {
                p.records
                    .map_or(Err(BatchError::NoBatch), BatchHeader::parse_single)
            })
            .collect();
        let transactional = headers
            .iter()
            .any(|h| h.as_ref().is_ok_and(|h| h.is_transactional()));
        if transactional && transactional_id.is_none() {
            return partitions
                .iter()
                .map(|_| ProducePartitionResult::error(TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
                .collect();
        }

        let mut results: Vec<Option<ProducePartitionResult>> = partitions
            .iter()
            .zip(&headers)
            .map(|(input, header)| {
                if self.partition(input.topic, input.partition).is_none() {
                    return Some(ProducePartitionResult::error(UNKNOWN_TOPIC_OR_PARTITION));
                }
                match header {
                    Ok(_) => None,
                    Err(BatchError::LengthTooSmall) => {
                        Some(ProducePartitionResult::error(CORRUPT_MESSAGE))
                    }
                    Err(_) => Some(ProducePartitionResult::error(INVALID_RECORD).with_message(
                        "Produce requests must carry exactly one record batch of magic 2",
                    )),
                }
            })
            .collect();

        // `ReplicaManager.handleProduceAppend`: transactional batches of one request must share
        // one (producer id, epoch), else every remaining partition fails.
        let mut txn_producers: Vec<(i64, i16)> = headers
            .iter()
            .zip(&results)
            .filter_map(|(h, r)| match (h, r) {
                (Ok(h), None) if h.is_transactional() => Some((h.producer_id, h.producer_epoch)),
                _ => None,
            })
            .collect();
        txn_producers.sort_unstable();
        txn_producers.dedup();
        if txn_producers.len() > 1 {
            for result in results.iter_mut().filter(|r| r.is_none()) {
                *result = Some(ProducePartitionResult::error(INVALID_PRODUCER_ID_MAPPING));
            }
        }

        for ((input, header), result) in partitions.iter().zip(&headers).zip(results.iter_mut()) {
            if result.is_none() {
                let header = header.as_ref().expect("validated above");
                *result = Some(self.produce_partition(
                    broker,
                    acks,
                    transactional_id,
                    (input, header),
                    txn_version,
                    now_ms,
                ));
            }
        }
        let results: Vec<ProducePartitionResult> = results
            .into_iter()
            .map(|r| r.expect("every partition answered"))
            .collect();
        self.duplicates_answered += results
            .iter()
            .filter(|r| r.error_code == NONE && !r.appended)
            .count() as u64;
        results
    }

    /// The per-partition remainder of a produce, for a partition whose batch parsed: a
    /// transactional batch needs the leader and then verification (`ReplicaManager
    /// .maybeStartTransactionVerificationForPartition` fails with NOT_LEADER_OR_FOLLOWER off
    /// the leader); then acks (`ReplicaManager.appendRecords`); then leadership for the rest
    /// (`appendToLocalLog`); then the log append.
    fn produce_partition(
        &mut self,
        broker: i32,
        acks: i16,
        transactional_id: Option<&str>,
        (input, header): (&ProduceInput<'_>, &BatchHeader),
        txn_version: TransactionVersion,
        now_ms: i64,
    ) -> ProducePartitionResult {
        let (leader, leader_epoch) = self
            .leader(input.topic, input.partition)
            .expect("checked by the caller");
        let not_leader = || ProducePartitionResult {
            current_leader: Some((leader, leader_epoch)),
            ..ProducePartitionResult::error(NOT_LEADER_OR_FOLLOWER)
        };
        if header.is_transactional() && leader != broker {
            return not_leader();
        }
        let verified =
            self.verify_transactional(transactional_id, input, header, txn_version, now_ms);
        let verified = match verified {
            Ok(verified) => verified,
            Err(failure) => return failure,
        };
        if !matches!(acks, -1..=1) {
            return ProducePartitionResult::error(INVALID_REQUIRED_ACKS);
        }
        if leader != broker {
            return not_leader();
        }
        let rules = &self.rules;
        let partition = self
            .topics
            .get_mut(input.topic)
            .and_then(|t| t.partitions.get_mut(input.partition as usize))
            .expect("checked by the caller");
        let records = input.records.expect("parsed by the caller");
        partition.append(records, header, rules, verified, now_ms)
    }

    /// KIP-890 verification (`UnifiedLog.maybeStartTransactionVerification`, then the
    /// coordinator): only for a transactional batch with no transaction open for its
    /// (pid, epoch) on the partition. TV1 asks whether the partition is in the transaction
    /// (`verifyOnly`), unless `transaction.partition.verification.enable` is off; TV2 has the
    /// coordinator add it, whatever that setting (`ReplicaManager
    /// .maybeSendPartitionsToTransactionCoordinator`).
    fn verify_transactional(
        &mut self,
        transactional_id: Option<&str>,
        input: &ProduceInput<'_>,
        header: &BatchHeader,
        txn_version: TransactionVersion,
        now_ms: i64,
    ) -> Result<Verification, ProducePartitionResult> {
        if !header.is_transactional() {
            return Ok(Verification::Unverified);
        }
        if !self.rules.transaction_verification && txn_version == TransactionVersion::Tv1 {
            return Ok(Verification::Verified);
        }
        let partition = self
            .partition(input.topic, input.partition)
            .expect("checked");
        let entry = partition.producers.entry(header.producer_id);
        if entry.is_some_and(|e| {
            e.current_txn_first_offset.is_some() && e.producer_epoch == header.producer_epoch
        }) {
            return Ok(Verification::Verified);
        }
        // 4.1+ (KAFKA-18042): a stale epoch fails at once, before asking the coordinator. For
        // a TV2 producer this is how a write of a transaction whose marker (at the bumped
        // epoch) is already here is refused (UnifiedLogTest
        // `testStaleProducerEpochReturnsRecoverableErrorForTV2Clients`).
        if entry.is_some_and(|e| header.producer_epoch < e.producer_epoch) {
            return Err(ProducePartitionResult::error(INVALID_PRODUCER_EPOCH));
        }
        let transactional_id = transactional_id.expect("checked by the caller");
        if txn_version == TransactionVersion::Tv2 {
            return self.add_partition_for_produce(transactional_id, input, header, now_ms);
        }
        match self.coordinator.verify_partition(
            transactional_id,
            header.producer_id,
            header.producer_epoch,
            input.topic,
            input.partition,
        ) {
            Ok(()) => Ok(Verification::Verified),
            Err((code, message)) => Err(ProducePartitionResult::error(code).with_message(message)),
        }
    }

    /// The TV2 implicit add (`AddPartitionsToTxnManager` with `addPartition`: an
    /// AddPartitionsToTxn with `verifyOnly` false, whose coordinator rules are AddPartitionsToTxn's),
    /// with the coordinator's answer translated for the produce (`ReplicaManager
    /// .handleProduceAppend`'s `postVerificationCallback`): PRODUCER_FENCED reaches the
    /// producer as INVALID_PRODUCER_EPOCH; CONCURRENT_TRANSACTIONS stays itself under TV2; the
    /// others pass through.
    fn add_partition_for_produce(
        &mut self,
        transactional_id: &str,
        input: &ProduceInput<'_>,
        header: &BatchHeader,
        now_ms: i64,
    ) -> Result<Verification, ProducePartitionResult> {
        let code = self.coordinator.add_partitions(
            transactional_id,
            header.producer_id,
            header.producer_epoch,
            &[(input.topic.to_string(), input.partition)],
            now_ms,
        );
        match code {
            NONE => Ok(Verification::AddedTv2),
            PRODUCER_FENCED => Err(ProducePartitionResult::error(INVALID_PRODUCER_EPOCH)
                .with_message("producer epoch is not current")),
            code => Err(ProducePartitionResult::error(code)),
        }
    }

    /// Whether `transactional_id`'s previous transaction is still writing its markers
    /// (PrepareCommit/PrepareAbort), so a TV2 implicit add would be CONCURRENT_TRANSACTIONS.
    pub fn transaction_is_completing(&self, transactional_id: &str) -> bool {
        self.coordinator
            .metadata(transactional_id)
            .is_some_and(|m| {
                matches!(
                    m.state,
                    super::TransactionState::PrepareCommit | super::TransactionState::PrepareAbort
                )
            })
    }
}
