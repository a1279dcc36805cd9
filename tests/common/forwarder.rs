//! A TCP forwarder standing in for a name or load balancer in front of a cluster: a fixed
//! address whose target a test switches, as a DNS record or a proxy moves to a new cluster.
//! Each accepted connection is joined to a fresh connection to the target of that moment;
//! when either side closes, both are closed.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub struct Forwarder {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    target: Mutex<SocketAddr>,
    stopped: AtomicBool,
    /// Both sockets of every joined pair, to close them on drop, and the copying threads.
    pipes: Mutex<Vec<(TcpStream, TcpStream)>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Forwarder {
    pub fn start(target: SocketAddr) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the forwarder");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            target: Mutex::new(target),
            stopped: AtomicBool::new(false),
            pipes: Mutex::default(),
            threads: Mutex::default(),
        });
        let accepting = Arc::clone(&shared);
        let acceptor = std::thread::spawn(move || accept_loop(&listener, &accepting));
        Forwarder {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// `host:port` of the forwarder.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Connections accepted from now on go to `target`; joined ones keep theirs.
    pub fn retarget(&self, target: SocketAddr) {
        *self.shared.target.lock().unwrap() = target;
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let target = *shared.target.lock().unwrap();
        // A target that refuses: the client's connection is closed at once, as a refused
        // connect would be.
        let Ok(server) = TcpStream::connect(target) else {
            continue;
        };
        if let Err(e) = join(shared, client, server) {
            eprintln!("forwarder: {e}");
        }
    }
}

fn join(shared: &Arc<Shared>, client: TcpStream, server: TcpStream) -> io::Result<()> {
    shared
        .pipes
        .lock()
        .unwrap()
        .push((client.try_clone()?, server.try_clone()?));
    let mut threads = shared.threads.lock().unwrap();
    for (mut from, mut to) in [(client.try_clone()?, server.try_clone()?), (server, client)] {
        threads.push(std::thread::spawn(move || {
            let _ = io::copy(&mut from, &mut to);
            // One side closed or failed: close the pair, so the other side sees it too.
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        }));
    }
    Ok(())
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        // Wakes the acceptor, which then sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for (client, server) in self.shared.pipes.lock().unwrap().drain(..) {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
        let threads: Vec<_> = self.shared.threads.lock().unwrap().drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
    }
}
