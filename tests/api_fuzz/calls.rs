//! The fuzzer's calls: what each app thread, tokio task and delivery callback does, and the
//! ledger of what it sent.

use super::*;

impl Ledger {
    pub(crate) fn record(&self, rng: &mut Rng, partitions: i32) -> (u64, ProducerRecord) {
        self.record_to(&self.topic, rng, partitions)
    }

    fn record_to(&self, topic: &str, rng: &mut Rng, partitions: i32) -> (u64, ProducerRecord) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend_from_slice(&self.seed.to_be_bytes());
        let len = if rng.chance(3) {
            rng.range(2_000, 40_000)
        } else {
            rng.range(16, 200)
        };
        payload.resize(len as usize, b'.');
        let mut record = ProducerRecord::new(topic, Bytes::from(payload));
        // A refused record makes a transaction abortable: rarer in transactional seeds, so
        // that some transactions commit.
        let invalid = if self.transactional {
            rng.chance(1) && rng.chance(30)
        } else {
            rng.chance(5)
        };
        match rng.below(100) {
            _ if invalid => record = record.with_partition(partitions),
            0..=84 => record = record.with_partition(rng.below(partitions as u64) as i32),
            85..=94 => record = record.with_key(Bytes::from(rng.below(50).to_be_bytes().to_vec())),
            _ => {}
        }
        (id, record)
    }

    /// Notes record `id` as sent (before the call that sends it), and its transaction.
    pub(crate) fn sending(
        &self,
        id: u64,
        how: &'static str,
        lane: Option<u32>,
        partition: Option<i32>,
    ) -> u64 {
        let member = if self.transactional {
            Member::Unknown
        } else {
            Member::NotTransactional
        };
        self.sent.lock().unwrap().insert(
            id,
            Sent {
                how,
                lane,
                partition,
                member,
            },
        );
        self.gen.load(Ordering::SeqCst)
    }

    /// After the call: the record belongs to transaction n if it was queued while n was open
    /// and before its end was called (a commit's barrier comes behind every record queued).
    pub(crate) fn sent(&self, id: u64, gen_before: u64, lane: Option<u32>) {
        let gen = self.gen.load(Ordering::SeqCst);
        if self.transactional && lane.is_some() && gen == gen_before && gen % 2 == 1 {
            self.sent
                .lock()
                .unwrap()
                .get_mut(&id)
                .expect("sending")
                .member = Member::Txn((gen - 1) / 2);
        }
    }

    pub(crate) fn future(&self, id: u64, future: DeliveryFuture) {
        self.futures.lock().unwrap().push((id, future));
    }

    pub(crate) fn outcome(&self, id: u64, outcome: Outcome) {
        self.outcomes.lock().unwrap().insert(id, outcome);
        self.outcome_added.notify_all();
    }
}

impl Ctx {
    pub(crate) fn send(self: &Arc<Self>, p: &Producer, rng: &mut Rng, lane: Option<u32>) {
        let (id, record) = self.ledger.record(rng, self.plan.partitions);
        let gen = self.ledger.sending(id, "send", lane, record.partition);
        let mut guard = self
            .watch
            .enter("send", self.bound_on_shard(self.plan.max_block));
        guard.woken_by_close = lane.is_some();
        let future = p.send(record);
        drop(guard);
        self.ledger.sent(id, gen, lane);
        self.ledger.future(id, future);
    }

    pub(crate) fn try_send(self: &Arc<Self>, p: &Producer, rng: &mut Rng, lane: Option<u32>) {
        let (id, record) = self.ledger.record(rng, self.plan.partitions);
        let gen = self.ledger.sending(id, "try_send", lane, record.partition);
        let result = self
            .watch
            .call("try_send", Duration::ZERO, || p.try_send(record));
        self.ledger.sent(id, gen, lane);
        match result {
            Ok(future) => self.ledger.future(id, future),
            Err(_) => self.ledger.outcome(id, Outcome::NotQueued),
        }
    }

