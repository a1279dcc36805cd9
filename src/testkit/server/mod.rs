//! The reference broker's TCP face: several Kafka brokers in one process, on 127.0.0.1
//! ephemeral ports, over one shared [`Cluster`], with a [`FaultPlan`] a test drives while
//! traffic runs.
//!
//! Threads: one acceptor per broker and one thread per connection, all plain std threads. A
//! connection reads a request, serves it, writes the answer, in order, so answers on a
//! connection keep request order as Kafka guarantees. Everything stops on
//! [`ReferenceCluster::shutdown`] (also on drop): no thread outlives the cluster.
//!
//! A cluster started with [`ReferenceCluster::start_with_sasl`] has `SASL_PLAINTEXT` listeners
//! (`sasl.rs`): a connection is served only after it authenticated, and the fault plan applies
//! to its requests from then on.
//!
//! A cluster started with [`ReferenceCluster::start_with_tls`] has TLS listeners (`tls.rs`),
//! `SSL` or, with a SASL listener too, `SASL_SSL`; each broker then also listens without TLS
//! on a second port ([`ReferenceCluster::plaintext_bootstrap_servers`]), as a Kafka broker with
//! two listeners does, so a consumer without TLS reads what was produced over TLS. Each
//! listener's answers advertise its own listener's addresses.

mod api_versions;
mod clock;
pub(crate) mod connection;
mod faults;
pub(crate) mod handlers;
mod idle;
pub mod oauthbearer;
pub(crate) mod sasl;
mod stats;
pub mod tls;

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;

pub use api_versions::{ApiVersionTable, IMPLEMENTED as IMPLEMENTED_API_VERSIONS};
pub use faults::{FaultAction, FaultPlan, ANY_BROKER};
pub use sasl::SaslListener;
pub use stats::ServerStats;
pub use tls::{Issued, TestCa, TlsListener, TlsVersion, Validity};

use crate::testkit::broker::{BrokerRules, Cluster};

use clock::BrokerClock;
use idle::IdleWatch;

/// Largest request frame accepted (Kafka `socket.request.max.bytes`); a bigger one closes
/// the connection.
pub const MAX_FRAME_BYTES: usize = 100 * 1024 * 1024;

/// A running multi-broker reference cluster.
pub struct ReferenceCluster {
    shared: Arc<Shared>,
    /// The coordinator's timer thread and its stop signal.
    ticker: Mutex<Option<(JoinHandle<()>, Arc<TickerStop>)>>,
}

/// Stops the timer thread without making it sleep out its interval.
#[derive(Default)]
struct TickerStop {
    stopped: Mutex<bool>,
    signal: Condvar,
}

/// State shared by every thread of the face.
pub(crate) struct Shared {
    cluster: Mutex<Cluster>,
    /// Signalled after appends (long-polling fetches wait on it) and on teardown.
    appended: Condvar,
    faults: FaultPlan,
    stats: ServerStats,
    api_versions: Mutex<BTreeMap<i32, Arc<ApiVersionTable>>>,
    brokers: Vec<BrokerSlot>,
    next_connection: AtomicU64,
    /// Kafka's `connections.max.idle.ms` for connections accepted from now on, in ms; 0 keeps
    /// connections however long they idle.
    connections_max_idle_ms: AtomicU64,
    /// Set for a SASL cluster (`SASL_PLAINTEXT`, or `SASL_SSL` with `tls`): every connection
    /// authenticates first.
    sasl: Option<Arc<SaslListener>>,
    sasl_nonces: AtomicU64,
    /// Set for a TLS cluster: connections to the primary listeners run TLS.
    tls: Option<Arc<TlsListener>>,
    /// What SASL session ends and idle times are compared with: real time unless a test froze
    /// it.
    clock: BrokerClock,
    /// Whether a request may wait in real time for the cluster to change (Kafka's short
    /// internal retries): true on sockets, false for the simulator's in-memory peer, where
    /// nothing else runs while a request is served.
    waits_in_real_time: bool,
}

