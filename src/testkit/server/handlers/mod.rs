//! Request handlers of the TCP face: decode with `kafka-protocol`, ask the sans-IO core,
//! encode the answer. One module per API.

mod add_offsets_to_txn;
mod add_partitions_to_txn;
mod end_txn;
mod fetch;
mod find_coordinator;
mod init_producer_id;
mod list_offsets;
mod metadata;
mod offset_fetch;
mod produce;
mod txn_offset_commit;

use std::sync::atomic::AtomicBool;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, BrokerId};
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::api_versions;
use super::{Listener, Shared};
use crate::testkit::broker::error_codes::{INVALID_PRODUCER_EPOCH, PRODUCER_FENCED};

/// What the connection does after a handler ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The answer was encoded into the output buffer.
    Respond,
    /// No answer (Produce with acks=0).
    NoResponse,
    /// Close the connection without answering.
    Close,
}

pub(crate) type HandlerResult = Result<Reply, Box<dyn std::error::Error + Send + Sync>>;

/// One request being served.
pub(crate) struct RequestContext<'a> {
    pub shared: &'a Shared,
    pub broker: i32,
    /// The listener the request came in on: addresses in the answer are that listener's.
    pub listener: Listener,
    /// Set when the connection is being torn down (broker down, shutdown): long waits stop.
    pub closed: &'a AtomicBool,
    pub version: i16,
    pub now_ms: i64,
}

/// Serves one request whose API and version the broker advertises. `injected` is an error
/// code from the fault plan: answer it without processing.
pub(crate) fn dispatch(
    ctx: &RequestContext<'_>,
    api: ApiKey,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    match api {
        ApiKey::ApiVersions => {
            ApiVersionsRequest::decode(body, ctx.version)?;
            let table = ctx.shared.api_versions(ctx.broker);
            let features = ctx.shared.cluster().finalized_transaction_version();
            api_versions::answer(&table, ctx.version, injected, features, out)
        }
        ApiKey::Metadata => metadata::handle(ctx, body, injected, out),
        ApiKey::Produce => produce::handle(ctx, body, injected, out),
        ApiKey::Fetch => fetch::handle(ctx, body, injected, out),
        ApiKey::ListOffsets => list_offsets::handle(ctx, body, injected, out),
        ApiKey::InitProducerId => init_producer_id::handle(ctx, body, injected, out),
        ApiKey::FindCoordinator => find_coordinator::handle(ctx, body, injected, out),
        ApiKey::AddPartitionsToTxn => add_partitions_to_txn::handle(ctx, body, injected, out),
        ApiKey::AddOffsetsToTxn => add_offsets_to_txn::handle(ctx, body, injected, out),
        ApiKey::EndTxn => end_txn::handle(ctx, body, injected, out),
        ApiKey::TxnOffsetCommit => txn_offset_commit::handle(ctx, body, injected, out),
        ApiKey::OffsetFetch => offset_fetch::handle(ctx, body, injected, out),
        // Only a SASL listener advertises these; its connections reach here authenticated.
        ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => {
            super::sasl::answer_after_authentication(api, ctx.version, out)
        }
        // Not advertised, so never dispatched.
        _ => Ok(Reply::Close),
    }
}

/// Coordinator APIs older than `fenced_since` predate PRODUCER_FENCED (KIP-588, 2.7) and
/// receive INVALID_PRODUCER_EPOCH instead (`KafkaApis`).
pub(crate) fn fenced_for_version(code: i16, version: i16, fenced_since: i16) -> i16 {
    if code == PRODUCER_FENCED && version < fenced_since {
        INVALID_PRODUCER_EPOCH
    } else {
        code
    }
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(crate) fn uuid(id: u128) -> uuid::Uuid {
    uuid::Uuid::from_u128(id)
}

/// KIP-951 `NodeEndpoints` for the leaders named in a response, so the client can reach a new
/// leader without a metadata round trip.
pub(crate) fn node_endpoints<T>(
    ctx: &RequestContext<'_>,
    leaders: impl IntoIterator<Item = i32>,
    make: impl Fn(BrokerId, StrBytes, i32) -> T,
) -> Vec<T> {
    let mut ids: Vec<i32> = leaders.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .filter_map(|id| {
            ctx.shared.listener_addr(id, ctx.listener).map(|addr| {
                make(
                    BrokerId(id),
                    str_bytes(&addr.ip().to_string()),
                    i32::from(addr.port()),
                )
            })
        })
        .collect()
}
