//! One broker connection on a shard: a connect task, then a reader task that cuts frames and a
//! writer task that writes request frames in order. Dropping a [`ConnectionTasks`] cancels
//! both tasks and closes the socket.
//!
//! Every failure ends the connection with a typed [`ConnectionError`]; nothing a peer sends
//! can panic the shard or make it allocate more than `kacrab.max.response.bytes` (and a frame
//! body is allocated as its bytes arrive, not when its length prefix claims them).

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::TcpStream;
use glommio::Task;

use crate::engine::NodeId;
use crate::protocol::wire::{self, Frame};

use super::stats::{ConnectionError, FramePart, LiveGuard, RuntimeCounters};

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
}

/// Writes are coalesced up to this many bytes per syscall.
const COALESCE_LIMIT: usize = 256 * 1024;

/// A frame body is first given this much room, then room doubles as bytes arrive.
const FIRST_BODY_CHUNK: usize = 64 * 1024;

/// Resolves `address` off the executor thread (getaddrinfo blocks).
async fn resolve(address: &str) -> io::Result<SocketAddr> {
    if let Ok(addr) = address.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let owned = address.to_string();
    glommio::executor()
        .spawn_blocking(move || owned.to_socket_addrs().map(|mut a| a.next()))
        .await?
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{address} resolved to no address"),
            )
        })
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
        let event = match connect(&address, setup.connect_timeout).await {
            Ok(stream) => {
                setup.counters.connection_established();
                let stream = CountedStream {
                    stream,
                    _open: setup.counters.socket_guard(),
                };
                let (reader, writer) = futures_lite::io::split(stream);
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

async fn connect(address: &str, timeout: Duration) -> Result<TcpStream, ConnectionError> {
    let addr = resolve(address)
        .await
        .map_err(|err| ConnectionError::Resolve {
            address: address.to_string(),
            message: err.to_string(),
        })?;
    let connect_failed = |err: io::Error| ConnectionError::Connect {
        address: address.to_string(),
        kind: err.kind(),
        message: err.to_string(),
    };
    // glommio refuses a zero timeout; the engine's own setup deadline still applies then.
    let stream = if timeout.is_zero() {
        TcpStream::connect(addr).await
    } else {
        TcpStream::connect_timeout(addr, timeout).await
    }
    .map_err(|e| connect_failed(e.into()))?;
    stream
        .set_nodelay(true)
        .map_err(|e| connect_failed(e.into()))?;
    Ok(stream)
}

/// A broker socket counted in [`RuntimeCounters`] until it is closed (dropped).
struct CountedStream {
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

fn read_error(err: io::Error) -> ConnectionError {
    ConnectionError::Read {
        kind: err.kind(),
        message: err.to_string(),
    }
}

/// Reads one frame body (length prefix removed), or says why the connection must end.
async fn read_frame(
    reader: &mut (impl AsyncRead + Unpin),
    max_frame: usize,
) -> Result<Bytes, ConnectionError> {
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
    mut reader: futures_lite::io::ReadHalf<CountedStream>,
    setup: ConnectionSetup,
    _guard: LiveGuard,
) {
    loop {
        let event = match read_frame(&mut reader, setup.max_frame).await {
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

async fn write_frames(
    node: NodeId,
    generation: u64,
    mut writer: futures_lite::io::WriteHalf<CountedStream>,
    frames: LocalReceiver<Frame>,
    events: Rc<LocalSender<ConnectionEvent>>,
    _guard: LiveGuard,
) {
    let mut buf = BytesMut::new();
    while let Some(first) = frames.recv().await {
        // Coalesce whatever else is queued into one write.
        let mut next = future::poll_once(frames.recv()).await.flatten();
        let result = if next.is_none() {
            write_segments(&mut writer, &first).await
        } else {
            buf.clear();
            for segment in first.segments() {
                buf.extend_from_slice(segment);
            }
            while let Some(frame) = next.take() {
                for segment in frame.segments() {
                    buf.extend_from_slice(segment);
                }
                if buf.len() >= COALESCE_LIMIT {
                    break;
                }
                next = future::poll_once(frames.recv()).await.flatten();
            }
            let r = writer.write_all(&buf).await;
            if let (Ok(()), Some(frame)) = (&r, next) {
                write_segments(&mut writer, &frame).await
            } else {
                r
            }
        };
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

/// Writes a frame's segments in order.
async fn write_segments(writer: &mut (impl AsyncWrite + Unpin), frame: &Frame) -> io::Result<()> {
    for segment in frame.segments() {
        writer.write_all(segment).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8], max_frame: usize) -> Result<Bytes, ConnectionError> {
        let mut reader = futures_lite::io::Cursor::new(bytes.to_vec());
        future::block_on(read_frame(&mut reader, max_frame))
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
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
