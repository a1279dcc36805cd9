//! AddPartitionsToTxn. v0-v3 are the client versions (TV1): below v2 a PRODUCER_FENCED verdict
//! is sent as INVALID_PRODUCER_EPOCH, which those clients know, and the coordinator's code
//! applies to every partition of the request. v4-v5 are what brokers send the coordinator
//! (KIP-890): a batch of transactions, each either a `verifyOnly` check of its partitions or an
//! add with TV2 semantics (`TransactionVersion.transactionVersionForAddPartitionsToTxn`); Kafka
//! requires CLUSTER_ACTION for them, which a cluster without an authorizer grants everyone.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{fenced_for_version, HandlerResult, Reply, RequestContext};

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = AddPartitionsToTxnRequest::decode(body, ctx.version)?;
    if ctx.version >= 4 {
        return handle_batch(ctx, &request, injected, out);
    }
    let partitions = partitions_of(&request.v3_and_below_topics);
    let codes = match injected {
        Some(code) => vec![code; partitions.len()],
        None => ctx.shared.cluster().add_partitions_to_txn(
            ctx.broker,
            &request.v3_and_below_transactional_id.0,
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            &partitions,
            ctx.now_ms,
        ),
    };
    let codes: Vec<i16> = codes
        .into_iter()
        .map(|code| fenced_for_version(code, ctx.version, 2))
        .collect();
    AddPartitionsToTxnResponse::default()
        .with_results_by_topic_v3_and_below(topic_results(&request.v3_and_below_topics, codes))
        .encode(out, ctx.version)?;
    Ok(Reply::Respond)
}

/// v4+: one result per transaction of the batch, in order.
fn handle_batch(
    ctx: &RequestContext<'_>,
    request: &AddPartitionsToTxnRequest,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let results = request
        .transactions
        .iter()
        .map(|txn| {
            let partitions = partitions_of(&txn.topics);
            let codes = match injected {
                Some(code) => vec![code; partitions.len()],
                None if txn.verify_only => ctx.shared.cluster().verify_partitions_in_txn(
                    ctx.broker,
                    &txn.transactional_id.0,
                    txn.producer_id.0,
                    txn.producer_epoch,
                    &partitions,
                ),
                None => ctx.shared.cluster().add_partitions_to_txn(
                    ctx.broker,
                    &txn.transactional_id.0,
                    txn.producer_id.0,
                    txn.producer_epoch,
                    &partitions,
                    ctx.now_ms,
                ),
            };
            AddPartitionsToTxnResult::default()
                .with_transactional_id(txn.transactional_id.clone())
                .with_topic_results(topic_results(&txn.topics, codes))
        })
        .collect();
    AddPartitionsToTxnResponse::default()
        .with_results_by_transaction(results)
        .encode(out, ctx.version)?;
    Ok(Reply::Respond)
}

fn partitions_of(topics: &[AddPartitionsToTxnTopic]) -> Vec<(String, i32)> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|&p| (t.name.0.to_string(), p)))
        .collect()
}

/// The per-topic results of `topics`, `codes` giving one code per partition in request order.
fn topic_results(
    topics: &[AddPartitionsToTxnTopic],
    codes: Vec<i16>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut codes = codes.into_iter();
    topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|&p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(p)
                                .with_partition_error_code(codes.next().unwrap_or_default())
                        })
                        .collect(),
                )
        })
        .collect()
}
