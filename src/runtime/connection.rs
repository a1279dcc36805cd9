//! One broker connection on a shard: a connect task, then a reader task that cuts frames and a
//! writer task that writes request frames in order. Dropping a [`ConnectionTasks`] cancels
//! both tasks and closes the socket.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::future;
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::TcpStream;
use glommio::Task;

use crate::engine::NodeId;
use crate::protocol::wire;

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
    /// The socket failed or was closed; `reason` says why (kept for diagnostics in tests).
    Closed {
        node: NodeId,
        generation: u64,
        #[allow(dead_code)]
        reason: String,
    },
}

/// The live halves of a connection.
pub(crate) struct ConnectionTasks {
    pub writer: LocalSender<Bytes>,
    _reader: Task<()>,
    _writer: Task<()>,
}

/// Writes are coalesced up to this many bytes per syscall.
const COALESCE_LIMIT: usize = 256 * 1024;

/// Resolves `address` off the executor thread (getaddrinfo blocks).
async fn resolve(address: &str) -> std::io::Result<SocketAddr> {
    if let Ok(addr) = address.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let owned = address.to_string();
    glommio::executor()
        .spawn_blocking(move || owned.to_socket_addrs().map(|mut a| a.next()))
        .await?
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{address} resolved to no address"),
            )
        })
}

/// Starts connecting. The result arrives as `Connected` or `Closed` on `events`.
pub(crate) fn spawn_connect(
    node: NodeId,
    generation: u64,
    address: String,
    timeout: Duration,
    max_frame: usize,
    events: std::rc::Rc<LocalSender<ConnectionEvent>>,
) -> Task<()> {
    glommio::spawn_local(async move {
        let connected = async {
            let addr = resolve(&address).await?;
            let stream = TcpStream::connect_timeout(addr, timeout)
                .await
                .map_err(std::io::Error::from)?;
            stream.set_nodelay(true).map_err(std::io::Error::from)?;
            Ok::<_, std::io::Error>(stream)
        }
        .await;
        match connected {
            Ok(stream) => {
                let (reader, writer) = futures_lite::io::split(stream);
                let (frames_tx, frames_rx) = local_channel::new_unbounded();
                let reader_task = glommio::spawn_local(read_frames(
                    node,
                    generation,
                    reader,
                    max_frame,
                    events.clone(),
                ));
                let writer_task = glommio::spawn_local(write_frames(
                    node,
                    generation,
                    writer,
                    frames_rx,
                    events.clone(),
                ));
                let _ = events
                    .send(ConnectionEvent::Connected {
                        node,
                        generation,
                        tasks: ConnectionTasks {
                            writer: frames_tx,
                            _reader: reader_task,
                            _writer: writer_task,
                        },
                    })
                    .await;
            }
            Err(err) => {
                let _ = events
                    .send(ConnectionEvent::Closed {
                        node,
                        generation,
                        reason: format!("connect to {address}: {err}"),
                    })
                    .await;
            }
        }
    })
}

async fn read_frames(
    node: NodeId,
    generation: u64,
    mut reader: futures_lite::io::ReadHalf<TcpStream>,
    max_frame: usize,
    events: std::rc::Rc<LocalSender<ConnectionEvent>>,
) {
    let reason = loop {
        let mut prefix = [0u8; 4];
        if let Err(err) = reader.read_exact(&mut prefix).await {
            break format!("read: {err}");
        }
        // The length is checked before anything is allocated: a hostile peer claiming 2 GiB
        // costs nothing but the connection.
        let size = match wire::frame_length(prefix, max_frame) {
            Ok(size) => size,
            Err(err) => break err.to_string(),
        };
        let mut body = BytesMut::zeroed(size);
        if let Err(err) = reader.read_exact(&mut body).await {
            break format!("read: {err}");
        }
        if events
            .send(ConnectionEvent::Frame {
                node,
                generation,
                body: body.freeze(),
            })
            .await
            .is_err()
        {
            return;
        }
    };
    let _ = events
        .send(ConnectionEvent::Closed {
            node,
            generation,
            reason,
        })
        .await;
}

async fn write_frames(
    node: NodeId,
    generation: u64,
    mut writer: futures_lite::io::WriteHalf<TcpStream>,
    frames: LocalReceiver<Bytes>,
    events: std::rc::Rc<LocalSender<ConnectionEvent>>,
) {
    let mut buf = BytesMut::new();
    while let Some(first) = frames.recv().await {
        // Coalesce whatever else is queued into one write.
        let mut next = future::poll_once(frames.recv()).await.flatten();
        let result = if next.is_none() {
            writer.write_all(&first).await
        } else {
            buf.clear();
            buf.extend_from_slice(&first);
            while let Some(frame) = next.take() {
                buf.extend_from_slice(&frame);
                if buf.len() >= COALESCE_LIMIT {
                    break;
                }
                next = future::poll_once(frames.recv()).await.flatten();
            }
            let r = writer.write_all(&buf).await;
            if let (Ok(()), Some(frame)) = (&r, next) {
                writer.write_all(&frame).await
            } else {
                r
            }
        };
        if let Err(err) = result {
            let _ = events
                .send(ConnectionEvent::Closed {
                    node,
                    generation,
                    reason: format!("write: {err}"),
                })
                .await;
            return;
        }
    }
}
