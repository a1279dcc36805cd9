//! InitProducerId (v0-v5; v5 is v4 from a client that knows TRANSACTION_ABORTABLE), at the
//! transaction coordinator for a transactional id, at any broker for an idempotent producer.
//! Below v4 a PRODUCER_FENCED verdict is sent as INVALID_PRODUCER_EPOCH, which older clients
//! know (`KafkaApis.handleInitProducerIdRequest`).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{fenced_for_version, HandlerResult, Reply, RequestContext};

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = InitProducerIdRequest::decode(body, ctx.version)?;
    let (error_code, producer_id, producer_epoch) = match injected {
        Some(code) => (code, -1, -1),
        None => {
            let r = ctx.shared.cluster().init_producer_id_at(
                ctx.broker,
                request.transactional_id.as_ref().map(|t| t.0.as_str()),
                request.transaction_timeout_ms,
                request.producer_id.0,
                request.producer_epoch,
                ctx.now_ms,
            );
            (r.error_code, r.producer_id, r.producer_epoch)
        }
    };
    // A fence writes abort markers: wake read_committed fetches.
    ctx.shared.notify_appended();
    let error_code = fenced_for_version(error_code, ctx.version, 4);
    InitProducerIdResponse::default()
        .with_error_code(error_code)
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
        .encode(out, ctx.version)?;
    Ok(Reply::Respond)
}
