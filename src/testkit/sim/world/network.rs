//! The network between the engines and the broker: connections as pairs of FIFO pipes,
//! requests served on arrival through the broker's in-memory face, answers delivered in
//! request order after their latency, and the faults that act on a request as it arrives.

use super::*;

impl Sim {
    pub(super) fn connect(&mut self, shard: usize, node: NodeId, generation: u64, address: &str) {
        let broker = *self
            .addresses
            .get(address)
            .unwrap_or_else(|| panic!("engine connects to unknown address {address}"));
        let id = self.next_conn;
        self.next_conn += 1;
        if let Some(old) = self.current_conn.insert((shard, node), id) {
            if let Some(conn) = self.conns.get_mut(&old) {
                if !conn.is_closed() {
                    // The engine opened a new socket for this node: the old one is gone.
                    conn.state = ConnState::ClosedByClient;
                    conn.answers.clear();
                }
            }
            self.forget_if_done(old);
        }
        self.conns.insert(
            id,
            SimConn {
                engine: shard,
                node,
                generation,
                broker,
                state: ConnState::Connecting,
                last_arrival: self.now,
                answers: VecDeque::new(),
                in_transit: 0,
                last_activity: self.now,
                idle_check_pending: false,
                idle_closed: false,
            },
        );
        let latency = self.latency();
        let up = self.shared.cluster().is_broker_up(broker);
        let fail = self.chaos.as_ref().map_or(0.0, |c| c.connect_fail).max(0.0);
        if self.unreachable.contains(&broker) {
            // No answer to the attempt; the engine's connection setup timeout ends it.
        } else if up && !self.rng.chance(fail) {
            self.schedule(self.now + 2 * latency, Event::Connected(id));
        } else if up && self.rng.chance(0.5) {
            // The attempt hangs; the engine's connection setup timeout ends it.
        } else {
            self.schedule(self.now + latency, Event::ConnectFailed(id));
        }
    }

