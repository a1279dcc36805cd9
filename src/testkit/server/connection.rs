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
use super::idle::IdleWatch;
use super::sasl::{self, SaslListener, SaslSession, SaslStep};
use super::{api_versions, FaultAction, Listener, Shared, MAX_FRAME_BYTES};

const BUFFER_BYTES: usize = 256 * 1024;

pub(super) fn serve(
    shared: &Shared,
    broker: i32,
    listener: Listener,
    stream: TcpStream,
    closed: &AtomicBool,
    watch: &IdleWatch,
) {
    let _ = stream.set_nodelay(true);
    let idle = watch.read_timeout();
    // On real time, a read that waits longer than the idle limit ends the connection (the
    // socket's receive timeout covers every clone of it, and the TLS stream over it). On a
    // frozen clock there is no timeout: the clock's advances close the connection.
    if stream.set_read_timeout(idle).is_err() {
        return;
    }
    let Ok(control) = stream.try_clone() else {
        return;
    };
    match (listener, shared.tls()) {
        (Listener::Primary, Some(tls)) => match tls.accept(stream) {
            Ok(socket) => {
                shared
                    .stats()
                    .count_tls_handshake(broker, Some(socket.version()));
                serve_on(
                    shared,
                    broker,
                    listener,
                    socket.clone(),
                    socket,
                    idle,
                    closed,
                    watch,
                );
            }
            Err(_) => shared.stats().count_tls_handshake(broker, None),
        },
        _ => {
            if let Ok(write_half) = control.try_clone() {
                serve_on(
                    shared, broker, listener, stream, write_half, idle, closed, watch,
                );
            }
        }
    }
    let _ = control.shutdown(Shutdown::Both);
}

/// Serves a connection's requests over `input` and `output` (the two halves of a socket, or
/// one TLS stream twice) until it ends. `idle`: the connection's `connections.max.idle.ms` on
/// real time, the receive timeout its socket was given. `watch` marks each request in service
/// until its answer is about to be flushed, and drops one that arrived after an idle close.
#[allow(clippy::too_many_arguments)]
fn serve_on(
    shared: &Shared,
    broker: i32,
    listener: Listener,
    input: impl Read,
    output: impl Write,
    idle: Option<Duration>,
    closed: &AtomicBool,
    watch: &IdleWatch,
) {
    let mut reader = BufReader::with_capacity(BUFFER_BYTES, input);
    let mut writer = BufWriter::with_capacity(BUFFER_BYTES, output);
    // A SASL listener's connection is served only once authenticated.
    let mut session = shared.sasl().map(|_| SaslSession::Handshake);
    // After SaslHandshake v0 the client's frames are bare tokens until it is authenticated.
    let mut bare_tokens = false;
    let mut requests: u64 = 0;
    while !closed.load(Ordering::Relaxed) {
        if let (Some(sasl), Some(session)) = (shared.sasl(), session.as_mut()) {
            if bare_tokens && !session.is_authenticated() {
                if !bare_token_step(
                    shared,
                    broker,
                    sasl,
                    session,
                    watch,
                    &mut reader,
                    &mut writer,
                ) {
                    break;
                }
                continue;
            }
        }
        // The clock is read only when a limit can end the wait.
        let waiting_since = idle.map(|_| Instant::now());
        let Some(mut frame) = read_frame(&mut reader) else {
            if idle
                .zip(waiting_since)
                .is_some_and(|(idle, since)| since.elapsed() >= idle)
            {
                shared.stats().count_idle_closed();
            }
            break;
        };
        let Some(serving) = watch.serve(shared.clock()) else {
            // Closed for idling before this request was read: it is lost with the connection.
            shared.stats().count_idle_crossing();
            break;
        };
        requests += 1;
        // KIP-368: on an authenticated connection SaslHandshake begins a re-authentication,
        // allowed after the session ended too; any other request after the end closes the
        // connection (Kafka's `KafkaChannel` and `SaslServerAuthenticator`).
        let handshake = frame.len() >= 4
            && i16::from_be_bytes([frame[0], frame[1]]) == ApiKey::SaslHandshake as i16
            && i16::from_be_bytes([frame[2], frame[3]]) >= 1;
        if let Some(session) = session.as_mut().filter(|s| s.is_authenticated()) {
            if handshake {
                shared.stats().count_reauthentication();
                *session = SaslSession::Handshake;
            } else if session.has_ended(shared.clock().now()) {
                shared.stats().count_ended_session();
                break;
            }
        }
        if let (Some(sasl), Some(session)) = (shared.sasl(), session.as_mut()) {
            if !session.is_authenticated() {
                match authenticate_step(
                    shared,
                    broker,
                    sasl,
                    session,
                    frame,
                    requests,
                    &mut writer,
                    &mut bare_tokens,
                ) {
                    Some(request) => frame = request,
                    None if session.is_closed() => break,
                    None => {
                        drop(serving);
                        if writer.flush().is_err() {
                            break;
                        }
                        continue;
                    }
                }
            }
        }
        match serve_frame(shared, broker, listener, closed, frame, &mut writer) {
            Step::Continue => {}
            Step::Close => break,
        }
        drop(serving);
        if !whole_frame_buffered(reader.buffer()) && writer.flush().is_err() {
            break;
        }
    }
    let _ = writer.flush();
}

