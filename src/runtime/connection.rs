//! One broker connection on a shard: a connect task, then a reader task that cuts frames and a
//! writer task that writes request frames in order. Dropping a [`ConnectionTasks`] cancels
//! both tasks and closes the socket.
//!
//! Under `SSL` and `SASL_SSL` the connect task also runs the TLS handshake (rustls through
//! `futures-rustls`) and both tasks go through the TLS stream; the plaintext tasks are the
//! same functions instantiated for the bare socket, so plaintext writes keep their vectored
//! `sendmsg` and nothing of TLS is on their path. A handshake the broker refuses or whose
//! certificate is refused is [`ConnectionError::Tls`], which the engine treats as fatal.
//!
//! Every failure ends the connection with a typed [`ConnectionError`]; nothing a peer sends
//! can panic the shard or make it allocate more than `kacrab.max.response.bytes` (and a frame
//! body is allocated as its bytes arrive, not when its length prefix claims them).

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::io::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_rustls::client::TlsStream;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::TcpStream;
use glommio::Task;

use crate::engine::NodeId;
use crate::protocol::wire::{self, Frame};

use super::sendmsg;
use super::stats::{ConnectionError, FramePart, LiveGuard, RuntimeCounters};
use super::tls::{handshake, tls_refusal};

/// What a connection reports to its shard's driver.
pub(crate) enum ConnectionEvent {
    Connected {
        node: NodeId,
        generation: u64,
        tasks: ConnectionTasks,
    },
    Frame {
        node: NodeId,
        generation: u64,
        body: Bytes,
    },
    /// The connect failed, or the socket failed or was closed.
    Closed {
        node: NodeId,
        generation: u64,
        error: ConnectionError,
    },
}

/// The live halves of a connection.
pub(crate) struct ConnectionTasks {
    pub writer: LocalSender<Frame>,
    _reader: Task<()>,
    _writer: Task<()>,
}

/// Where a new connection reports, and what it may accept.
#[derive(Clone)]
pub(crate) struct ConnectionSetup {
    pub events: Rc<LocalSender<ConnectionEvent>>,
    pub counters: Arc<RuntimeCounters>,
    pub connect_timeout: Duration,
    pub max_frame: usize,
    pub rotation: Rc<AddressRotation>,
    /// `SSL` and `SASL_SSL`: every connection runs TLS with this configuration.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// Frames queued together are gathered into one write up to this many bytes.
const COALESCE_LIMIT: usize = 256 * 1024;

/// Segments shorter than this are copied into the write's run of small segments; longer ones
/// (record batches) are sent from their own buffers. A copy of a few KiB costs less than an
/// iovec's share of the kernel's per-slice work.
const COPY_BELOW: usize = 4 * 1024;

/// A frame body is first given this much room, then room doubles as bytes arrive.
const FIRST_BODY_CHUNK: usize = 64 * 1024;

/// Resolves `address` to every address it names, off the executor thread (getaddrinfo
/// blocks), in the resolver's order.
async fn resolve(address: &str) -> io::Result<Vec<SocketAddr>> {
    if let Ok(addr) = address.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let owned = address.to_string();
    let addrs = glommio::executor()
        .spawn_blocking(move || owned.to_socket_addrs().map(Iterator::collect::<Vec<_>>))
        .await?;
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{address} resolved to no address"),
        ));
    }
    Ok(addrs)
}

/// Which of a name's addresses a shard tries first, per name (`client.dns.lookup=
/// use_all_dns_ips`, Java's default). An attempt tries every address from there; one that
/// fails every address moves the start on by one, so an address that swallows the whole setup
/// timeout (a host that does not answer) is not the first one tried again; one that connects
/// keeps its address first.
#[derive(Default)]
pub(crate) struct AddressRotation {
    first: RefCell<HashMap<String, usize>>,
}

impl AddressRotation {
    fn first(&self, address: &str) -> usize {
        self.first.borrow().get(address).copied().unwrap_or(0)
    }

    fn set_first(&self, address: &str, index: usize) {
        self.first.borrow_mut().insert(address.to_string(), index);
    }
}