    pub(crate) fn send_with_callback(self: &Arc<Self>, p: &Producer, rng: &mut Rng, lane: u32) {
        let (id, record) = self.ledger.record(rng, self.plan.partitions);
        let gen = self
            .ledger
            .sending(id, "send_with_callback", Some(lane), record.partition);
        let nested = self.draw_nested(rng);
        let clone = (self.plan.callback_calls && rng.chance(50)).then(|| p.clone());
        let mut nested_rng = rng.fork();
        let ctx = self.clone();
        self.ledger.callbacks.lock().unwrap().insert(id);
        let mut guard = self.watch.enter("send_with_callback", self.plan.max_block);
        guard.woken_by_close = true;
        let (key, caller) = (guard.key, std::thread::current().id());
        p.send_with_callback(record, move |result| {
            let run = || {
                ctx.ledger.outcome(id, Outcome::Result(result));
                if let Some(clone) = clone {
                    let outer = IN_CALLBACK.replace(true);
                    ctx.nested(&clone, nested, &mut nested_rng);
                    let bound = ctx.bound_on_shard(ctx.plan.delivery_timeout);
                    ctx.watch
                        .call("drop of a producer handle", bound, || drop(clone));
                    IN_CALLBACK.set(outer);
                }
            };
            // Run on the calling thread (the record failed before it was queued): the
            // callback's time is its own, not `send_with_callback`'s.
            if std::thread::current().id() == caller {
                ctx.watch.excluding(key, run);
            } else {
                run();
            }
        });
        drop(guard);
        self.ledger.sent(id, gen, Some(lane));
    }

    /// A slow-start seed's record to a second topic, sent while the first topic's records
    /// fill `buffer.memory` (their answers held): its metadata comes after about 80% of
    /// `max.block.ms` (each held Metadata request times out at `request.timeout.ms` and is
    /// asked again), and then it needs room. `send` still returns within `max.block.ms`.
    fn send_to_second_topic(self: &Arc<Self>, p: &Producer, rng: &mut Rng) {
        let faults = self.cluster.faults();
        let held = (self.plan.max_block.as_secs_f64() * 0.8
            / self.plan.request_timeout.as_secs_f64())
        .floor()
        .max(1.0) as usize;
        faults.delay_response(ANY_BROKER, ApiKey::Produce, 24, self.plan.max_block * 2);
        faults.delay_response(ANY_BROKER, ApiKey::Metadata, held, self.plan.max_block * 2);
        let topic = check::second_topic(self.plan.seed);
        let (id, record) = self.ledger.record_to(&topic, rng, 1);
        let record = record.with_partition(0);
        self.ledger
            .sending(id, "send to a second topic", None, Some(0));
        let future = self
            .watch
            .call("send to a second topic", self.plan.max_block, || {
                p.send(record)
            });
        self.ledger.future(id, future);
    }

    fn draw_nested(&self, rng: &mut Rng) -> Nested {
        match rng.below(100) {
            0..=19 => Nested::Send,
            20..=34 => Nested::TrySend,
            35..=44 => Nested::FlushTimeout(rng.millis(0, 100)),
            45..=49 => Nested::Purge,
            50..=59 => Nested::Metrics,
            60..=62 => Nested::Flush,
            63..=64 => Nested::CloseZero,
            65..=69 if self.plan.transactional => Nested::Transaction(rng.below(4)),
            _ => Nested::Nothing,
        }
    }

    /// On a shard thread no call may wait for a shard: it returns at once.
    fn bound_on_shard(&self, bound: Duration) -> Duration {
        if on_shard_thread() {
            Duration::ZERO
        } else {
            bound
        }
    }

    /// A call made by a delivery callback, on a clone (it also runs on the app thread when
    /// the record failed before it was queued).
    fn nested(self: &Arc<Self>, p: &Producer, nested: Nested, rng: &mut Rng) {
        let zero = |bound: Duration| self.bound_on_shard(bound);
        match nested {
            Nested::Nothing => {}
            Nested::Send => self.send(p, rng, None),
            Nested::TrySend => self.try_send(p, rng, None),
            Nested::FlushTimeout(t) => {
                self.watch
                    .call(&format!("flush_timeout({t:?})"), t, || p.flush_timeout(t));
            }
            Nested::Flush => self
                .watch
                .call("flush", zero(self.plan.delivery_timeout), || p.flush()),
            Nested::Purge => self
                .watch
                .call("purge", zero(Duration::from_secs(1)), || p.purge()),
            Nested::Metrics => {
                self.watch
                    .call("metrics", zero(METRICS_WAIT), || p.metrics());
            }
            Nested::CloseZero => self.close(p, Duration::ZERO),
            Nested::Transaction(which) => {
                let t = Duration::from_millis(100);
                let (name, result) = match which {
                    0 => (
                        "init_transactions(100ms)",
                        self.watch.call("init_transactions(100ms)", zero(t), || {
                            p.init_transactions(t)
                        }),
                    ),
                    1 => (
                        "begin_transaction",
                        self.watch
                            .call("begin_transaction", zero(self.plan.max_block), || {
                                p.begin_transaction()
                            }),
                    ),
                    2 => (
                        "commit_transaction(100ms)",
                        self.watch.call("commit_transaction(100ms)", zero(t), || {
                            p.commit_transaction(t)
                        }),
                    ),
                    _ => (
                        "abort_transaction(100ms)",
                        self.watch.call("abort_transaction(100ms)", zero(t), || {
                            p.abort_transaction(t)
                        }),
                    ),
                };
                if result.is_ok() {
                    self.ledger.fates_unreliable.store(true, Ordering::SeqCst);
                    if on_shard_thread() {
                        self.watch.fail(format!("`{name}` in a delivery callback on {} returned Ok: a transactional call on a shard thread must fail at once", thread_name()));
                    }
                }
            }
        }
    }