enum Step {
    Continue,
    Close,
}

/// The largest bare SASL token accepted (Kafka's `sasl.server.max.receive.size` default).
const MAX_BARE_TOKEN: usize = 524_288;

/// Reads one bare token (SaslHandshake v0) and writes the bare answer. False when the
/// connection must end: a read error, an oversized token, or a failed authentication.
fn bare_token_step(
    shared: &Shared,
    broker: i32,
    listener: &SaslListener,
    session: &mut SaslSession,
    watch: &IdleWatch,
    reader: &mut BufReader<impl Read>,
    writer: &mut BufWriter<impl Write>,
) -> bool {
    let mut length = [0u8; 4];
    if reader.read_exact(&mut length).is_err() {
        return false;
    }
    let Ok(length) = usize::try_from(i32::from_be_bytes(length)) else {
        return false;
    };
    if length > MAX_BARE_TOKEN {
        return false;
    }
    let mut token = vec![0u8; length];
    if reader.read_exact(&mut token).is_err() {
        return false;
    }
    let Some(serving) = watch.serve(shared.clock()) else {
        shared.stats().count_idle_crossing();
        return false;
    };
    let record = |mechanism: &str, succeeded: bool| {
        shared
            .stats()
            .count_authentication(broker, mechanism, succeeded)
    };
    let seed = shared.next_connection_nonce();
    let now = shared.clock().now();
    let Some(answer) = sasl::bare_token(listener, session, &token, seed, now, &record) else {
        return false;
    };
    let mut out = BytesMut::with_capacity(4 + answer.len());
    out.put_i32(answer.len() as i32);
    out.put_slice(&answer);
    shared.stats().count_bytes_out(out.len());
    drop(serving);
    writer.write_all(&out).is_ok() && writer.flush().is_ok()
}

#[allow(clippy::too_many_arguments)]
/// One request of a connection not yet authenticated: handled by the SASL listener, or
/// returned to be served (ApiVersions). `None` when it was handled; the session is then
/// `Closed` if the connection must end.
fn authenticate_step(
    shared: &Shared,
    broker: i32,
    listener: &SaslListener,
    session: &mut SaslSession,
    frame: Bytes,
    requests: u64,
    writer: &mut BufWriter<impl Write>,
    bare_tokens: &mut bool,
) -> Option<Bytes> {
    if frame.len() >= 8 {
        let api_key = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        if api_key != ApiKey::ApiVersions as i16 {
            shared
                .stats()
                .count_request(broker, api_key, version, frame.len() + 4);
        }
    }
    let seed = shared.next_connection_nonce() ^ requests;
    let record = |mechanism: &str, succeeded: bool| {
        shared
            .stats()
            .count_authentication(broker, mechanism, succeeded)
    };
    match sasl::step(
        listener,
        session,
        frame,
        seed,
        shared.clock().now(),
        &record,
    ) {
        SaslStep::Serve(frame) => return Some(frame),
        SaslStep::Respond(out) => {
            if !write_response(shared, writer, out) {
                *session = SaslSession::Closed;
            }
        }
        SaslStep::RespondThenBareTokens(out) => {
            *bare_tokens = true;
            if !write_response(shared, writer, out) {
                *session = SaslSession::Closed;
            }
        }
        SaslStep::RespondThenClose(out) => {
            write_response(shared, writer, out);
            let _ = writer.flush();
            *session = SaslSession::Closed;
        }
        SaslStep::Close => *session = SaslSession::Closed,
    }
    None
}