/// Starts connecting. The result arrives as `Connected` or `Closed` on the setup's events.
pub(crate) fn spawn_connect(
    node: NodeId,
    generation: u64,
    address: String,
    setup: &ConnectionSetup,
) -> Task<()> {
    let setup = setup.clone();
    let guard = setup.counters.task_guard();
    setup.counters.connect_started();
    glommio::spawn_local(async move {
        let _guard = guard;
        let event = match connect(&address, setup.connect_timeout, &setup.rotation).await {
            Ok(stream) => {
                setup.counters.connection_established();
                let stream = CountedStream {
                    stream,
                    _open: setup.counters.socket_guard(),
                };
                match &setup.tls {
                    None => {
                        let fd = stream.stream.as_raw_fd();
                        let (reader, writer) = futures_lite::io::split(stream);
                        start_tasks(node, generation, reader, PlainOut { fd, writer }, &setup)
                    }
                    Some(tls) => match handshake(tls, &address, stream).await {
                        Ok(stream) => {
                            let (reader, writer) = futures_lite::io::split(stream);
                            start_tasks(node, generation, reader, TlsOut { writer }, &setup)
                        }
                        Err(error) => ConnectionEvent::Closed {
                            node,
                            generation,
                            error,
                        },
                    },
                }
            }
            Err(error) => ConnectionEvent::Closed {
                node,
                generation,
                error,
            },
        };
        // The driver holds the receiver for the shard's life; if it is gone, so is the shard.
        let _ = setup.events.try_send(event);
    })
}

/// Spawns the reader and writer tasks of an established (and, under TLS, handshaken)
/// connection.
fn start_tasks<R, W>(
    node: NodeId,
    generation: u64,
    reader: R,
    writer: W,
    setup: &ConnectionSetup,
) -> ConnectionEvent
where
    R: AsyncRead + Unpin + 'static,
    W: FrameOut + 'static,
{
    let (frames_tx, frames_rx) = local_channel::new_unbounded();
    let reader_task = glommio::spawn_local(read_frames(
        node,
        generation,
        reader,
        setup.clone(),
        setup.counters.task_guard(),
    ));
    let writer_task = glommio::spawn_local(write_frames(
        node,
        generation,
        writer,
        frames_rx,
        setup.events.clone(),
        setup.counters.task_guard(),
    ));
    ConnectionEvent::Connected {
        node,
        generation,
        tasks: ConnectionTasks {
            writer: frames_tx,
            _reader: reader_task,
            _writer: writer_task,
        },
    }
}

async fn connect(
    address: &str,
    timeout: Duration,
    rotation: &AddressRotation,
) -> Result<TcpStream, ConnectionError> {
    let addrs = resolve(address)
        .await
        .map_err(|err| ConnectionError::Resolve {
            address: address.to_string(),
            message: err.to_string(),
        })?;
    connect_resolved(address, &addrs, timeout, rotation).await
}

/// Connects to one of `address`'s resolved `addrs`, starting where `rotation` says, and moves
/// the rotation on as its doc says.
async fn connect_resolved(
    address: &str,
    addrs: &[SocketAddr],
    timeout: Duration,
    rotation: &AddressRotation,
) -> Result<TcpStream, ConnectionError> {
    let first = rotation.first(address) % addrs.len();
    match connect_any(addrs, first, timeout).await {
        Ok((stream, index)) => {
            rotation.set_first(address, index);
            Ok(stream)
        }
        Err(err) => {
            rotation.set_first(address, (first + 1) % addrs.len());
            Err(ConnectionError::Connect {
                address: address.to_string(),
                kind: err.kind(),
                message: err.to_string(),
            })
        }
    }
}