    /// `close`, then (on an app thread) every shard stopped: a `close` returns only once the
    /// producer is closed, also when another `close` is under way.
    pub(crate) fn close(&self, p: &Producer, timeout: Duration) {
        let bound = self.bound_on_shard(timeout);
        self.watch
            .call(&format!("close({timeout:?})"), bound, || p.close(timeout));
        if !on_shard_thread() {
            self.watch.closed();
            let stats = p.runtime_watch().stats();
            if stats.shards_running != 0 {
                let others: Vec<String> = self
                    .watch
                    .state
                    .lock()
                    .unwrap()
                    .running
                    .values()
                    .filter(|r| r.what.contains("`close(") || r.what.contains("`drop of"))
                    .map(|r| format!("{} (running for {:?})", r.what, r.started.elapsed()))
                    .collect();
                self.watch.fail(format!(
                    "`close({timeout:?})` on {} returned with {} shards still running; closes under way: {others:?}",
                    thread_name(),
                    stats.shards_running
                ));
            }
        }
    }

    /// Ends the open transaction (the controller's): commit or abort, handled as the README
    /// says (an abortable error: abort; a timed-out call: the same call again; a pending
    /// call: that call). Its fate is noted when a commit or abort returned Ok.
    fn end_transaction(&self, p: &Producer, rng: &mut Rng, commit: bool) {
        let gen = self.ledger.gen.load(Ordering::SeqCst);
        if gen % 2 == 0 {
            return;
        }
        let txn = (gen - 1) / 2;
        self.ledger.gen.fetch_add(1, Ordering::SeqCst);
        let mut commit = commit;
        for _ in 0..4 {
            let t = rng.millis(50, 2000);
            let name = if commit {
                "commit_transaction"
            } else {
                "abort_transaction"
            };
            let result = self.watch.call(&format!("{name}({t:?})"), t, || {
                if commit {
                    p.commit_transaction(t)
                } else {
                    p.abort_transaction(t)
                }
            });
            if verbose() {
                eprintln!("{name}: {result:?}");
            }
            match result {
                Ok(()) => {
                    let fate = if commit {
                        Fate::Committed
                    } else {
                        Fate::Aborted
                    };
                    self.ledger.fates.lock().unwrap().insert(txn, fate);
                    return;
                }
                Err(TransactionError::Timeout { .. }) => {}
                Err(TransactionError::PendingOperation {
                    pending: "commit_transaction",
                    ..
                }) => commit = true,
                Err(TransactionError::PendingOperation {
                    pending: "abort_transaction",
                    ..
                }) => commit = false,
                Err(e) if e.is_abortable() => commit = false,
                Err(_) => return,
            }
        }
    }