    pub(super) fn on_connected(&mut self, id: u64) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.state != ConnState::Connecting {
            return;
        }
        let (shard, node, generation, broker) =
            (conn.engine, conn.node, conn.generation, conn.broker);
        if self.shared.cluster().is_broker_up(broker) {
            self.conns.get_mut(&id).expect("known").state = ConnState::Open;
            self.note_activity(id);
            self.shards[shard]
                .engine
                .on_connected(self.now, node, generation);
        } else {
            self.conns.get_mut(&id).expect("known").state = ConnState::ClosedByBroker;
            self.shards[shard]
                .engine
                .on_disconnected(self.now, node, generation);
        }
        self.drive(shard);
    }

    pub(super) fn write(&mut self, shard: usize, node: NodeId, generation: u64, frame: Bytes) {
        let id = self.current_conn.get(&(shard, node)).copied().filter(|id| {
            self.conns
                .get(id)
                .is_some_and(|c| c.generation == generation)
        });
        let Some(id) = id else {
            panic!(
                "shard {shard} wrote to node {node} generation {generation}, which it never opened"
            );
        };
        let state = self.conns[&id].state;
        match state {
            ConnState::Open => {}
            ConnState::Stalled => return,
            ConnState::Connecting => panic!("shard {shard} wrote before the connection was up"),
            ConnState::ClosedByClient | ConnState::ClosedByBroker => {
                // The socket is gone: the write fails and the driver reports it at once.
                self.shards[shard]
                    .engine
                    .on_disconnected(self.now, node, generation);
                return;
            }
        }
        let trace = self.trace_request(shard, id, &frame);
        let latency = self.latency();
        let conn = self.conns.get_mut(&id).expect("known");
        let arrival = (self.now + latency).max(conn.last_arrival);
        conn.last_arrival = arrival;
        conn.in_transit += 1;
        self.schedule(
            arrival,
            Event::Request {
                conn: id,
                frame,
                trace,
            },
        );
    }

    pub(super) fn close_by_broker(&mut self, id: u64) {
        let latency = self.latency();
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        match conn.state {
            ConnState::ClosedByClient | ConnState::ClosedByBroker => {}
            ConnState::Connecting => {
                // The attempt fails; `ConnectFailed` tells the engine.
                self.schedule(self.now + latency, Event::ConnectFailed(id));
            }
            ConnState::Open | ConnState::Stalled => {
                conn.state = ConnState::ClosedByBroker;
                conn.answers.clear();
                let (shard, node, generation) = (conn.engine, conn.node, conn.generation);
                self.schedule(
                    self.now + latency,
                    Event::Closed {
                        conn: id,
                        shard,
                        node,
                        generation,
                    },
                );
            }
        }
    }

    /// Drops a closed connection that is no longer its node's current one and has nothing
    /// left travelling.
    pub(super) fn forget_if_done(&mut self, id: u64) {
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        let current = self.current_conn.get(&(conn.engine, conn.node)) == Some(&id);
        if conn.is_closed() && conn.in_transit == 0 && !current {
            self.conns.remove(&id);
        }
    }

    pub(super) fn on_request(&mut self, id: u64, frame: Bytes, trace: Option<usize>) {
        let (state, broker, idle_closed) = {
            let conn = self
                .conns
                .get_mut(&id)
                .expect("a connection with a request in transit");
            conn.in_transit -= 1;
            (conn.state, conn.broker, conn.idle_closed)
        };
        if state == ConnState::Open {
            self.note_activity(id);
        } else {
            self.forget_if_done(id);
        }
        if state == ConnState::ClosedByBroker && idle_closed {
            // Written before the client learnt of the broker's idle close: never read.
            self.quiet.counts.idle_crossings += 1;
        }
        let late_serve = self.chaos.as_ref().map_or(0.0, |c| c.late_serve);
        match state {
            ConnState::Open => {}
            // Read by the broker before it saw the close: served, the answer goes nowhere.
            ConnState::ClosedByClient if self.rng.chance(late_serve) => {
                if self.shared.cluster().is_broker_up(broker) {
                    self.serve(broker, frame.slice(4..), None, trace);
                    self.observe_logs();
                    self.quiet_on_late_serve();
                }
                return;
            }
            _ => return,
        }
        if !self.shared.cluster().is_broker_up(broker) {
            return;
        }
        let body = frame.slice(4..);
        let api = i16::from_be_bytes([body[0], body[1]]);
        if api == WireApiKey::Produce as i16 && self.quiet_hold_request(id, broker, &frame, trace) {
            return;
        }
        let (fault, extra) = self.pick_fault(broker, api, trace);
        self.quiet.counts.count(fault, self.chaos.as_ref());
        if let Some(t) = trace {
            let tr = &mut self.trace.as_mut().expect("tracing")[t];
            tr.served_at = Some(self.now);
            tr.fault = Some(fault);
        }
        match fault {
            Fault::DropRequest => {
                self.conns.get_mut(&id).expect("known").state = ConnState::Stalled;
                return;
            }
            Fault::ResetBeforeProcessing => {
                self.close_by_broker(id);
                return;
            }
            _ => {}
        }
        let answer = match fault {
            Fault::Inject(code) => self.serve(broker, body, Some(code), trace),
            Fault::AppendThenAnswer(error) => {
                let first = self.serve(broker, body.clone(), None, None);
                self.observe_logs();
                // A broker says DUPLICATE_SEQUENCE_NUMBER only about a batch it holds: if the
                // batch was not appended (or was refused), its real answer goes back.
                let version = i16::from_be_bytes([body[2], body[3]]);
                match first {
                    Some(answer)
                        if error == code::DUPLICATE_SEQUENCE_NUMBER
                            && !produce_answer_all_ok(&answer, version) =>
                    {
                        if let Some(t) = trace {
                            self.trace.as_mut().expect("tracing")[t].fault = Some(Fault::None);
                        }
                        Some(answer)
                    }
                    _ => self.serve(broker, body, Some(error), trace),
                }
            }
            _ => self.serve(broker, body, None, trace),
        };
        self.observe_logs();
        let Some(answer) = answer else {
            // The broker closes the connection (undecodable or unsupported request).
            self.close_by_broker(id);
            return;
        };
        let latency = self.latency() + extra;
        let (ready_at, body, then_close) = match fault {
            Fault::DropResponse { close: true } => {
                self.close_by_broker(id);
                return;
            }
            Fault::DropResponse { close: false } => {
                self.conns.get_mut(&id).expect("known").state = ConnState::Stalled;
                return;
            }
            Fault::ResetMidFrame => {
                let cut = self.rng.below(answer.len() as u64) as usize;
                (Some(self.now + latency), answer.slice(..cut), true)
            }
            Fault::Delay(extra) => (Some(self.now + latency + extra), answer, false),
            Fault::Hold => (None, answer, false),
            _ => (Some(self.now + latency), answer, false),
        };
        let conn = self.conns.get_mut(&id).expect("known");
        let was_empty = conn.answers.is_empty();
        conn.answers.push_back(PendingAnswer {
            ready_at,
            body,
            trace,
            then_close,
        });
        if was_empty {
            if let Some(at) = ready_at {
                self.schedule(at, Event::Deliver(id));
            }
        }
    }

    /// Serves one request body through the TCP face's parse/dispatch/encode path. Returns the
    /// answer body (no length prefix), or `None` when the broker closes the connection.
    pub(super) fn serve(
        &mut self,
        broker: i32,
        body: Bytes,
        injected: Option<i16>,
        trace: Option<usize>,
    ) -> Option<Bytes> {
        let now_ms = EPOCH_MS + (self.now / MS) as i64;
        let parsed = match parse_request(&self.shared, broker, body) {
            Ok(parsed) => parsed,
            Err(Early::Respond(mut out)) => {
                finish_frame(&mut out);
                return Some(out.freeze().slice(4..));
            }
            Err(Early::Close) => return None,
        };
        let api = parsed.api;
        let version = parsed.version;
        let (reply, mut out) = answer_request(
            &self.shared,
            broker,
            Listener::Primary,
            &self.closed_flag,
            parsed,
            injected,
            now_ms,
        );
        match reply {
            Reply::Close => None,
            Reply::NoResponse => None,
            Reply::Respond => {
                finish_frame(&mut out);
                let answer = out.freeze().slice(4..);
                if api == WireApiKey::Produce && (self.watch_answers || trace.is_some()) {
                    self.watch_produce_answer(&answer, version, trace);
                }
                Some(answer)
            }
        }
    }

    pub(super) fn watch_produce_answer(
        &mut self,
        answer: &Bytes,
        version: i16,
        trace: Option<usize>,
    ) {
        let mut buf = answer.clone();
        ResponseHeader::decode(
            &mut buf,
            WireApiKey::Produce.response_header_version(version),
        )
        .expect("our own answer decodes");
        let response = ProduceResponse::decode(&mut buf, version).expect("our own answer decodes");
        for topic in &response.responses {
            for p in &topic.partition_responses {
                if p.error_code == code::DUPLICATE_SEQUENCE_NUMBER {
                    let tp = TopicPartition::new(topic.name.0.as_str(), p.index);
                    if let Some(&i) = self.partition_index.get(&tp) {
                        self.checker.on_duplicate_sequence_answer(i);
                    }
                }
            }
        }
        let _ = trace;
    }

    pub(super) fn deliver(&mut self, id: u64) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        // A stalled connection still delivers the answers sent before the path died.
        if !matches!(conn.state, ConnState::Open | ConnState::Stalled) {
            conn.answers.clear();
            return;
        }
        let Some(front) = conn.answers.front() else {
            return;
        };
        match front.ready_at {
            Some(t) if t <= self.now => {}
            Some(t) => {
                self.schedule(t, Event::Deliver(id));
                return;
            }
            None => return,
        }
        let answer = conn.answers.pop_front().expect("front checked");
        let next_at = conn.answers.front().and_then(|a| a.ready_at);
        let (shard, node, generation) = (conn.engine, conn.node, conn.generation);
        if let Some(t) = answer.trace {
            self.record_answer(t, &answer.body);
        }
        self.note_activity(id);
        self.shards[shard]
            .engine
            .on_frame(self.now, node, generation, answer.body);
        if answer.then_close {
            self.close_by_broker(id);
        } else if let Some(t) = next_at {
            self.schedule(t.max(self.now), Event::Deliver(id));
        }
        self.drive(shard);
    }

    pub(super) fn pick_fault(
        &mut self,
        broker: i32,
        api: i16,
        trace: Option<usize>,
    ) -> (Fault, Micros) {
        if !self.rules.is_empty() {
            let batches: &[TracedBatch] = match (trace, self.trace.as_ref()) {
                (Some(t), Some(all)) => &all[t].batches,
                _ => &[],
            };
            let found = self.rules.iter_mut().position(|rule| {
                let m = &rule.matcher;
                let hit = m.broker.is_none_or(|b| b == broker)
                    && m.api.is_none_or(|a| a as i16 == api)
                    && m.partition.as_ref().is_none_or(|tp| {
                        batches.iter().any(|b| {
                            &b.tp == tp && m.base_sequence.is_none_or(|s| s == b.base_sequence)
                        })
                    });
                if hit && m.skip > 0 {
                    rule.matcher.skip -= 1;
                    return false;
                }
                hit
            });
            if let Some(i) = found {
                let rule = &mut self.rules[i];
                let fault = rule.fault;
                let delay = rule.delay;
                let hook = rule.before.take();
                rule.times -= 1;
                if rule.times == 0 {
                    self.rules.remove(i);
                }
                if let Some(hook) = hook {
                    hook(&mut self.shared.cluster());
                }
                return (fault, delay);
            }
        }
        match &self.chaos {
            Some(chaos) => {
                let chaos = chaos.clone();
                (chaos.pick(&mut self.rng, api), 0)
            }
            None => (Fault::None, 0),
        }
    }

    // ----------------------------------------------------------------------------------------
    // Tracing
    // ----------------------------------------------------------------------------------------

    pub(super) fn trace_request(
        &mut self,
        shard: usize,
        conn: u64,
        frame: &Bytes,
    ) -> Option<usize> {
        let trace = self.trace.as_mut()?;
        let mut body = frame.slice(4..);
        let api = i16::from_be_bytes([body[0], body[1]]);
        if api != WireApiKey::Produce as i16 {
            return None;
        }
        let version = i16::from_be_bytes([body[2], body[3]]);
        RequestHeader::decode(
            &mut body,
            WireApiKey::Produce.request_header_version(version),
        )
        .expect("the engine's request header decodes");
        let request =
            ProduceRequest::decode(&mut body, version).expect("the engine's request decodes");
        let mut batches = Vec::new();
        for topic in &request.topic_data {
            for p in &topic.partition_data {
                let records = p.records.as_ref().expect("a batch");
                let header = BatchHeader::parse(records).expect("the engine's batch parses");
                let mut first = None;
                super::super::checker::for_each_record_value(records, |_, value| {
                    if first.is_none() {
                        first = value.and_then(super::super::checker::record_id_of);
                    }
                });
                batches.push(TracedBatch {
                    tp: TopicPartition::new(topic.name.0.as_str(), p.index),
                    producer: ProducerIdAndEpoch::new(header.producer_id, header.producer_epoch),
                    base_sequence: header.base_sequence,
                    record_count: header.record_count,
                    first_record: first.expect("a record"),
                });
            }
        }
        let broker = self.conns[&conn].broker;
        trace.push(ProduceTrace {
            engine: shard,
            broker,
            connection: conn,
            version,
            timeout_ms: request.timeout_ms,
            written_at: self.now,
            served_at: None,
            fault: None,
            answered_at: None,
            batches,
            answers: Vec::new(),
        });
        Some(trace.len() - 1)
    }

    pub(super) fn record_answer(&mut self, t: usize, body: &Bytes) {
        let now = self.now;
        let trace = &mut self.trace.as_mut().expect("tracing")[t];
        trace.answered_at = Some(now);
        let mut buf = body.clone();
        if ResponseHeader::decode(
            &mut buf,
            WireApiKey::Produce.response_header_version(trace.version),
        )
        .is_err()
        {
            return;
        }
        let Ok(response) = ProduceResponse::decode(&mut buf, trace.version) else {
            return;
        };
        let mut answers = Vec::new();
        for batch in &trace.batches {
            let answer = response
                .responses
                .iter()
                .filter(|t| t.name.0.as_str() == &*batch.tp.topic)
                .flat_map(|t| t.partition_responses.iter())
                .find(|p| p.index == batch.tp.partition)
                .map_or((code::NETWORK_EXCEPTION, -1), |p| {
                    (p.error_code, p.base_offset)
                });
            answers.push(answer);
        }
        trace.answers = answers;
    }
}

/// Whether every partition of a Produce answer body (no length prefix) is NONE.
fn produce_answer_all_ok(answer: &Bytes, version: i16) -> bool {
    let mut buf = answer.clone();
    if ResponseHeader::decode(
        &mut buf,
        WireApiKey::Produce.response_header_version(version),
    )
    .is_err()
    {
        return false;
    }
    ProduceResponse::decode(&mut buf, version).is_ok_and(|r| {
        r.responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .all(|p| p.error_code == code::NONE)
    })
}
