//! AddOffsetsToTxn v0-v4: adds the group's `__consumer_offsets` partition to the transaction.
//! Below v2 a PRODUCER_FENCED verdict is sent as INVALID_PRODUCER_EPOCH.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{fenced_for_version, HandlerResult, Reply, RequestContext};

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = AddOffsetsToTxnRequest::decode(body, ctx.version)?;
    let code = injected.unwrap_or_else(|| {
        ctx.shared.cluster().add_offsets_to_txn(
            ctx.broker,
            &request.transactional_id.0,
            request.producer_id.0,
            request.producer_epoch,
            &request.group_id.0,
            ctx.now_ms,
        )
    });
    AddOffsetsToTxnResponse::default()
        .with_error_code(fenced_for_version(code, ctx.version, 2))
        .encode(out, ctx.version)?;
    Ok(Reply::Respond)
}
