//! FindCoordinator (v0-v4): key type 0 names a group's coordinator, 1 a transactional id's
//! (v0 knows groups only). The cluster model decides which broker coordinates a key; a down
//! coordinator answers COORDINATOR_NOT_AVAILABLE. v4 (KIP-699) batches keys and answers in
//! `coordinators`.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::{str_bytes, HandlerResult, Reply, RequestContext};
use crate::testkit::broker::error_codes::{COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, NONE};
use crate::testkit::broker::{COORDINATOR_KEY_GROUP, COORDINATOR_KEY_TRANSACTION};

/// (error, node id, host, port) for one key.
fn locate(
    ctx: &RequestContext<'_>,
    key_type: i8,
    key: &str,
    injected: Option<i16>,
) -> (i16, i32, String, i32) {
    let none = |code| (code, -1, String::new(), -1);
    if let Some(code) = injected {
        return none(code);
    }
    if key_type != COORDINATOR_KEY_GROUP && key_type != COORDINATOR_KEY_TRANSACTION {
        return none(INVALID_REQUEST);
    }
    let cluster = ctx.shared.cluster();
    let id = cluster.coordinator_for(key_type, key);
    match ctx.shared.listener_addr(id, ctx.listener) {
        Some(addr) if cluster.is_broker_up(id) => {
            (NONE, id, addr.ip().to_string(), i32::from(addr.port()))
        }
        _ => none(COORDINATOR_NOT_AVAILABLE),
    }
}

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = FindCoordinatorRequest::decode(body, ctx.version)?;
    let mut response = FindCoordinatorResponse::default();
    if ctx.version >= 4 {
        let coordinators = request
            .coordinator_keys
            .iter()
            .map(|key| {
                let (code, id, host, port) = locate(ctx, request.key_type, key, injected);
                Coordinator::default()
                    .with_key(key.clone())
                    .with_error_code(code)
                    .with_node_id(BrokerId(id))
                    .with_host(StrBytes::from_string(host))
                    .with_port(port)
            })
            .collect();
        response = response.with_coordinators(coordinators);
    } else {
        let (code, id, host, port) = locate(ctx, request.key_type, &request.key, injected);
        response = response
            .with_error_code(code)
            .with_node_id(BrokerId(id))
            .with_host(str_bytes(&host))
            .with_port(port);
    }
    response.encode(out, ctx.version)?;
    Ok(Reply::Respond)
}
