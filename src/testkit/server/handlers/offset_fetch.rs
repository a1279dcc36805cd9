//! OffsetFetch v1-v7 (one group per request; v8+ batches groups and is not advertised).
//! librdkafka 2.12.1's consumer asks for v0-v9 and so settles on v7, with `requireStable`
//! under read_committed. v1 has no top-level error code: a group-level error is then given to
//! every partition asked for.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{str_bytes, HandlerResult, Reply, RequestContext};
use crate::testkit::broker::error_codes::NONE;
use crate::testkit::broker::OffsetFetchPartition;

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = OffsetFetchRequest::decode(body, ctx.version)?;
    let wanted: Option<Vec<(String, i32)>> = request.topics.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(|&p| (t.name.0.to_string(), p))
            })
            .collect()
    });
    let answer = match injected {
        Some(code) => Err(code),
        None => ctx.shared.cluster().offset_fetch(
            ctx.broker,
            &request.group_id.0,
            wanted.as_deref(),
            request.require_stable,
        ),
    };
    let (group_error, partitions) = match answer {
        Ok(partitions) => (NONE, partitions),
        Err(code) => {
            let failed = wanted
                .unwrap_or_default()
                .into_iter()
                .map(|(topic, partition)| OffsetFetchPartition {
                    topic,
                    partition,
                    // Only v1 carries the group's error on its partitions.
                    error_code: if ctx.version < 2 { code } else { NONE },
                    offset: -1,
                    leader_epoch: -1,
                    metadata: None,
                })
                .collect();
            (code, failed)
        }
    };
    let mut topics: Vec<OffsetFetchResponseTopic> = Vec::new();
    for p in partitions {
        let partition = OffsetFetchResponsePartition::default()
            .with_partition_index(p.partition)
            .with_committed_offset(p.offset)
            .with_committed_leader_epoch(p.leader_epoch)
            .with_metadata(p.metadata.as_deref().map(str_bytes))
            .with_error_code(p.error_code);
        match topics.last_mut() {
            Some(last) if last.name.0.as_str() == p.topic => last.partitions.push(partition),
            _ => topics.push(
                OffsetFetchResponseTopic::default()
                    .with_name(TopicName(str_bytes(&p.topic)))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    let mut response = OffsetFetchResponse::default().with_topics(topics);
    if ctx.version >= 2 {
        response = response.with_error_code(group_error);
    }
    response.encode(out, ctx.version)?;
    Ok(Reply::Respond)
}