/// Reads one request body; `None` on EOF, error or an oversized or negative length.
fn read_frame(reader: &mut BufReader<impl Read>) -> Option<Bytes> {
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

/// Milliseconds since the epoch: the TCP face's clock (the simulator has its own).
pub(super) fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn serve_frame(
    shared: &Shared,
    broker: i32,
    listener: Listener,
    closed: &AtomicBool,
    frame: Bytes,
    writer: &mut BufWriter<impl Write>,
) -> Step {
    let request = match parse_request(shared, broker, frame) {
        Ok(request) => request,
        Err(Early::Respond(out)) => {
            return if write_response(shared, writer, out) {
                Step::Continue
            } else {
                Step::Close
            };
        }
        Err(Early::Close) => return Step::Close,
    };

    // The fault counts as applied when `taken` drops: right after processing, before a
    // withheld answer is dropped or delayed.
    let taken = shared.faults().take(broker, request.api as i16);
    let fault = taken.as_ref().map(|t| t.action);
    if let Some(FaultAction::ResetConnection { mid_frame }) = fault {
        let _ = writer.flush();
        if mid_frame {
            // A length promising more than follows, then the start of the answer.
            let mut torn = BytesMut::new();
            torn.put_i32(64);
            torn.put_i32(request.correlation_id);
            torn.put_bytes(0, 24);
            let _ = writer.write_all(&torn);
            let _ = writer.flush();
        }
        return Step::Close;
    }
    let injected = match fault {
        Some(FaultAction::InjectError(code)) => Some(code),
        Some(FaultAction::AppendThenAnswer(code)) => {
            // Processed first; that answer is replaced by the error's.
            let (reply, _) = answer_request(
                shared,
                broker,
                listener,
                closed,
                request.clone(),
                None,
                wall_clock_ms(),
            );
            if matches!(reply, Reply::Close) {
                return Step::Close;
            }
            Some(code)
        }
        _ => None,
    };

    let (reply, out) = answer_request(
        shared,
        broker,
        listener,
        closed,
        request,
        injected,
        wall_clock_ms(),
    );
    drop(taken);
    // A broker marked down answers nothing. `broker_down` marks it before it closes its
    // connections, and a request served in between carries the model's NETWORK_EXCEPTION,
    // which stands for the lost connection (the simulator reads it so) and is no code a real
    // broker puts in a Produce answer: librdkafka fails the record on it.
    if !shared.cluster().is_broker_up(broker) {
        return Step::Close;
    }
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

/// A request whose API, version and header were accepted, ready to be answered.
#[derive(Clone)]
pub(crate) struct ParsedRequest {
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    /// The request body after the header.
    body: Bytes,
}

/// A request settled before its handler ran.
pub(crate) enum Early {
    /// An answer frame (length prefix included, not yet patched): ApiVersions at a version the
    /// broker does not advertise.
    Respond(BytesMut),
    /// Close the connection without answering.
    Close,
}

/// Reads one request frame (length prefix removed): counts it, checks that the broker
/// advertises its API and version, and decodes its header. Shared by the TCP face and the
/// simulator's in-memory peer.
pub(crate) fn parse_request(
    shared: &Shared,
    broker: i32,
    mut frame: Bytes,
) -> Result<ParsedRequest, Early> {
    if frame.len() < 8 {
        return Err(Early::Close);
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    shared
        .stats()
        .count_request(broker, api_key, version, frame.len() + 4);

    let table = shared.api_versions(broker);
    let api = ApiKey::try_from(api_key).ok();
    if !table.supports(api_key, version) {
        if api == Some(ApiKey::ApiVersions) {
            let mut out = BytesMut::with_capacity(1024);
            out.put_i32(0); // length, patched by the writer
                            // The response header of ApiVersions is always v0.
            let answered = encode_header(correlation_id, 0, &mut out)
                && api_versions::answer_unsupported(&table, &mut out).is_ok();
            return Err(if answered {
                Early::Respond(out)
            } else {
                Early::Close
            });
        }
        shared.stats().count_unsupported();
        return Err(Early::Close);
    }
    let api = api.expect("advertised APIs are known");
    let Ok(header) = RequestHeader::decode(&mut frame, api.request_header_version(version)) else {
        return Err(Early::Close);
    };
    Ok(ParsedRequest {
        api,
        version,
        correlation_id: header.correlation_id,
        body: frame,
    })
}

/// Runs the handler of a parsed request at `now_ms`. `injected` is an error code to answer
/// without processing. Returns what to do and the answer frame (length prefix included, not
/// yet patched; meaningful for [`Reply::Respond`] only).
pub(crate) fn answer_request(
    shared: &Shared,
    broker: i32,
    listener: Listener,
    closed: &AtomicBool,
    request: ParsedRequest,
    injected: Option<i16>,
    now_ms: i64,
) -> (Reply, BytesMut) {
    let ParsedRequest {
        api,
        version,
        correlation_id,
        mut body,
    } = request;
    let mut out = BytesMut::with_capacity(1024);
    out.put_i32(0); // length, patched by the writer
    if !encode_header(
        correlation_id,
        api.response_header_version(version),
        &mut out,
    ) {
        return (Reply::Close, out);
    }
    let ctx = RequestContext {
        shared,
        broker,
        listener,
        closed,
        version,
        now_ms,
    };
    let reply = match handlers::dispatch(&ctx, api, &mut body, injected, &mut out) {
        Ok(reply) => reply,
        // A request that does not decode: Kafka closes the connection.
        Err(_) => Reply::Close,
    };
    (reply, out)
}

/// Patches the length prefix of an answer frame built by [`parse_request`] or
/// [`answer_request`].
pub(crate) fn finish_frame(out: &mut BytesMut) {
    let length = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&length.to_be_bytes());
}

fn encode_header(correlation_id: i32, header_version: i16, out: &mut BytesMut) -> bool {
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(out, header_version)
        .is_ok()
}

/// Patches the frame length and queues the frame.
fn write_response(shared: &Shared, writer: &mut BufWriter<impl Write>, mut out: BytesMut) -> bool {
    finish_frame(&mut out);
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
