//! Counters tests assert on: requests served per broker, API and version, connections, and
//! requests refused because their API or version is not advertised.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;

use super::tls::TlsVersion;

/// What the reference cluster's brokers saw: requests by broker, API and version,
/// connections, bytes.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// (broker, api key, version) → requests read.
    requests: Mutex<BTreeMap<(i32, i16, i16), u64>>,
    /// Signalled, under the `requests` lock, on every request counted and every connection
    /// opened or closed: the waits below re-check under that lock, so none is missed.
    changed: Condvar,
    connections_accepted: AtomicU64,
    connections_open: AtomicU64,
    unsupported_closed: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    /// (broker, mechanism) → connections authenticated, and refused, by a SASL listener.
    authentications: Mutex<BTreeMap<(i32, String), (u64, u64)>>,
    ended_sessions_closed: AtomicU64,
    reauthentications: AtomicU64,
    /// Connections closed for idling past `connections.max.idle.ms`, every broker.
    idle_closed: AtomicU64,
    /// Requests that arrived on a connection closed for idling, dropped unread.
    idle_crossings: AtomicU64,
    /// broker → TLS handshakes completed, and failed, on its TLS listener.
    tls_handshakes: Mutex<BTreeMap<i32, (u64, u64)>>,
    /// TLS sessions by the version their handshake settled on, every broker.
    tls_versions: Mutex<BTreeMap<Option<TlsVersion>, u64>>,
}

