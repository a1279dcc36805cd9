//! EndTxn v0-v5. v0-v4 are TV1: the epoch does not change and the answer carries no producer
//! id. v5 is TV2: the end bumps the epoch and the answer carries the producer id and epoch to
//! continue with. Below v2 a PRODUCER_FENCED verdict is sent as INVALID_PRODUCER_EPOCH.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{fenced_for_version, HandlerResult, Reply, RequestContext};
use crate::testkit::broker::EndTxnResult;

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = EndTxnRequest::decode(body, ctx.version)?;
    let result = match injected {
        Some(code) => EndTxnResult {
            error_code: code,
            producer_id: -1,
            producer_epoch: -1,
        },
        None => ctx.shared.cluster().end_txn_at_version(
            ctx.broker,
            ctx.version,
            &request.transactional_id.0,
            request.producer_id.0,
            request.producer_epoch,
            request.committed,
            ctx.now_ms,
        ),
    };
    // Markers went to the partitions: read_committed fetches parked in a long poll may now
    // see more.
    ctx.shared.notify_appended();
    EndTxnResponse::default()
        .with_error_code(fenced_for_version(result.error_code, ctx.version, 2))
        .with_producer_id(ProducerId(result.producer_id))
        .with_producer_epoch(result.producer_epoch)
        .encode(out, ctx.version)?;
    Ok(Reply::Respond)
}
