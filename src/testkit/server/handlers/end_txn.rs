//! EndTxn v0-v4 (TV1: the epoch does not change, the answer carries no producer id). Below v2
//! a PRODUCER_FENCED verdict is sent as INVALID_PRODUCER_EPOCH.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{fenced_for_version, HandlerResult, Reply, RequestContext};

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = EndTxnRequest::decode(body, ctx.version)?;
    let code = injected.unwrap_or_else(|| {
        ctx.shared.cluster().end_txn(
            ctx.broker,
            &request.transactional_id.0,
            request.producer_id.0,
            request.producer_epoch,
            request.committed,
            ctx.now_ms,
        )
    });
    // Markers went to the partitions: read_committed fetches parked in a long poll may now
    // see more.
    ctx.shared.notify_appended();
    EndTxnResponse::default()
        .with_error_code(fenced_for_version(code, ctx.version, 2))
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
        .encode(out, ctx.version)?;
    Ok(Reply::Respond)
}
