//! Fetch (v4-v16), as a consumer sees it: sessionless full fetches (session id 0), topics by
//! name below v13 and by topic id from v13, the last stable offset and log start offset of
//! every partition, an empty aborted-transaction list under read_committed.
//!
//! Long polling: with no data and no error, the broker waits up to `max_wait_ms` for an
//! append before answering (Kafka's `DelayedFetch`), so an idle consumer does not spin.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{node_endpoints, str_bytes, HandlerResult, Reply, RequestContext};
use crate::testkit::broker::error_codes::{NONE, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_ID};
use crate::testkit::broker::{Cluster, FetchPartitionResult};

/// Topic name (None: unknown topic id) and partitions with (partition, offset, max bytes,
/// current leader epoch).
type WantedTopic = (Option<String>, uuid::Uuid, Vec<(i32, i64, i32, i32)>);

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = FetchRequest::decode(body, ctx.version)?;
    let by_id = ctx.version >= 13;
    let deadline = Instant::now() + Duration::from_millis(request.max_wait_ms.max(0) as u64);

    let mut cluster = ctx.shared.cluster();
    let wanted: Vec<WantedTopic> = request
        .topics
        .iter()
        .map(|t| {
            let name = if by_id {
                cluster
                    .topic_name_by_id(t.topic_id.as_u128())
                    .map(str::to_string)
            } else {
                Some(t.topic.0.to_string())
            };
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    (
                        p.partition,
                        p.fetch_offset,
                        p.partition_max_bytes,
                        p.current_leader_epoch,
                    )
                })
                .collect();
            (name, t.topic_id, partitions)
        })
        .collect();

    let results = loop {
        let results = read_all(&cluster, ctx.broker, &wanted, &request, injected);
        let has_data = results.iter().flatten().any(|r| !r.records.is_empty());
        let has_error = results.iter().flatten().any(|r| r.error_code != NONE);
        let now = Instant::now();
        if has_data
            || has_error
            || request.min_bytes <= 0
            || now >= deadline
            || ctx.closed.load(std::sync::atomic::Ordering::Relaxed)
        {
            break results;
        }
        cluster = ctx.shared.wait_for_append(cluster, deadline - now);
    };
    drop(cluster);

    let mut leaders = Vec::new();
    let responses = wanted
        .iter()
        .zip(results)
        .map(|((name, topic_id, partitions), results)| {
            let partitions = partitions
                .iter()
                .zip(results)
                .map(|(&(partition, ..), r)| {
                    let mut data = PartitionData::default()
                        .with_partition_index(partition)
                        .with_error_code(r.error_code)
                        .with_high_watermark(r.high_watermark)
                        .with_last_stable_offset(r.last_stable_offset)
                        .with_log_start_offset(r.log_start_offset)
                        .with_aborted_transactions(r.aborted_transactions.map(|list| {
                            list.into_iter()
                                .map(|(pid, first)| {
                                    AbortedTransaction::default()
                                        .with_producer_id(ProducerId(pid))
                                        .with_first_offset(first)
                                })
                                .collect()
                        }))
                        .with_records(Some(r.records));
                    if let (true, Some((leader, epoch))) = (ctx.version >= 12, r.current_leader) {
                        leaders.push(leader);
                        data = data.with_current_leader(
                            LeaderIdAndEpoch::default()
                                .with_leader_id(BrokerId(leader))
                                .with_leader_epoch(epoch),
                        );
                    }
                    data
                })
                .collect();
            let topic = FetchableTopicResponse::default().with_partitions(partitions);
            if by_id {
                topic.with_topic_id(*topic_id)
            } else {
                topic.with_topic(TopicName(str_bytes(name.as_deref().unwrap_or_default())))
            }
        })
        .collect();
    let mut response = FetchResponse::default()
        .with_session_id(0)
        .with_responses(responses);
    if ctx.version >= 16 {
        response = response.with_node_endpoints(node_endpoints(ctx, leaders, |id, host, port| {
            NodeEndpoint::default()
                .with_node_id(id)
                .with_host(host)
                .with_port(port)
        }));
    }
    response.encode(out, ctx.version)?;
    Ok(Reply::Respond)
}

/// Reads every wanted partition, sharing the request's `max_bytes` budget in order: once it is
/// spent, later partitions report offsets only.
fn read_all(
    cluster: &Cluster,
    broker: i32,
    wanted: &[WantedTopic],
    request: &FetchRequest,
    injected: Option<i16>,
) -> Vec<Vec<FetchPartitionResult>> {
    let mut budget = request.max_bytes.max(0) as usize;
    wanted
        .iter()
        .map(|(name, _, partitions)| {
            partitions
                .iter()
                .map(|&(partition, offset, max_bytes, leader_epoch)| {
                    let error = injected.or(name.is_none().then_some(UNKNOWN_TOPIC_ID));
                    if let Some(code) = error {
                        let mut result = FetchPartitionResult::error(code);
                        if code == NOT_LEADER_OR_FOLLOWER {
                            result.current_leader =
                                name.as_deref().and_then(|n| cluster.leader(n, partition));
                        }
                        return result;
                    }
                    let limit = budget.min(max_bytes.max(0) as usize);
                    let result = cluster.fetch(
                        broker,
                        name.as_deref().expect("known topic"),
                        partition,
                        offset,
                        limit,
                        request.isolation_level,
                        leader_epoch,
                    );
                    budget = budget.saturating_sub(result.records.len());
                    result
                })
                .collect()
        })
        .collect()
}