/// Which of a broker's listeners a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The broker's address ([`ReferenceCluster::bootstrap_servers`]): TLS on a TLS cluster.
    Primary,
    /// A TLS cluster's second, plaintext listener.
    Plaintext,
}

/// How often the TCP face sweeps for timed-out transactions (Kafka's
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms` is 10 s; tests want less).
pub const TRANSACTION_TIMEOUT_SWEEP: Duration = Duration::from_millis(100);

struct BrokerSlot {
    id: i32,
    addr: SocketAddr,
    /// A TLS cluster's plaintext listener.
    plaintext_addr: Option<SocketAddr>,
    runtime: Mutex<BrokerRuntime>,
}

#[derive(Default)]
struct BrokerRuntime {
    /// One per listener while the broker is up.
    acceptors: Vec<(JoinHandle<()>, Arc<AtomicBool>)>,
    connections: HashMap<u64, OpenConnection>,
    threads: Vec<JoinHandle<()>>,
}

struct OpenConnection {
    stream: TcpStream,
    closed: Arc<AtomicBool>,
    idle: Arc<IdleWatch>,
}

impl Shared {
    /// `connections.max.idle.ms` for a connection accepted now.
    pub(crate) fn connections_max_idle(&self) -> Option<Duration> {
        match self.connections_max_idle_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// The state of a cluster served without sockets (the simulator's in-memory peer):
    /// `brokers` name each broker's advertised address; nothing listens on them.
    pub(crate) fn in_memory(cluster: Cluster, brokers: &[(i32, SocketAddr)]) -> Shared {
        Shared {
            cluster: Mutex::new(cluster),
            appended: Condvar::new(),
            faults: FaultPlan::default(),
            stats: ServerStats::default(),
            api_versions: Mutex::new(
                brokers
                    .iter()
                    .map(|&(id, _)| (id, Arc::new(ApiVersionTable::default())))
                    .collect(),
            ),
            brokers: brokers
                .iter()
                .map(|&(id, addr)| BrokerSlot {
                    id,
                    addr,
                    plaintext_addr: None,
                    runtime: Mutex::new(BrokerRuntime::default()),
                })
                .collect(),
            next_connection: AtomicU64::new(0),
            connections_max_idle_ms: AtomicU64::new(0),
            sasl: None,
            sasl_nonces: AtomicU64::new(0),
            tls: None,
            clock: BrokerClock::default(),
            waits_in_real_time: false,
        }
    }

    pub(crate) fn cluster(&self) -> MutexGuard<'_, Cluster> {
        self.cluster
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn notify_appended(&self) {
        self.appended.notify_all();
    }

    /// Waits for an append (or teardown) for at most `timeout`.
    pub(crate) fn wait_for_append<'a>(
        &self,
        guard: MutexGuard<'a, Cluster>,
        timeout: Duration,
    ) -> MutexGuard<'a, Cluster> {
        match self.appended.wait_timeout(guard, timeout) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }

    /// See the field `waits_in_real_time`.
    pub(crate) fn waits_in_real_time(&self) -> bool {
        self.waits_in_real_time
    }

    pub(crate) fn api_versions(&self, broker: i32) -> Arc<ApiVersionTable> {
        Arc::clone(&self.api_versions.lock().unwrap()[&broker])
    }

    /// A fresh value for a SCRAM server nonce (unique per exchange; tests need no secrecy).
    pub(crate) fn next_connection_nonce(&self) -> u64 {
        self.sasl_nonces.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn sasl(&self) -> Option<&SaslListener> {
        self.sasl.as_deref()
    }

    pub(crate) fn clock(&self) -> &BrokerClock {
        &self.clock
    }

    pub(crate) fn tls(&self) -> Option<&TlsListener> {
        self.tls.as_deref()
    }

    pub(crate) fn faults(&self) -> &FaultPlan {
        &self.faults
    }

    pub(crate) fn stats(&self) -> &ServerStats {
        &self.stats
    }

    pub(crate) fn broker_addr(&self, id: i32) -> Option<SocketAddr> {
        self.slot(id).map(|s| s.addr)
    }

    /// Every broker with its address, up or down (Metadata lists them all, as the librdkafka
    /// mock does; leaders do not move when a broker goes down).
    pub(crate) fn broker_addrs(&self) -> Vec<(i32, SocketAddr)> {
        self.brokers.iter().map(|b| (b.id, b.addr)).collect()
    }

    /// `id`'s address on `listener` (the primary one where the broker has no other).
    pub(crate) fn listener_addr(&self, id: i32, listener: Listener) -> Option<SocketAddr> {
        self.slot(id).map(|s| s.listener_addr(listener))
    }

    /// Every broker with its address on `listener`.
    pub(crate) fn listener_addrs(&self, listener: Listener) -> Vec<(i32, SocketAddr)> {
        self.brokers
            .iter()
            .map(|b| (b.id, b.listener_addr(listener)))
            .collect()
    }

    fn slot(&self, id: i32) -> Option<&BrokerSlot> {
        self.brokers.iter().find(|b| b.id == id)
    }
}

impl BrokerSlot {
    fn listener_addr(&self, listener: Listener) -> SocketAddr {
        match listener {
            Listener::Primary => self.addr,
            Listener::Plaintext => self.plaintext_addr.unwrap_or(self.addr),
        }
    }
}

impl ReferenceCluster {
    /// Starts brokers 1..=`num_brokers`, each listening on its own ephemeral port.
    pub fn start(num_brokers: usize, rules: BrokerRules) -> ReferenceCluster {
        Self::start_listening(num_brokers, rules, None, None)
    }

    /// As [`start`](Self::start), with `SASL_PLAINTEXT` listeners: every connection
    /// authenticates with one of `listener`'s mechanisms and users before anything else, and
    /// every broker advertises SaslHandshake and SaslAuthenticate.
    pub fn start_with_sasl(
        num_brokers: usize,
        rules: BrokerRules,
        listener: SaslListener,
    ) -> ReferenceCluster {
        Self::start_listening(num_brokers, rules, Some(listener), None)
    }

    /// As [`start`](Self::start), with TLS listeners (`SSL`, or `SASL_SSL` when `sasl` is
    /// given: TLS first, then SASL inside it). Each broker also listens without TLS on a
    /// second port ([`plaintext_bootstrap_servers`](Self::plaintext_bootstrap_servers)),
    /// with the same SASL listener if any.
    pub fn start_with_tls(
        num_brokers: usize,
        rules: BrokerRules,
        tls: TlsListener,
        sasl: Option<SaslListener>,
    ) -> ReferenceCluster {
        Self::start_listening(num_brokers, rules, sasl, Some(tls))
    }

    fn start_listening(
        num_brokers: usize,
        rules: BrokerRules,
        sasl: Option<SaslListener>,
        tls: Option<TlsListener>,
    ) -> ReferenceCluster {
        assert!(num_brokers > 0);
        let table = || {
            let mut table = ApiVersionTable::default();
            if sasl.is_some() {
                table.add_sasl();
            }
            Arc::new(table)
        };
        let ids: Vec<i32> = (1..=num_brokers as i32).collect();
        let bind = || TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let listeners: Vec<TcpListener> = ids.iter().map(|_| bind()).collect();
        let plaintext: Vec<Option<TcpListener>> =
            ids.iter().map(|_| tls.as_ref().map(|_| bind())).collect();
        let shared = Arc::new(Shared {
            cluster: Mutex::new(Cluster::new(&ids, rules)),
            appended: Condvar::new(),
            faults: FaultPlan::default(),
            stats: ServerStats::default(),
            api_versions: Mutex::new(ids.iter().map(|&id| (id, table())).collect()),
            brokers: ids
                .iter()
                .zip(listeners.iter().zip(&plaintext))
                .map(|(&id, (l, p))| BrokerSlot {
                    id,
                    addr: l.local_addr().expect("local address"),
                    plaintext_addr: p.as_ref().map(|p| p.local_addr().expect("local address")),
                    runtime: Mutex::new(BrokerRuntime::default()),
                })
                .collect(),
            next_connection: AtomicU64::new(0),
            connections_max_idle_ms: AtomicU64::new(0),
            sasl: sasl.map(Arc::new),
            sasl_nonces: AtomicU64::new(0),
            tls: tls.map(Arc::new),
            clock: BrokerClock::default(),
            waits_in_real_time: true,
        });
        for ((id, listener), plaintext) in ids.into_iter().zip(listeners).zip(plaintext) {
            start_acceptor(&shared, id, Listener::Primary, listener);
            if let Some(plaintext) = plaintext {
                start_acceptor(&shared, id, Listener::Plaintext, plaintext);
            }
        }
        let ticker = start_ticker(&shared);
        ReferenceCluster {
            shared,
            ticker: Mutex::new(Some(ticker)),
        }
    }

    /// `host:port,host:port,...` of every broker.
    pub fn bootstrap_servers(&self) -> String {
        self.shared
            .brokers
            .iter()
            .map(|b| b.addr.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A TLS cluster's plaintext listeners, `host:port,...` (the primary ones on any other
    /// cluster).
    pub fn plaintext_bootstrap_servers(&self) -> String {
        self.shared
            .brokers
            .iter()
            .map(|b| b.listener_addr(Listener::Plaintext).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The plaintext listener's address of `broker` (panics for an unknown broker).
    pub fn broker_address(&self, broker: i32) -> SocketAddr {
        self.shared.broker_addr(broker).expect("unknown broker")
    }

    /// Creates topic `name` with one partition per entry of `leaders`, led by that broker
    /// (panics if the topic exists).
    pub fn create_topic(&self, name: &str, leaders: &[i32]) {
        assert!(
            self.shared.cluster().create_topic(name, leaders),
            "topic {name} exists"
        );
    }

    /// Moves the leadership of `topic`-`partition` to broker `leader`.
    pub fn set_leader(&self, topic: &str, partition: i32, leader: i32) {
        self.shared.cluster().set_leader(topic, partition, leader);
    }

    /// Runs `f` on the cluster state under its lock (inspect logs, truncate, ...).
    pub fn with_cluster<R>(&self, f: impl FnOnce(&mut Cluster) -> R) -> R {
        let result = f(&mut self.shared.cluster());
        self.shared.notify_appended();
        result
    }

    /// Waits until `condition` holds of the cluster state, re-checked whenever it changes
    /// (an append, a marker, a timer's abort, a `with_cluster` call); false if `timeout`
    /// passed first.
    pub fn wait_until(
        &self,
        timeout: Duration,
        mut condition: impl FnMut(&Cluster) -> bool,
    ) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut cluster = self.shared.cluster();
        while !condition(&cluster) {
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            cluster = self.shared.wait_for_append(cluster, deadline - now);
        }
        true
    }

    /// The fault plan the brokers apply to the requests they read.
    pub fn faults(&self) -> &FaultPlan {
        &self.shared.faults
    }

    /// What the brokers saw: requests, connections and bytes.
    pub fn stats(&self) -> &ServerStats {
        &self.shared.stats
    }

    /// Restricts what `broker` (or every broker, with `None`) advertises for `api`: a range,
    /// or `None` to remove the API. Connections opened afterwards negotiate against it; a
    /// request outside it closes the connection.
    pub fn set_api_versions(&self, broker: Option<i32>, api: ApiKey, range: Option<(i16, i16)>) {
        let mut tables = self.shared.api_versions.lock().unwrap();
        for (_, table) in tables
            .iter_mut()
            .filter(|(id, _)| broker.is_none_or(|b| b == **id))
        {
            Arc::make_mut(table).set(api, range);
        }
    }

    /// Closes connections accepted from now on once they go `idle` without a request (`None`:
    /// never, the default here), as a Kafka broker's `SocketServer` does past
    /// `connections.max.idle.ms` (default 10 minutes; `Selector` closes the connection that
    /// has been idle longest, without a word to the client). A client request that crosses
    /// the close on the wire is never read. The idle time is read on the brokers' clock: on a
    /// frozen one, connections close only at [`advance_clock`](Self::advance_clock).
    pub fn set_connections_max_idle(&self, idle: Option<Duration>) {
        let ms = idle.map_or(0, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        self.shared
            .connections_max_idle_ms
            .store(ms, Ordering::Relaxed);
    }

    /// Freezes the brokers' clock (`clock.rs`): from now on it moves only by
    /// [`advance_clock`](Self::advance_clock). A SASL session ends only at an advance past its
    /// end, and a connection accepted from now on closes for idling only at an advance
    /// (`idle.rs`). Real time does not count on it any more: a test waits out a session or an
    /// idle limit by advancing the clock, and cannot lose a race with a stalled machine.
    /// Connections accepted before keep closing on real time.
    pub fn freeze_clock(&self) {
        self.shared.clock.freeze();
    }

    /// Moves the frozen clock forward by `by`, then sweeps every connection accepted on it
    /// (`idle.rs`): once it returns, each one that had been idle for its
    /// `connections.max.idle.ms` at the new instant is closed (counted in
    /// [`ServerStats::idle_closed`]) and reads no request any more; its client learns of the
    /// close at the next advance, or when a request it writes meanwhile is dropped unread
    /// ([`ServerStats::idle_crossings`]). A request in service is waited for first.
    ///
    /// # Panics
    /// If [`freeze_clock`](Self::freeze_clock) was not called.
    pub fn advance_clock(&self, by: Duration) {
        let now = self.shared.clock.advance(by);
        for slot in &self.shared.brokers {
            // Swept outside the broker's lock: a sweep may wait for a request in service.
            let watched: Vec<(Arc<IdleWatch>, TcpStream)> = {
                let runtime = slot.runtime.lock().unwrap();
                runtime
                    .connections
                    .values()
                    .filter_map(|c| Some((Arc::clone(&c.idle), c.stream.try_clone().ok()?)))
                    .collect()
            };
            for (watch, stream) in watched {
                if watch.sweep(now, &stream) {
                    self.shared.stats.count_idle_closed();
                }
            }
        }
    }

    /// Takes a broker down: closes its listener (new connections are refused) and every open
    /// connection; answers not yet written are lost, even for requests already appended.
    pub fn broker_down(&self, broker: i32) {
        self.shared.cluster().set_broker_up(broker, false);
        stop_broker(&self.shared, broker);
    }

    /// Brings a broker back on the same port.
    pub fn broker_up(&self, broker: i32) {
        let slot = self.shared.slot(broker).expect("unknown broker");
        if !slot.runtime.lock().unwrap().acceptors.is_empty() {
            return;
        }
        let listener = bind_again(slot.addr);
        let plaintext = slot.plaintext_addr.map(bind_again);
        self.shared.cluster().set_broker_up(broker, true);
        start_acceptor(&self.shared, broker, Listener::Primary, listener);
        if let Some(plaintext) = plaintext {
            start_acceptor(&self.shared, broker, Listener::Plaintext, plaintext);
        }
    }

    /// Stops every broker and joins every thread. Idempotent.
    pub fn shutdown(&self) {
        if let Some((handle, stop)) = self.ticker.lock().unwrap().take() {
            *stop.stopped.lock().unwrap() = true;
            stop.signal.notify_all();
            let _ = handle.join();
        }
        for broker in self.shared.broker_addrs().into_iter().map(|(id, _)| id) {
            stop_broker(&self.shared, broker);
        }
    }
}

impl Drop for ReferenceCluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A port just released may linger briefly; std sets SO_REUSEADDR, so this rarely retries.
fn bind_again(addr: SocketAddr) -> TcpListener {
    let mut attempts = 0;
    loop {
        match TcpListener::bind(addr) {
            Ok(listener) => return listener,
            Err(_) if attempts < 100 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("rebinding {addr}: {e}"),
        }
    }
}

/// The coordinator's timer: every [`TRANSACTION_TIMEOUT_SWEEP`] of wall-clock time it runs
/// [`Cluster::abort_timed_out_transactions`] and wakes parked fetches if markers were written.
/// (The simulator calls the same method on its virtual clock instead.)
fn start_ticker(shared: &Arc<Shared>) -> (JoinHandle<()>, Arc<TickerStop>) {
    let stop = Arc::new(TickerStop::default());
    let handle = {
        let shared = Arc::clone(shared);
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("ref-cluster-ticker".to_string())
            .spawn(move || {
                let mut stopped = stop.stopped.lock().unwrap();
                loop {
                    stopped = stop
                        .signal
                        .wait_timeout(stopped, TRANSACTION_TIMEOUT_SWEEP)
                        .unwrap()
                        .0;
                    if *stopped {
                        return;
                    }
                    if shared
                        .cluster()
                        .abort_timed_out_transactions(connection::wall_clock_ms())
                        > 0
                    {
                        shared.notify_appended();
                    }
                }
            })
            .expect("spawn the ticker")
    };
    (handle, stop)
}

fn start_acceptor(shared: &Arc<Shared>, broker: i32, kind: Listener, listener: TcpListener) {
    let slot = shared.slot(broker).expect("known broker");
    let stop = Arc::new(AtomicBool::new(false));
    let handle = {
        let shared = Arc::clone(shared);
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name(format!("ref-broker-{broker}-accept"))
            .spawn(move || accept_loop(&shared, broker, kind, &listener, &stop))
            .expect("spawn acceptor")
    };
    slot.runtime.lock().unwrap().acceptors.push((handle, stop));
}

fn accept_loop(
    shared: &Arc<Shared>,
    broker: i32,
    kind: Listener,
    listener: &TcpListener,
    stop: &AtomicBool,
) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let Ok(registered) = stream.try_clone() else {
            continue;
        };
        let closed = Arc::new(AtomicBool::new(false));
        let idle = Arc::new(IdleWatch::new(&shared.clock, shared.connections_max_idle()));
        let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
        let slot = shared.slot(broker).expect("known broker");
        let mut runtime = slot.runtime.lock().unwrap();
        // Checked under the lock that `stop_broker` takes, so no connection slips past a
        // teardown.
        if stop.load(Ordering::SeqCst) {
            return;
        }
        runtime.threads.retain(|t| !t.is_finished());
        runtime.connections.insert(
            id,
            OpenConnection {
                stream: registered,
                closed: Arc::clone(&closed),
                idle: Arc::clone(&idle),
            },
        );
        shared.stats.connection_opened();
        let thread_shared = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name(format!("ref-broker-{broker}-conn-{id}"))
            .spawn(move || {
                connection::serve(&thread_shared, broker, kind, stream, &closed, &idle);
                thread_shared.stats.connection_closed();
                if let Some(slot) = thread_shared.slot(broker) {
                    slot.runtime.lock().unwrap().connections.remove(&id);
                }
            });
        match spawned {
            Ok(handle) => runtime.threads.push(handle),
            Err(_) => {
                runtime.connections.remove(&id);
                shared.stats.connection_closed();
            }
        }
    }
}

/// Stops a broker's acceptor and connections and joins their threads.
fn stop_broker(shared: &Shared, broker: i32) {
    let Some(slot) = shared.slot(broker) else {
        return;
    };
    let (acceptors, threads) = {
        let mut runtime = slot.runtime.lock().unwrap();
        let acceptors = std::mem::take(&mut runtime.acceptors);
        for (_, stop) in &acceptors {
            stop.store(true, Ordering::SeqCst);
        }
        for connection in runtime.connections.values() {
            connection.closed.store(true, Ordering::SeqCst);
            let _ = connection.stream.shutdown(std::net::Shutdown::Both);
        }
        (acceptors, std::mem::take(&mut runtime.threads))
    };
    let addrs = [Some(slot.addr), slot.plaintext_addr];
    for ((handle, _), addr) in acceptors.into_iter().zip(addrs.into_iter().flatten()) {
        // Wake the blocking accept; it sees the stop flag and drops the listener.
        let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
        let _ = handle.join();
    }
    // Wake fetches parked in a long poll; taking the lock first means none is between its
    // check of `closed` and its wait.
    drop(shared.cluster());
    shared.notify_appended();
    for thread in threads {
        let _ = thread.join();
    }
}
