//! AddPartitionsToTxn v0-v3, the client versions (TV1). Below v2 a PRODUCER_FENCED verdict is
//! sent as INVALID_PRODUCER_EPOCH, which those clients know. The coordinator's code applies
//! to every partition of the request.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
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
    let partitions: Vec<(String, i32)> = request
        .v3_and_below_topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|&p| (t.name.0.to_string(), p)))
        .collect();
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
    let mut codes = codes.into_iter();
    let results = request
        .v3_and_below_topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|&p| {
                            let code = codes.next().unwrap_or_default();
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(p)
                                .with_partition_error_code(fenced_for_version(code, ctx.version, 2))
                        })
                        .collect(),
                )
        })
        .collect();
    AddPartitionsToTxnResponse::default()
        .with_results_by_topic_v3_and_below(results)
        .encode(out, ctx.version)?;
    Ok(Reply::Respond)
}