    fn begin_transaction(&self, p: &Producer) {
        if self.ledger.gen.load(Ordering::SeqCst) % 2 == 1 {
            return;
        }
        let r = self
            .watch
            .call("begin_transaction", self.plan.max_block, || {
                p.begin_transaction()
            });
        if verbose() {
            eprintln!("begin: {r:?}");
        }
        if r.is_ok() {
            self.ledger.gen.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn init_transactions(&self, p: &Producer, rng: &mut Rng) {
        for _ in 0..3 {
            let t = rng.millis(500, 3000);
            let result = self
                .watch
                .call(&format!("init_transactions({t:?})"), t, || {
                    p.init_transactions(t)
                });
            if verbose() {
                eprintln!("init: {result:?}");
            }
            if !matches!(result, Err(TransactionError::Timeout { .. })) {
                return;
            }
        }
    }

    /// One app thread's sequence of calls. Thread 0 of a transactional seed also runs the
    /// transactions.
    pub(crate) fn app_thread(self: &Arc<Self>, mut p: Producer, mut rng: Rng, lane: u32) {
        let controller = self.plan.transactional && lane == 0;
        if controller {
            self.init_transactions(&p, &mut rng);
            self.begin_transaction(&p);
            *self.started.0.lock().unwrap() = true;
            self.started.1.notify_all();
        } else {
            self.wait_for_first_transaction();
        }
        let early_close = self
            .plan
            .early_close
            .filter(|_| lane as usize == self.plan.threads - 1);
        for step in 0..self.plan.ops {
            let late = step * 5 >= self.plan.ops * 4;
            if self.plan.slow_start && lane == 0 && step == self.plan.ops / 3 {
                self.send_to_second_topic(&p, &mut rng);
                continue;
            }
            if early_close == Some(step) {
                let t = rng.millis(0, 200);
                self.close(&p, t);
                continue;
            }
            match rng.below(100) {
                0..=29 => self.send(&p, &mut rng, Some(lane)),
                30..=44 => self.try_send(&p, &mut rng, Some(lane)),
                45..=64 => self.send_with_callback(&p, &mut rng, lane),
                65..=69 => {
                    let t = rng.millis(0, 300);
                    self.watch
                        .call(&format!("flush_timeout({t:?})"), t, || p.flush_timeout(t));
                }
                70 => self
                    .watch
                    .call("flush", self.plan.delivery_timeout, || p.flush()),
                71..=73 => self
                    .watch
                    .call("purge", Duration::from_secs(1), || p.purge()),
                74..=76 => {
                    self.watch.call("metrics", METRICS_WAIT, || p.metrics());
                }
                77..=80 => {
                    let fresh = p.clone();
                    let old = std::mem::replace(&mut p, fresh);
                    self.watch.call(
                        "drop of a producer handle",
                        self.plan.delivery_timeout,
                        || drop(old),
                    );
                }
                81..=85 => add_fault(&self.cluster, &mut rng, self.plan.transactional),
                86..=87 => {
                    let _ = p.buffered_bytes();
                }
                88..=95 if controller => {
                    let commit = rng.chance(75);
                    self.end_transaction(&p, &mut rng, commit);
                    self.begin_transaction(&p);
                }
                96..=99 if late && rng.chance(25) => {
                    let t = rng.millis(0, 500);
                    self.close(&p, t);
                }
                _ => self.try_send(&p, &mut rng, Some(lane)),
            }
        }
        if controller {
            self.end_transaction(&p, &mut rng, true);
        }
        self.watch.call(
            "drop of a producer handle",
            self.plan.delivery_timeout,
            || drop(p),
        );
    }

    /// A transactional seed's threads start once its first transaction is begun (or failed
    /// to be); the controller's calls are watched, so this waits at most for their bounds.
    fn wait_for_first_transaction(&self) {
        if self.plan.transactional {
            let mut started = self.started.0.lock().unwrap();
            while !*started {
                started = self.started.1.wait(started).unwrap();
            }
        }
    }

    /// Tokio tasks awaiting `send_async`, each its own lane.
    pub(crate) fn async_thread(self: &Arc<Self>, p: Producer, mut rng: Rng) {
        self.wait_for_first_transaction();
        let runtime = if self.plan.multi_thread_runtime {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        }
        .expect("tokio runtime");
        let tasks: Vec<_> = (0..self.plan.async_tasks)
            .map(|task| {
                let (ctx, p, mut rng) = (self.clone(), p.clone(), rng.fork());
                let lane = 100 + task as u32;
                async move {
                    for _ in 0..rng.range(5, 30) {
                        let (id, record) = ctx.ledger.record(&mut rng, ctx.plan.partitions);
                        let gen =
                            ctx.ledger
                                .sending(id, "send_async", Some(lane), record.partition);
                        let mut guard = ctx.watch.enter("send_async", ctx.plan.max_block);
                        guard.woken_by_close = true;
                        let future = p.send_async(record).await;
                        drop(guard);
                        ctx.ledger.sent(id, gen, Some(lane));
                        ctx.ledger.future(id, future);
                        if rng.chance(30) {
                            tokio::task::yield_now().await;
                        }
                    }
                    ctx.watch.call(
                        "drop of a producer handle",
                        ctx.plan.delivery_timeout,
                        || drop(p),
                    );
                }
            })
            .collect();
        drop(p);
        runtime.block_on(async {
            let handles: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
            for handle in handles {
                if let Err(e) = handle.await {
                    self.watch.fail(format!("a tokio task panicked: {e}"));
                }
            }
        });
    }
}
