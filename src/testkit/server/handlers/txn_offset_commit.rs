//! TxnOffsetCommit v0-v5, at the group coordinator. v0-v4 (TV1) need the group added by
//! AddOffsetsToTxn: "not in the transaction" is TRANSACTION_ABORTABLE from v4 and
//! INVALID_TXN_STATE below. v5 (TV2) adds the group's offsets partition itself.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{HandlerResult, Reply, RequestContext};
use crate::testkit::broker::error_codes::{INVALID_TXN_STATE, TRANSACTION_ABORTABLE};
use crate::testkit::broker::{TxnOffsetCommitGroup, TxnOffsetCommitInput};

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = TxnOffsetCommitRequest::decode(body, ctx.version)?;
    let offsets: Vec<TxnOffsetCommitInput> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| TxnOffsetCommitInput {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
            })
        })
        .collect();
    let codes = match injected {
        Some(code) => vec![code; offsets.len()],
        None => ctx.shared.cluster().txn_offset_commit_at_version(
            ctx.broker,
            ctx.version,
            TxnOffsetCommitGroup {
                transactional_id: &request.transactional_id.0,
                group_id: &request.group_id.0,
                producer_id: request.producer_id.0,
                producer_epoch: request.producer_epoch,
                generation_id: request.generation_id,
            },
            &offsets,
            ctx.now_ms,
        ),
    };
    let mut codes = codes.into_iter();
    let topics = request
        .topics
        .iter()
        .map(|t| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            let code = match codes.next().unwrap_or_default() {
                                TRANSACTION_ABORTABLE if ctx.version < 4 => INVALID_TXN_STATE,
                                code => code,
                            };
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect();
    TxnOffsetCommitResponse::default()
        .with_topics(topics)
        .encode(out, ctx.version)?;
    Ok(Reply::Respond)
}
