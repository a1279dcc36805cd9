//! The event loop of the simulated world: scheduling, running until a time or a condition,
//! handling one event, driving an engine and carrying out the actions it emits, and carrying a
//! new producer identity to every engine.

use super::*;

impl Sim {
    pub(super) fn schedule(&mut self, at: Micros, event: Event) {
        debug_assert!(at >= self.now);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.events.push(Entry { at, seq, event });
    }

    pub(super) fn latency(&mut self) -> Micros {
        let (lo, hi) = self.setup.latency;
        self.rng.range(lo, hi)
    }

    /// Time of the next event, if any.
    pub fn next_event_at(&self) -> Option<Micros> {
        self.events.peek().map(|e| e.at)
    }

    /// Handles the next event; false if there is none.
    pub fn step(&mut self) -> bool {
        let Some(entry) = self.events.pop() else {
            return false;
        };
        debug_assert!(entry.at >= self.now);
        self.now = entry.at;
        self.events_handled += 1;
        self.maybe_abort_timed_out_transactions();
        self.handle(entry.event);
        true
    }

    /// Handles every event due up to `until`, then sets the clock to `until`.
    pub fn run_until(&mut self, until: Micros) {
        while self.next_event_at().is_some_and(|t| t <= until) {
            self.step();
        }
        self.now = self.now.max(until);
    }

    pub fn run_for(&mut self, duration: Micros) {
        self.run_until(self.now + duration);
    }

    /// Runs until `done` holds (checked after every event) or `limit` passes; true if it held.
    pub fn run_while_not(&mut self, limit: Micros, mut done: impl FnMut(&Sim) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            match self.next_event_at() {
                Some(t) if t <= limit => {
                    self.step();
                }
                _ => {
                    self.now = self.now.max(limit);
                    return done(self);
                }
            }
        }
    }

    /// Runs until every send resolved and every engine is idle, at most until `limit`.
    pub fn run_until_settled(&mut self, limit: Micros) -> bool {
        self.run_while_not(limit, |sim| sim.all_resolved() && sim.all_idle())
    }

    pub(super) fn handle(&mut self, event: Event) {
        match event {
            Event::Wake(shard) => {
                if self.shards[shard].wake_at == Some(self.now) {
                    self.shards[shard].wake_at = None;
                    self.drive(shard);
                }
            }
            Event::Connected(id) => self.on_connected(id),
            Event::ConnectFailed(id) => {
                let Some(conn) = self.conns.get_mut(&id) else {
                    return;
                };
                if conn.state == ConnState::Connecting {
                    conn.state = ConnState::ClosedByBroker;
                    let (shard, node, generation) = (conn.engine, conn.node, conn.generation);
                    self.shards[shard]
                        .engine
                        .on_disconnected(self.now, node, generation);
                    self.drive(shard);
                }
            }
            Event::Request { conn, frame, trace } => self.on_request(conn, frame, trace),
            Event::Deliver(id) => self.deliver(id),
            Event::Closed {
                conn,
                shard,
                node,
                generation,
            } => {
                self.shards[shard]
                    .engine
                    .on_disconnected(self.now, node, generation);
                self.drive(shard);
                self.forget_if_done(conn);
            }
            Event::Identity(shard) => {
                self.adopt_identity(shard);
                self.drive(shard);
            }
            Event::IdleCheck(id) => self.idle_check(id),
            Event::Drive(shard) => self.drive(shard),
            Event::Script(f) => f(self),
        }
    }

    /// Polls the shard's engine until it has nothing more to do now, carries out its actions,
    /// then checks everything the engine could have changed.
    pub fn drive(&mut self, shard: usize) {
        let mut rounds = 0;
        loop {
            self.shards[shard].engine.poll(self.now);
            if !self.shards[shard].engine.has_actions()
                && !self.shards[shard].engine.has_txn_actions()
            {
                break;
            }
            rounds += 1;
            assert!(
                rounds < 1000,
                "shard {shard}: the engine keeps emitting actions at {} us",
                self.now
            );
            let actions: Vec<Action> = self.shards[shard].engine.take_actions().collect();
            for action in actions {
                self.execute(shard, action);
            }
            let txn_actions = self.shards[shard].engine.take_txn_actions();
            for action in txn_actions {
                self.route_txn(shard, action);
            }
        }
        self.after_engine_event(shard);
        let next = self.shards[shard].engine.next_wakeup(self.now);
        if let Some(t) = next {
            let s = &mut self.shards[shard];
            if s.wake_at.is_none_or(|w| t < w) {
                s.wake_at = Some(t);
                self.schedule(t, Event::Wake(shard));
            }
        }
    }

    pub(super) fn execute(&mut self, shard: usize, action: Action) {
        match action {
            Action::Connect {
                node,
                generation,
                address,
            } => self.connect(shard, node, generation, &address),
            Action::Write {
                node,
                generation,
                frame,
            } => self.write(shard, node, generation, frame.to_bytes()),
            Action::Disconnect { node, generation } => {
                if let Some(&id) = self.current_conn.get(&(shard, node)) {
                    let conn = self.conns.get_mut(&id).expect("known");
                    if conn.generation == generation && !conn.is_closed() {
                        conn.state = ConnState::ClosedByClient;
                        conn.answers.clear();
                        self.forget_if_done(id);
                    }
                }
            }
            Action::TopicMetadata { .. } => {}
            Action::ProducerIdAssigned(identity) => {
                if self.coordinator.install(identity) {
                    self.note_identity();
                    self.propagate_identity(shard);
                }
            }
            Action::RequestEpochBump { observed } => {
                if self.coordinator.request_bump(observed).is_some() {
                    self.note_identity();
                    self.propagate_identity(shard);
                }
            }
        }
    }

    pub(super) fn note_identity(&mut self) {
        let current = self.coordinator.current();
        if current.is_valid() {
            let max = self.max_epoch.entry(current.producer_id).or_insert(-1);
            assert!(
                current.epoch > *max,
                "producer {} epoch went from {} to {}",
                current.producer_id,
                max,
                current.epoch
            );
            *max = current.epoch;
        }
    }

    pub(super) fn propagate_identity(&mut self, origin: usize) {
        self.adopt_identity(origin);
        for shard in 0..self.shards.len() {
            if shard != origin {
                let (lo, hi) = self.setup.identity_delay;
                let delay = self.rng.range(lo, hi);
                self.schedule(self.now + delay, Event::Identity(shard));
            }
        }
    }

    pub(super) fn adopt_identity(&mut self, shard: usize) {
        let current = self.coordinator.current();
        let s = &mut self.shards[shard];
        if s.engine.identity() != current {
            let last = s.last_identity;
            if last.is_valid() && current.producer_id == last.producer_id {
                assert!(
                    current.epoch > last.epoch,
                    "shard {shard}: epoch of producer {} went from {} to {}",
                    last.producer_id,
                    last.epoch,
                    current.epoch
                );
            }
            s.engine.on_identity(current);
            if current.is_valid() {
                s.last_identity = current;
            }
        }
    }
}