/// Tries `addrs` in turn from `first`, all within `timeout`, and returns the first stream that
/// connects with its index; else the last error.
async fn connect_any(
    addrs: &[SocketAddr],
    first: usize,
    timeout: Duration,
) -> io::Result<(TcpStream, usize)> {
    let deadline = std::time::Instant::now() + timeout;
    let mut last = io::Error::new(io::ErrorKind::TimedOut, "connection setup timed out");
    for index in (0..addrs.len()).map(|i| (first + i) % addrs.len()) {
        // glommio refuses a zero timeout; the engine's own setup deadline still applies then.
        let attempt = if timeout.is_zero() {
            TcpStream::connect(addrs[index]).await
        } else {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            TcpStream::connect_timeout(addrs[index], left).await
        };
        match attempt.and_then(|stream| stream.set_nodelay(true).map(|()| stream)) {
            Ok(stream) => return Ok((stream, index)),
            Err(err) => last = err.into(),
        }
    }
    Err(last)
}

/// A broker socket counted in [`RuntimeCounters`] until it is closed (dropped).
pub(super) struct CountedStream {
    stream: TcpStream,
    _open: LiveGuard,
}

impl AsyncRead for CountedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_close(cx)
    }
}

/// Reads until `buf` is full or the peer closes; returns how many bytes arrived.
async fn read_full(reader: &mut (impl AsyncRead + Unpin), buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]).await {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

/// `client_certificate`: the producer has one to show (a TLS connection's), for the hint of a
/// refusal.
fn read_error(err: io::Error, client_certificate: bool) -> ConnectionError {
    // TLS 1.3 finishes the client's side of the handshake before the broker has checked the
    // client's certificate: a refusal of it arrives as an alert on the first read.
    if let Some(reason) = tls_refusal(&err, client_certificate) {
        return ConnectionError::Tls { reason };
    }
    ConnectionError::Read {
        kind: err.kind(),
        message: err.to_string(),
    }
}

/// Reads one frame body (length prefix removed), or says why the connection must end.
async fn read_frame(
    reader: &mut (impl AsyncRead + Unpin),
    max_frame: usize,
    client_certificate: bool,
) -> Result<Bytes, ConnectionError> {
    let read_error = |err| read_error(err, client_certificate);
    let mut prefix = [0u8; 4];
    match read_full(reader, &mut prefix).await.map_err(read_error)? {
        0 => return Err(ConnectionError::ClosedByPeer),
        4 => {}
        received => {
            return Err(ConnectionError::Truncated {
                part: FramePart::LengthPrefix,
                expected: 4,
                received,
            })
        }
    }
    // The length is checked before anything is allocated: a hostile peer claiming 2 GiB
    // costs nothing but the connection.
    let size = wire::frame_length(prefix, max_frame).map_err(ConnectionError::Frame)?;
    // Room grows with the bytes that actually arrive, so a claim within the limit that is
    // never followed by its bytes does not cost its size either.
    let mut body = BytesMut::new();
    while body.len() < size {
        let start = body.len();
        let chunk = (size - start).min(start.max(FIRST_BODY_CHUNK));
        body.resize(start + chunk, 0);
        let received = read_full(reader, &mut body[start..])
            .await
            .map_err(read_error)?;
        if received < chunk {
            return Err(ConnectionError::Truncated {
                part: FramePart::Body,
                expected: size,
                received: start + received,
            });
        }
    }
    Ok(body.freeze())
}

async fn read_frames(
    node: NodeId,
    generation: u64,
    mut reader: impl AsyncRead + Unpin,
    setup: ConnectionSetup,
    _guard: LiveGuard,
) {
    let client_certificate = setup
        .tls
        .as_ref()
        .is_some_and(|tls| tls.client_auth_cert_resolver.has_certs());
    loop {
        let event = match read_frame(&mut reader, setup.max_frame, client_certificate).await {
            Ok(body) => ConnectionEvent::Frame {
                node,
                generation,
                body,
            },
            Err(error) => ConnectionEvent::Closed {
                node,
                generation,
                error,
            },
        };
        let closed = matches!(event, ConnectionEvent::Closed { .. });
        if setup.events.try_send(event).is_err() || closed {
            return;
        }
    }
}

/// Where a connection's writer puts the pieces of one write.
trait FrameOut {
    /// Writes every piece, in order, or fails.
    async fn write_all_pieces(&mut self, pieces: &[Bytes]) -> io::Result<()>;
}

/// A plaintext socket: the pieces go out as the slices of vectored `sendmsg` calls on its
/// descriptor. `writer` holds the stream, and so keeps `fd` open, for as long as this lives.
struct PlainOut {
    fd: RawFd,
    writer: futures_lite::io::WriteHalf<CountedStream>,
}

impl FrameOut for PlainOut {
    async fn write_all_pieces(&mut self, pieces: &[Bytes]) -> io::Result<()> {
        let fd = self.fd;
        sendmsg::write_pieces(
            |slices| sendmsg::send_vectored(fd, slices),
            &mut self.writer,
            pieces,
        )
        .await
    }
}

/// A TLS stream: each piece is encrypted into rustls's buffer (one copy, which encryption
/// needs anyway) and the records are written to the socket; the flush sends what is left.
struct TlsOut {
    writer: futures_lite::io::WriteHalf<TlsStream<CountedStream>>,
}

impl FrameOut for TlsOut {
    async fn write_all_pieces(&mut self, pieces: &[Bytes]) -> io::Result<()> {
        for piece in pieces {
            self.writer.write_all(piece).await?;
        }
        self.writer.flush().await
    }
}

/// Writes the frames queued for one connection, in order.
///
/// Whatever is queued when the writer wakes goes out together, up to [`COALESCE_LIMIT`] bytes:
/// small segments (request headers, small frames) are copied into one run, larger ones (record
/// batches) are written from where they are; on a plaintext socket, all as the slices of one
/// vectored `sendmsg` (see `sendmsg.rs`).
async fn write_frames(
    node: NodeId,
    generation: u64,
    mut out: impl FrameOut,
    frames: LocalReceiver<Frame>,
    events: Rc<LocalSender<ConnectionEvent>>,
    _guard: LiveGuard,
) {
    let mut run = BytesMut::new();
    let mut pieces: Vec<Bytes> = Vec::new();
    while let Some(first) = frames.recv().await {
        let mut queued = 0usize;
        let mut next = Some(first);
        while let Some(frame) = next.take() {
            queued += frame.len();
            gather(&frame, &mut run, &mut pieces);
            if queued >= COALESCE_LIMIT || pieces.len() >= sendmsg::MAX_IOVECS / 2 {
                break;
            }
            next = future::poll_once(frames.recv()).await.flatten();
        }
        if !run.is_empty() {
            pieces.push(run.split().freeze());
        }
        let result = out.write_all_pieces(&pieces).await;
        // Dropping the pieces hands the run's buffer back to `run` for the next write.
        pieces.clear();
        if let Err(err) = result {
            let _ = events.try_send(ConnectionEvent::Closed {
                node,
                generation,
                error: ConnectionError::Write {
                    kind: err.kind(),
                    message: err.to_string(),
                },
            });
            return;
        }
    }
}

/// Adds a frame's segments to the pieces of one write: a segment below [`COPY_BELOW`] bytes is
/// copied onto the current run of small ones, a larger one ends the run and goes as it is.
fn gather(frame: &Frame, run: &mut BytesMut, pieces: &mut Vec<Bytes>) {
    for segment in frame.segments() {
        if segment.len() < COPY_BELOW {
            run.extend_from_slice(segment);
        } else {
            if !run.is_empty() {
                pieces.push(run.split().freeze());
            }
            pieces.push(segment.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address nothing listens on: a port just released by a listener.
    fn refused_address() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    }

    #[test]
    fn every_address_of_a_name_is_tried_until_one_connects_and_that_one_is_tried_first_next_time() {
        let live = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addrs = [refused_address(), live.local_addr().unwrap()];
        let rotation = AddressRotation::default();
        let executor = glommio::LocalExecutorBuilder::default().make().unwrap();
        executor.run(async {
            let timeout = Duration::from_secs(5);
            connect_resolved("broker:9092", &addrs, timeout, &rotation)
                .await
                .expect("the second address connects");
            assert_eq!(
                rotation.first("broker:9092"),
                1,
                "the live address is kept first"
            );
            connect_resolved("broker:9092", &addrs, timeout, &rotation)
                .await
                .expect("the live address again");
            assert_eq!(rotation.first("broker:9092"), 1);
            // An attempt that fails every address starts the next one at the next address.
            let dead = [refused_address(), refused_address(), refused_address()];
            for expected in [1, 2, 0] {
                let err = connect_resolved("dead:9092", &dead, timeout, &rotation)
                    .await
                    .expect_err("nothing listens");
                assert!(matches!(err, ConnectionError::Connect { .. }), "{err:?}");
                assert_eq!(rotation.first("dead:9092"), expected);
            }
            assert_eq!(rotation.first("broker:9092"), 1, "kept per name");
        });
    }

    fn read(bytes: &[u8], max_frame: usize) -> Result<Bytes, ConnectionError> {
        let mut reader = futures_lite::io::Cursor::new(bytes.to_vec());
        future::block_on(read_frame(&mut reader, max_frame, false))
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn small_segments_are_copied_into_runs_and_large_ones_go_as_they_are() {
        let header = Bytes::from_static(b"head");
        let batch = Bytes::from(vec![7u8; COPY_BELOW]);
        let glue = Bytes::from_static(b"glue");
        let small_frame = Frame::from(Bytes::from_static(b"metadata"));
        let produce = Frame::from_segments(vec![header, batch.clone(), glue, batch.clone()]);
        let mut run = BytesMut::new();
        let mut pieces = Vec::new();
        gather(&small_frame, &mut run, &mut pieces);
        gather(&produce, &mut run, &mut pieces);
        gather(&small_frame, &mut run, &mut pieces);
        pieces.push(run.split().freeze());
        assert_eq!(pieces.len(), 5);
        assert_eq!(&pieces[0][..], b"metadatahead");
        assert_eq!(pieces[1].as_ptr(), batch.as_ptr(), "a batch was copied");
        assert_eq!(&pieces[2][..], b"glue");
        assert_eq!(pieces[3].as_ptr(), batch.as_ptr(), "a batch was copied");
        assert_eq!(&pieces[4][..], b"metadata");
        let written: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        let expected = [
            small_frame.to_bytes(),
            produce.to_bytes(),
            small_frame.to_bytes(),
        ]
        .concat();
        assert_eq!(written, expected);
    }

    #[test]
    fn frames_are_cut_by_their_length_prefix() {
        assert_eq!(read(&frame(b"abcdefgh"), 100).unwrap(), &b"abcdefgh"[..]);
        let big = vec![7u8; 3 * FIRST_BODY_CHUNK + 5];
        assert_eq!(read(&frame(&big), 1 << 20).unwrap(), &big[..]);
    }

    #[test]
    fn an_oversized_claim_is_refused_before_allocation() {
        let err = read(&0x7fff_ffffi32.to_be_bytes(), 1 << 20).unwrap_err();
        assert!(matches!(
            err,
            ConnectionError::Frame(wire::WireError::FrameTooLarge { .. })
        ));
        let err = read(&(-5i32).to_be_bytes(), 1 << 20).unwrap_err();
        assert!(matches!(
            err,
            ConnectionError::Frame(wire::WireError::NegativeFrameLength(-5))
        ));
    }

    #[test]
    fn truncation_and_close_are_told_apart() {
        assert_eq!(read(&[], 100).unwrap_err(), ConnectionError::ClosedByPeer);
        assert_eq!(
            read(&[0, 0], 100).unwrap_err(),
            ConnectionError::Truncated {
                part: FramePart::LengthPrefix,
                expected: 4,
                received: 2
            }
        );
        let mut torn = 64i32.to_be_bytes().to_vec();
        torn.extend_from_slice(&[1; 10]);
        assert_eq!(
            read(&torn, 100).unwrap_err(),
            ConnectionError::Truncated {
                part: FramePart::Body,
                expected: 64,
                received: 10
            }
        );
    }
}