impl ServerStats {
    pub(crate) fn count_request(&self, broker: i32, api_key: i16, version: i16, bytes: usize) {
        *self
            .requests
            .lock()
            .unwrap()
            .entry((broker, api_key, version))
            .or_default() += 1;
        self.changed.notify_all();
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn count_authentication(&self, broker: i32, mechanism: &str, succeeded: bool) {
        let mut counts = self.authentications.lock().unwrap();
        let entry = counts.entry((broker, mechanism.to_string())).or_default();
        if succeeded {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }

    /// A handshake on `broker`'s TLS listener ended: completed at `version`, or failed (`None`).
    pub(crate) fn count_tls_handshake(&self, broker: i32, version: Option<Option<TlsVersion>>) {
        {
            let mut counts = self.tls_handshakes.lock().unwrap();
            let entry = counts.entry(broker).or_default();
            match version {
                Some(version) => {
                    entry.0 += 1;
                    *self
                        .tls_versions
                        .lock()
                        .unwrap()
                        .entry(version)
                        .or_default() += 1;
                }
                None => entry.1 += 1,
            }
        }
        self.signal_connections();
    }

    /// TLS sessions whose handshake settled on `version`, every broker.
    pub fn tls_sessions_at(&self, version: TlsVersion) -> u64 {
        self.tls_versions
            .lock()
            .unwrap()
            .get(&Some(version))
            .copied()
            .unwrap_or(0)
    }

    /// TLS handshakes begun on every broker's TLS listener, completed or failed.
    pub fn tls_handshakes(&self) -> u64 {
        self.tls_handshakes
            .lock()
            .unwrap()
            .values()
            .map(|(ok, failed)| ok + failed)
            .sum()
    }

    /// Waits, woken by each TLS handshake's end, until `at_least` have ended on every broker
    /// together; false if `timeout` passed first.
    pub fn wait_for_tls_handshakes(&self, at_least: u64, timeout: Duration) -> bool {
        self.wait_until(timeout, |_| self.tls_handshakes() >= at_least)
    }

    /// TLS handshakes `broker`'s TLS listener completed.
    pub fn tls_handshakes_succeeded(&self, broker: i32) -> u64 {
        self.tls_handshakes
            .lock()
            .unwrap()
            .get(&broker)
            .map_or(0, |c| c.0)
    }

    /// TLS handshakes that failed on `broker`'s TLS listener (refused by either side, or cut
    /// short).
    pub fn tls_handshakes_failed(&self, broker: i32) -> u64 {
        self.tls_handshakes
            .lock()
            .unwrap()
            .get(&broker)
            .map_or(0, |c| c.1)
    }

    pub(crate) fn count_ended_session(&self) {
        self.ended_sessions_closed.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections a SASL listener closed because a request came after the session ended.
    pub fn ended_sessions_closed(&self) -> u64 {
        self.ended_sessions_closed.load(Ordering::Relaxed)
    }

    pub(crate) fn count_idle_closed(&self) {
        self.idle_closed.fetch_add(1, Ordering::Relaxed);
        self.signal_connections();
    }

    /// Connections closed for idling past `connections.max.idle.ms`, every broker.
    pub fn idle_closed(&self) -> u64 {
        self.idle_closed.load(Ordering::Relaxed)
    }

    /// Waits, woken by each connection closed, until at least `at_least` connections were
    /// closed for idling; false if `timeout` passed first.
    pub fn wait_for_idle_closed(&self, at_least: u64, timeout: Duration) -> bool {
        self.wait_until(timeout, |_| self.idle_closed() >= at_least)
    }

    pub(crate) fn count_idle_crossing(&self) {
        self.idle_crossings.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests that crossed an idle close on the wire: they arrived on a connection the
    /// broker had closed for idling (on a frozen clock, before the close reached the client)
    /// and were dropped unread, every broker. Counted before the connection is shut down, so
    /// before the client can learn the request is lost.
    pub fn idle_crossings(&self) -> u64 {
        self.idle_crossings.load(Ordering::Relaxed)
    }

    pub(crate) fn count_reauthentication(&self) {
        self.reauthentications.fetch_add(1, Ordering::Relaxed);
    }

    /// Re-authentications (KIP-368) begun: SaslHandshake on an authenticated connection.
    pub fn reauthentications(&self) -> u64 {
        self.reauthentications.load(Ordering::Relaxed)
    }

    /// Connections a SASL listener authenticated with `mechanism`, every broker.
    pub fn authentications_succeeded(&self, mechanism: &str) -> u64 {
        self.authentications_where(mechanism, |(ok, _)| ok)
    }

    /// Authentications a SASL listener refused (wrong credentials) for `mechanism`, every broker.
    pub fn authentications_failed(&self, mechanism: &str) -> u64 {
        self.authentications_where(mechanism, |(_, failed)| failed)
    }

    fn authentications_where(&self, mechanism: &str, pick: impl Fn((u64, u64)) -> u64) -> u64 {
        self.authentications
            .lock()
            .unwrap()
            .iter()
            .filter(|((_, m), _)| m == mechanism)
            .map(|(_, &counts)| pick(counts))
            .sum()
    }

    pub(crate) fn count_bytes_out(&self, bytes: usize) {
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn connection_opened(&self) {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        self.signal_connections();
    }

    pub(crate) fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
        self.signal_connections();
    }

    fn signal_connections(&self) {
        let _requests = self.requests.lock().unwrap();
        self.changed.notify_all();
    }

    /// Waits, woken by each connection opened or closed, until exactly `open` are open; false
    /// if `timeout` passed first.
    pub fn wait_for_connections_open(&self, open: u64, timeout: Duration) -> bool {
        self.wait_until(timeout, |_| {
            self.connections_open.load(Ordering::Relaxed) == open
        })
    }

    /// Waits until `condition` holds, re-checked under the `requests` lock each time
    /// `changed` is signalled; false if `timeout` passed first.
    fn wait_until(
        &self,
        timeout: Duration,
        mut condition: impl FnMut(&BTreeMap<(i32, i16, i16), u64>) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        let mut requests = self.requests.lock().unwrap();
        while !condition(&requests) {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            requests = self
                .changed
                .wait_timeout(requests, deadline - now)
                .unwrap()
                .0;
        }
        true
    }

    pub(crate) fn count_unsupported(&self) {
        self.unsupported_closed.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests of `api` read on every broker, unsupported ones included.
    pub fn requests(&self, api: ApiKey) -> u64 {
        requests_of(&self.requests.lock().unwrap(), api)
    }

    /// Waits, woken by each request read, until `at_least` requests of `api` have been read
    /// on every broker together; false if `timeout` passed first.
    pub fn wait_for_requests(&self, api: ApiKey, at_least: u64, timeout: Duration) -> bool {
        self.wait_until(timeout, |requests| requests_of(requests, api) >= at_least)
    }

    /// Requests of `api` read on `broker`.
    pub fn requests_on(&self, broker: i32, api: ApiKey) -> u64 {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|((b, key, _), _)| *b == broker && *key == api as i16)
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests of `api` at exactly `version`, every broker.
    pub fn requests_at_version(&self, api: ApiKey, version: i16) -> u64 {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|((_, key, v), _)| *key == api as i16 && *v == version)
            .map(|(_, n)| n)
            .sum()
    }

    /// Every version of `api` that any client sent.
    pub fn versions_seen(&self, api: ApiKey) -> Vec<i16> {
        let mut versions: Vec<i16> = self
            .requests
            .lock()
            .unwrap()
            .keys()
            .filter(|(_, key, _)| *key == api as i16)
            .map(|(_, _, v)| *v)
            .collect();
        versions.sort_unstable();
        versions.dedup();
        versions
    }

    /// Connections accepted, every broker, in all.
    pub fn connections_accepted(&self) -> u64 {
        self.connections_accepted.load(Ordering::Relaxed)
    }

    /// Connections open now, every broker.
    pub fn connections_open(&self) -> u64 {
        self.connections_open.load(Ordering::Relaxed)
    }

    /// Connections closed because a request named an API or version not advertised.
    pub fn unsupported_closed(&self) -> u64 {
        self.unsupported_closed.load(Ordering::Relaxed)
    }

    /// Bytes of the requests counted, every broker.
    pub fn bytes_in(&self) -> u64 {
        self.bytes_in.load(Ordering::Relaxed)
    }

    /// Bytes written to clients, every broker.
    pub fn bytes_out(&self) -> u64 {
        self.bytes_out.load(Ordering::Relaxed)
    }
}

/// Requests of `api` in `requests`, summed over brokers and versions.
fn requests_of(requests: &BTreeMap<(i32, i16, i16), u64>, api: ApiKey) -> u64 {
    requests
        .iter()
        .filter(|((_, key, _), _)| *key == api as i16)
        .map(|(_, n)| n)
        .sum()
}
