//! FindCoordinator (v0-v3). Consumers with a `group.id` look up their group coordinator even
//! when they only `assign()`; the model has no group state, so any broker can be named. The
//! coordinator of a key is a stable function of the key, and a down coordinator answers
//! COORDINATOR_NOT_AVAILABLE.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{str_bytes, HandlerResult, Reply, RequestContext};
use crate::testkit::broker::error_codes::{COORDINATOR_NOT_AVAILABLE, NONE};

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = FindCoordinatorRequest::decode(body, ctx.version)?;
    let brokers = ctx.shared.broker_addrs();
    // FNV-1a of the key: stable across runs, unlike the std hasher.
    let hash = request
        .key
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x1000_0000_01b3)
        });
    let (id, addr) = brokers[(hash % brokers.len() as u64) as usize];
    let up = ctx.shared.cluster().is_broker_up(id);
    let error_code = injected.unwrap_or(if up { NONE } else { COORDINATOR_NOT_AVAILABLE });
    let mut response = FindCoordinatorResponse::default().with_error_code(error_code);
    if error_code == NONE {
        response = response
            .with_node_id(BrokerId(id))
            .with_host(str_bytes(&addr.ip().to_string()))
            .with_port(i32::from(addr.port()));
    } else {
        response = response.with_node_id(BrokerId(-1)).with_port(-1);
    }
    response.encode(out, ctx.version)?;
    Ok(Reply::Respond)
}
