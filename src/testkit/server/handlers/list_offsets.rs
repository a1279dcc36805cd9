//! ListOffsets (v1-v7): earliest, latest (the last stable offset under read_committed), max
//! timestamp, or by timestamp, with the leader epoch (v4+) and leader-epoch fencing.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{HandlerResult, Reply, RequestContext};

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = ListOffsetsRequest::decode(body, ctx.version)?;
    let cluster = ctx.shared.cluster();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let response = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index);
                    if let Some(code) = injected {
                        return response.with_error_code(code);
                    }
                    let r = cluster.list_offsets(
                        ctx.broker,
                        topic.name.0.as_str(),
                        p.partition_index,
                        p.timestamp,
                        request.isolation_level,
                        p.current_leader_epoch,
                    );
                    let response = response
                        .with_error_code(r.error_code)
                        .with_offset(r.offset)
                        .with_timestamp(r.timestamp);
                    // The leader epoch exists from v4 (KIP-320).
                    if ctx.version >= 4 {
                        response.with_leader_epoch(r.leader_epoch)
                    } else {
                        response
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    drop(cluster);
    ListOffsetsResponse::default()
        .with_topics(topics)
        .encode(out, ctx.version)?;
    Ok(Reply::Respond)
}
