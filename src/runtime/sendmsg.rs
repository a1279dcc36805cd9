//! Vectored socket writes. glommio 0.9's `TcpStream` has no vectored write (the futures default
//! writes only the first slice), so a request frame's segments (its header and each record
//! batch) would have to be copied into one buffer first. Instead the writer hands them to one
//! `sendmsg(MSG_DONTWAIT)` on the stream's descriptor, as glommio's own write path does for one
//! buffer, and falls back to the stream's async `write_all` for the rest of a segment when the
//! socket would block; `write_all` waits for room through the reactor.
//!
//! Never a plain `writev` on the descriptor: glommio keeps its sockets in blocking mode, so only
//! `MSG_DONTWAIT` keeps the call from blocking the shard.

use std::io::{self, IoSlice};
use std::os::unix::io::RawFd;

use bytes::Bytes;
use futures_lite::io::{AsyncWrite, AsyncWriteExt};

/// Slices handed to one `sendmsg`: Linux's `IOV_MAX` (1024) bounds it anyway.
pub(crate) const MAX_IOVECS: usize = 512;

/// Sends what the socket `fd` takes now of `slices`, in order, in one `sendmsg` call that never
/// blocks (`MSG_DONTWAIT`) and never raises SIGPIPE on a closed peer (`MSG_NOSIGNAL`, EPIPE is
/// returned instead). Returns the bytes sent; `WouldBlock` when the socket takes none now.
/// At most [`MAX_IOVECS`] slices are offered.
pub(crate) fn send_vectored(fd: RawFd, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    let count = slices.len().min(MAX_IOVECS);
    // SAFETY: `msghdr` is plain data for which all-zero is a valid value (no name, no control
    // data, no flags).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is guaranteed ABI-compatible with `iovec` on Unix; the kernel only reads
    // through `msg_iov`, the `*mut` is the C signature's.
    msg.msg_iov = slices.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = count as _;
    loop {
        // SAFETY: `msg` points at `count` valid `iovec`s borrowed from `slices` for the whole
        // call, each describing initialised memory the kernel only reads, and at nothing else.
        // `fd` is open for the call: the caller holds the stream it belongs to (`write_frames`
        // in connection.rs holds its write half). This is the runtime's syscall edge.
        let sent = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return Ok(sent as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Writes `pieces` in order, each whole: as many as the socket takes at once through `send`
/// (one vectored, non-blocking send), the rest of a piece through `writer.write_all` when
/// `send` would block, then vectored again.
///
/// `send` and `writer` must write to the same stream; `send` is [`send_vectored`] on the
/// writer's descriptor in the runtime and a fake in the tests.
pub(crate) async fn write_pieces(
    mut send: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
    writer: &mut (impl AsyncWrite + Unpin),
    pieces: &[Bytes],
) -> io::Result<()> {
    // The first piece not fully written, and how much of it is.
    let mut index = 0;
    let mut offset = 0;
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(pieces.len().min(MAX_IOVECS));
    while index < pieces.len() {
        slices.clear();
        slices.push(IoSlice::new(&pieces[index][offset..]));
        slices.extend(
            pieces[index + 1..]
                .iter()
                .take(MAX_IOVECS - 1)
                .map(|p| IoSlice::new(p)),
        );
        match send(&slices) {
            Ok(0) if slices.iter().any(|s| !s.is_empty()) => {
                return Err(io::ErrorKind::WriteZero.into());
            }
            Ok(mut sent) => {
                // Skip what went out: whole pieces, then part of one.
                while index < pieces.len() && sent >= pieces[index].len() - offset {
                    sent -= pieces[index].len() - offset;
                    index += 1;
                    offset = 0;
                }
                offset += sent;
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                // Wait for room the reactor's way, with the rest of this piece.
                writer.write_all(&pieces[index][offset..]).await?;
                index += 1;
                offset = 0;
            }
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future;
    use std::io::Read;
    use std::os::unix::io::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn pieces(lengths: &[usize]) -> Vec<Bytes> {
        lengths
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                Bytes::from(
                    (0..len)
                        .map(|j| (i * 31 + j * 7) as u8)
                        .collect::<Vec<u8>>(),
                )
            })
            .collect()
    }

    fn concat(pieces: &[Bytes]) -> Vec<u8> {
        pieces.iter().flat_map(|p| p.iter().copied()).collect()
    }

    /// A socket that takes up to `per_call` bytes per vectored send, and every `block_every`-th
    /// send takes none (would block); what it takes goes to `out`, as what `write_all` writes.
    fn fake_send<'a>(
        out: &'a std::cell::RefCell<Vec<u8>>,
        per_call: usize,
        block_every: usize,
        calls: &'a std::cell::Cell<usize>,
    ) -> impl FnMut(&[IoSlice<'_>]) -> io::Result<usize> + 'a {
        move |slices: &[IoSlice<'_>]| {
            calls.set(calls.get() + 1);
            if calls.get() % block_every == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut left = per_call;
            let mut sent = 0;
            for s in slices {
                let n = s.len().min(left);
                out.borrow_mut().extend_from_slice(&s[..n]);
                left -= n;
                sent += n;
                if left == 0 {
                    break;
                }
            }
            Ok(sent)
        }
    }

    /// An async writer appending to the same output as the fake socket.
    struct Sink<'a>(&'a std::cell::RefCell<Vec<u8>>);

    impl AsyncWrite for Sink<'_> {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            // A short write each time, as a socket may give.
            let n = buf.len().min(5);
            self.0.borrow_mut().extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn partial_sends_and_blocked_sends_keep_every_byte_in_order() {
        let input = pieces(&[0, 3, 100, 1, 0, 4096, 17, 2, 700]);
        for per_call in [1, 2, 3, 7, 64, 100, 101, 5000, 1 << 20] {
            for block_every in [2, 3, 5, usize::MAX] {
                let out = std::cell::RefCell::new(Vec::new());
                let calls = std::cell::Cell::new(0);
                let send = fake_send(&out, per_call, block_every, &calls);
                future::block_on(write_pieces(send, &mut Sink(&out), &input)).unwrap();
                assert_eq!(
                    out.into_inner(),
                    concat(&input),
                    "{per_call} bytes per send, every {block_every}th blocks"
                );
            }
        }
    }

    #[test]
    fn more_pieces_than_one_send_takes_are_all_written() {
        let input = pieces(&vec![3; 3 * MAX_IOVECS + 5]);
        let out = std::cell::RefCell::new(Vec::new());
        let calls = std::cell::Cell::new(0);
        let send = fake_send(&out, usize::MAX, usize::MAX, &calls);
        future::block_on(write_pieces(send, &mut Sink(&out), &input)).unwrap();
        assert_eq!(out.into_inner(), concat(&input));
        assert_eq!(calls.get(), 4, "one send per {MAX_IOVECS} pieces");
    }

    #[test]
    fn a_send_error_ends_the_write() {
        let input = pieces(&[10, 10]);
        let mut first = true;
        let send = |_: &[IoSlice<'_>]| {
            if std::mem::take(&mut first) {
                Ok(4)
            } else {
                Err(io::Error::from(io::ErrorKind::BrokenPipe))
            }
        };
        let out = std::cell::RefCell::new(Vec::new());
        let err = future::block_on(write_pieces(send, &mut Sink(&out), &input)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }

    /// The real syscall against a socket whose send buffer is far smaller than the frame: the
    /// non-blocking sends are partial and would block, the blocking fallback waits for the
    /// reader, and the reader gets every byte in order.
    #[test]
    fn a_frame_larger_than_the_send_buffer_arrives_whole_over_a_socketpair() {
        let (sender, mut receiver) = UnixStream::pair().unwrap();
        let sender = socket2::Socket::from(sender);
        sender.set_send_buffer_size(4096).unwrap();
        let sender: UnixStream = sender.into();
        let input = pieces(&[9, 300_000, 4, 2, 150_000, 0, 1000, 77]);
        let expected = concat(&input);
        // The reader starts only after the first send, so that send meets a peer that does not
        // read: it cannot take the whole frame.
        let (first_sent, wait_first) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let _ = wait_first.recv();
            let mut got = Vec::new();
            receiver.read_to_end(&mut got).unwrap();
            got
        });
        let fd = sender.as_raw_fd();
        let sends = std::cell::Cell::new((0usize, 0usize)); // (calls, partial or blocked)
        let send = |slices: &[IoSlice<'_>]| {
            let offered: usize = slices.iter().map(|s| s.len()).sum();
            let result = send_vectored(fd, slices);
            let (calls, short) = sends.get();
            let was_short = !matches!(result, Ok(n) if n == offered);
            sends.set((calls + 1, short + usize::from(was_short)));
            let _ = first_sent.send(());
            result
        };
        // Blocking std writes stand in for glommio's reactor wait.
        let mut writer = futures_lite::io::AssertAsync::new(&sender);
        future::block_on(write_pieces(send, &mut writer, &input)).unwrap();
        drop(sender);
        assert_eq!(reader.join().unwrap(), expected);
        let (calls, short) = sends.get();
        // 450 KB do not fit a send buffer of a few KiB that nobody reads.
        assert!(short >= 1, "no send was partial: {calls} calls");
    }
}
