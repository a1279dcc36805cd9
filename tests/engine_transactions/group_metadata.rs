//! `sendOffsetsToTransaction` against a group coordinator older than Kafka 2.5, which knows
//! TxnOffsetCommit only up to v2. The consumer group's generation, member id and group
//! instance id exist on the wire from v3 on (KIP-447); with them the coordinator fences a
//! stale member (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID). Java's
//! `TxnOffsetCommitRequest.Builder.build(version)` refuses a version below 3 when that
//! metadata differs from the default (UnsupportedVersionException), and
//! `TxnRequestHandler.onComplete` makes the version mismatch fatal: committing the offsets
//! without it would silently switch the fencing off.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, TxnOffsetCommitRequest};
use kafka_protocol::protocol::Decodable;

use kacrab::TransactionError;
use kacrab::{GroupMetadata, OffsetAndMetadata, TopicPartition, TransactionState};

use super::rig::Rig;

fn offsets() -> BTreeMap<TopicPartition, OffsetAndMetadata> {
    let mut offsets = BTreeMap::new();
    offsets.insert(TopicPartition::new("in", 0), OffsetAndMetadata::new(42));
    offsets
}

/// A rig whose only broker (also the group coordinator) knows TxnOffsetCommit up to v2.
fn rig_before_kafka_2_5() -> Rig {
    Rig::ready_with_max_version(Duration::ZERO, ApiKey::TxnOffsetCommit, 2)
}

#[test]
fn group_metadata_on_a_txn_offset_commit_v2_coordinator_is_fatal_and_nothing_is_sent() {
    // Each field alone makes the metadata a real member's (Java's `groupMetadataSet`).
    let mut generation = GroupMetadata::new("g");
    generation.generation_id = 3;
    let mut member = GroupMetadata::new("g");
    member.member_id = "m".into();
    let mut instance = GroupMetadata::new("g");
    instance.group_instance_id = Some("i".into());
    let mut consumer = GroupMetadata::new("g");
    consumer.generation_id = 3;
    consumer.member_id = "m".into();
    for group in [consumer, generation, member, instance] {
        let mut rig = rig_before_kafka_2_5();
        rig.engine.begin_transaction().unwrap();
        let handle = rig
            .engine
            .send_offsets_to_transaction(offsets(), group.clone())
            .unwrap();
        let result = rig.wait(handle);
        let Err(TransactionError::Fatal(cause)) = &result else {
            panic!("{group:?}: expected a fatal error, got {result:?}");
        };
        let message = cause.to_string();
        assert!(
            message.contains("version 2") && message.contains("need version 3"),
            "{group:?}: the error names the unsupported version: {message}"
        );
        assert_eq!(
            rig.count(ApiKey::TxnOffsetCommit),
            0,
            "{group:?}: no TxnOffsetCommit without the group metadata"
        );
        assert_eq!(rig.state(), TransactionState::FatalError, "{group:?}");
        assert!(
            matches!(
                rig.engine.commit_transaction(),
                Err(TransactionError::Fatal(_))
            ),
            "{group:?}: the transaction cannot commit"
        );
    }
}

#[test]
fn a_group_id_alone_commits_offsets_on_a_txn_offset_commit_v2_coordinator() {
    let mut rig = rig_before_kafka_2_5();
    rig.engine.begin_transaction().unwrap();
    let handle = rig
        .engine
        .send_offsets_to_transaction(offsets(), GroupMetadata::new("g"))
        .unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    let commits: Vec<_> = rig
        .log
        .iter()
        .filter(|s| s.api == ApiKey::TxnOffsetCommit)
        .collect();
    let [commit] = commits.as_slice() else {
        panic!("one TxnOffsetCommit: {commits:?}")
    };
    assert_eq!(commit.version, 2);
    let request = TxnOffsetCommitRequest::decode(&mut commit.body.clone(), 2).unwrap();
    assert_eq!(request.group_id.0.as_str(), "g");
    assert_eq!(request.topics[0].partitions[0].committed_offset, 42);
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.state(), TransactionState::Ready);
}
