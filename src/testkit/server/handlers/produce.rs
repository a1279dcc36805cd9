//! Produce (v3-v12; v12 is TV2, which adds a transactional batch's partition to its
//! transaction). The batch bytes are handed to the core as they arrived (a slice of the
//! request frame); the core parses the 61-byte header only and copies the batch once into the
//! log. acks=0 answers nothing, and closes the connection if any partition failed, as Kafka's
//! `KafkaApis.handleProduceRequest` does so the client notices.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{node_endpoints, str_bytes, HandlerResult, Reply, RequestContext};
use crate::testkit::broker::error_codes::{NONE, NOT_LEADER_OR_FOLLOWER};
use crate::testkit::broker::{ProduceInput, ProducePartitionResult, TransactionVersion};

/// How long a TV2 produce waits for its transaction's previous end to finish writing markers
/// before CONCURRENT_TRANSACTIONS: Kafka's `add.partitions.to.txn.retry.backoff.max.ms`
/// (100 ms), polled every `add.partitions.to.txn.retry.backoff.ms` (20 ms).
const CONCURRENT_TRANSACTIONS_RETRY: Duration = Duration::from_millis(100);
const CONCURRENT_TRANSACTIONS_BACKOFF: Duration = Duration::from_millis(20);

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = ProduceRequest::decode(body, ctx.version)?;
    let inputs: Vec<ProduceInput<'_>> = request
        .topic_data
        .iter()
        .flat_map(|topic| {
            topic.partition_data.iter().map(move |p| ProduceInput {
                topic: topic.name.0.as_str(),
                partition: p.index,
                records: p.records.as_deref(),
            })
        })
        .collect();

    let results: Vec<ProducePartitionResult> = match injected {
        Some(code) => {
            let cluster = ctx.shared.cluster();
            inputs
                .iter()
                .map(|input| ProducePartitionResult {
                    current_leader: (code == NOT_LEADER_OR_FOLLOWER)
                        .then(|| cluster.leader(input.topic, input.partition))
                        .flatten(),
                    ..ProducePartitionResult::error(code)
                })
                .collect()
        }
        None => {
            let transactional_id = request.transactional_id.as_ref().map(|t| t.0.as_str());
            let mut cluster = ctx.shared.cluster();
            // `ReplicaManager.handleProduceAppend` (`maybeRetryOnConcurrentTransactions`): a TV2
            // add that finds the previous transaction still completing is retried for a short
            // while by the broker itself, before the producer sees CONCURRENT_TRANSACTIONS.
            if let (TransactionVersion::Tv2, Some(id), true) = (
                TransactionVersion::for_produce(ctx.version),
                transactional_id,
                ctx.shared.waits_in_real_time(),
            ) {
                let deadline = Instant::now() + CONCURRENT_TRANSACTIONS_RETRY;
                while cluster.transaction_is_completing(id) && !ctx.closed.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    let wait = (deadline - now).min(CONCURRENT_TRANSACTIONS_BACKOFF);
                    cluster = ctx.shared.wait_for_append(cluster, wait);
                }
            }
            let results = cluster.produce_request_at_version(
                ctx.broker,
                ctx.version,
                request.acks,
                transactional_id,
                &inputs,
                ctx.now_ms,
            );
            drop(cluster);
            if results.iter().any(|r| r.appended) {
                ctx.shared.notify_appended();
            }
            results
        }
    };

    if request.acks == 0 {
        let failed = results.iter().any(|r| r.error_code != NONE);
        return Ok(if failed {
            Reply::Close
        } else {
            Reply::NoResponse
        });
    }

    let mut results = results.into_iter();
    let mut leaders = Vec::new();
    let responses = request
        .topic_data
        .iter()
        .map(|topic| {
            let partitions = topic
                .partition_data
                .iter()
                .map(|p| {
                    let r = results.next().expect("one result per partition");
                    let mut response = PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(r.error_code)
                        .with_base_offset(r.base_offset)
                        .with_log_append_time_ms(r.log_append_time_ms)
                        .with_log_start_offset(r.log_start_offset);
                    if ctx.version >= 8 {
                        response =
                            response.with_error_message(r.error_message.as_deref().map(str_bytes));
                    }
                    if let (true, Some((leader, epoch))) = (ctx.version >= 10, r.current_leader) {
                        leaders.push(leader);
                        response = response.with_current_leader(
                            LeaderIdAndEpoch::default()
                                .with_leader_id(BrokerId(leader))
                                .with_leader_epoch(epoch),
                        );
                    }
                    response
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(topic.name.clone())
                .with_partition_responses(partitions)
        })
        .collect();
    let mut response = ProduceResponse::default().with_responses(responses);
    if ctx.version >= 10 {
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
