//! One client connection: read a frame, serve it, write the answer, in order.
//!
//! Frames are an i32 length and a body, read with a bounded size. Answers are buffered and
//! flushed when no further whole request is already buffered, so pipelined requests share a
//! write. Faults from the [`FaultPlan`](super::FaultPlan) are applied here, around the handler.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::handlers::{self, Reply, RequestContext};
use super::{api_versions, FaultAction, Shared, MAX_FRAME_BYTES};

const BUFFER_BYTES: usize = 256 * 1024;

pub(super) fn serve(shared: &Shared, broker: i32, stream: TcpStream, closed: &AtomicBool) {
    let _ = stream.set_nodelay(true);
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::with_capacity(BUFFER_BYTES, stream);
    let mut writer = BufWriter::with_capacity(BUFFER_BYTES, write_half);
    while !closed.load(Ordering::Relaxed) {
        let Some(frame) = read_frame(&mut reader) else {
            break;
        };
        match serve_frame(shared, broker, closed, frame, &mut writer) {
            Step::Continue => {}
            Step::Close => break,
        }
        if !whole_frame_buffered(reader.buffer()) && writer.flush().is_err() {
            break;
        }
    }
    let _ = writer.flush();
    let _ = writer.get_ref().shutdown(Shutdown::Both);
}

enum Step {
    Continue,
    Close,
}

/// Reads one request body; `None` on EOF, error or an oversized or negative length.
fn read_frame(reader: &mut BufReader<TcpStream>) -> Option<Bytes> {
    let mut length = [0u8; 4];
    reader.read_exact(&mut length).ok()?;
    let length = usize::try_from(i32::from_be_bytes(length)).ok()?;
    if !(8..=MAX_FRAME_BYTES).contains(&length) {
        return None;
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some(Bytes::from(body))
}

fn whole_frame_buffered(buffer: &[u8]) -> bool {
    buffer.len() >= 4
        && i32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]])
            .try_into()
            .is_ok_and(|len: usize| buffer.len() >= 4 + len)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn serve_frame(
    shared: &Shared,
    broker: i32,
    closed: &AtomicBool,
    mut frame: Bytes,
    writer: &mut BufWriter<TcpStream>,
) -> Step {
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    shared
        .stats()
        .count_request(broker, api_key, version, frame.len() + 4);

    let table = shared.api_versions(broker);
    let api = ApiKey::try_from(api_key).ok();
    let mut out = BytesMut::with_capacity(1024);
    out.put_i32(0); // length, patched below
    if !table.supports(api_key, version) {
        if api == Some(ApiKey::ApiVersions) {
            // The response header of ApiVersions is always v0.
            let answered = encode_header(correlation_id, 0, &mut out)
                && api_versions::answer_unsupported(&table, &mut out).is_ok();
            return if answered && write_response(shared, writer, out) {
                Step::Continue
            } else {
                Step::Close
            };
        }
        shared.stats().count_unsupported();
        return Step::Close;
    }
    let api = api.expect("advertised APIs are known");
    let Ok(header) = RequestHeader::decode(&mut frame, api.request_header_version(version)) else {
        return Step::Close;
    };

    // The fault counts as applied when `taken` drops: right after processing, before a
    // withheld answer is dropped or delayed.
    let taken = shared.faults().take(broker, api_key);
    let fault = taken.as_ref().map(|t| t.action);
    if let Some(FaultAction::ResetConnection { mid_frame }) = fault {
        let _ = writer.flush();
        if mid_frame {
            // A length promising more than follows, then the start of the answer.
            let mut torn = BytesMut::new();
            torn.put_i32(64);
            torn.put_i32(header.correlation_id);
            torn.put_bytes(0, 24);
            let _ = writer.write_all(&torn);
            let _ = writer.flush();
        }
        return Step::Close;
    }
    let injected = match fault {
        Some(FaultAction::InjectError(code)) => Some(code),
        _ => None,
    };

    if !encode_header(
        header.correlation_id,
        api.response_header_version(version),
        &mut out,
    ) {
        return Step::Close;
    }
    let ctx = RequestContext {
        shared,
        broker,
        closed,
        version,
        now_ms: now_ms(),
    };
    let reply = match handlers::dispatch(&ctx, api, &mut frame, injected, &mut out) {
        Ok(reply) => reply,
        // A request that does not decode: Kafka closes the connection.
        Err(_) => Reply::Close,
    };
    drop(taken);
    match (reply, fault) {
        (Reply::Close, _) => Step::Close,
        (_, Some(FaultAction::DropResponseAfterAppend)) => {
            let _ = writer.flush();
            Step::Close
        }
        (Reply::NoResponse, _) => Step::Continue,
        (Reply::Respond, Some(FaultAction::DelayResponse(delay))) => {
            if writer.flush().is_err() || !wait_unless_closed(closed, delay) {
                return Step::Close;
            }
            if write_response(shared, writer, out) {
                Step::Continue
            } else {
                Step::Close
            }
        }
        (Reply::Respond, _) => {
            if write_response(shared, writer, out) {
                Step::Continue
            } else {
                Step::Close
            }
        }
    }
}

fn encode_header(correlation_id: i32, header_version: i16, out: &mut BytesMut) -> bool {
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(out, header_version)
        .is_ok()
}

/// Patches the frame length and queues the frame.
fn write_response(shared: &Shared, writer: &mut BufWriter<TcpStream>, mut out: BytesMut) -> bool {
    let length = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&length.to_be_bytes());
    shared.stats().count_bytes_out(out.len());
    writer.write_all(&out).is_ok()
}

/// Sleeps up to `delay`, in short steps so a teardown is not held up. False if torn down.
fn wait_unless_closed(closed: &AtomicBool, delay: Duration) -> bool {
    let deadline = Instant::now() + delay;
    loop {
        if closed.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(5)));
    }
}
