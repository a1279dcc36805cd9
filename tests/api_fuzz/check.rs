//! One seed: its threads run under the watchdog, then its outcomes are checked against the
//! log read back with librdkafka.

use super::*;

pub(crate) fn spawn(
    ctx: &Arc<Ctx>,
    name: String,
    f: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let ctx = ctx.clone();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            if let Err(panic) = result {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                ctx.watch
                    .fail(format!("{name} panicked: {}", what.unwrap_or_default()));
            }
            ctx.watch.worker_done();
        })
        .expect("spawn")
}

/// Runs one seed; `Err` describes every broken promise.
pub(crate) fn run_seed(
    cluster: &Arc<ReferenceCluster>,
    seed: u64,
    callback_calls: bool,
) -> Result<String, String> {
    let started = Instant::now();
    let plan = Plan::draw(seed, callback_calls);
    let topic = format!("fuzz-{seed}");
    let leaders: Vec<i32> = (0..plan.partitions)
        .map(|p| (p + seed as i32).rem_euclid(3) + 1)
        .collect();
    cluster.faults().clear();
    cluster.create_topic(&topic, &leaders);
    if plan.slow_start {
        cluster.create_topic(&second_topic(seed), &[1]);
    }
    let mut rng = Rng::new(seed ^ 0x5eed);
    for _ in 0..rng.range(0, 3) {
        add_fault(cluster, &mut rng, plan.transactional);
    }
    if plan.early_close.is_some() {
        // The topic's metadata comes late: the first sends wait for it while `close` runs.
        let delay = rng.millis(1500, 2500);
        cluster
            .faults()
            .delay_response(ANY_BROKER, ApiKey::Metadata, 1, delay);
    }
    if verbose() {
        println!("seed {seed}: {plan:?}");
    }
    let producer = plan.producer(cluster);
    let runtime = producer.runtime_watch();
    let ctx = Arc::new(Ctx {
        ledger: Ledger {
            seed,
            topic: topic.clone(),
            transactional: plan.transactional,
            next_id: AtomicU64::new(0),
            sent: Default::default(),
            futures: Default::default(),
            outcomes: Default::default(),
            callbacks: Default::default(),
            outcome_added: Condvar::new(),
            gen: AtomicU64::new(0),
            fates: Default::default(),
            fates_unreliable: AtomicBool::new(false),
        },
        watch: Watch::default(),
        cluster: cluster.clone(),
        started: (Mutex::new(false), Condvar::new()),
        plan,
    });
    let plan = &ctx.plan;
    let workers = plan.threads + usize::from(plan.async_tasks > 0) + 1;
    ctx.watch.state.lock().unwrap().workers = workers;
    let mut threads = Vec::new();
    for lane in 0..plan.threads {
        let (ctx2, p, rng) = (ctx.clone(), producer.clone(), rng.fork());
        threads.push(spawn(&ctx, format!("fuzz-app-{lane}"), move || {
            ctx2.app_thread(p, rng, lane as u32)
        }));
    }
    if plan.async_tasks > 0 {
        let (ctx2, p, rng) = (ctx.clone(), producer.clone(), rng.fork());
        threads.push(spawn(&ctx, "fuzz-tokio".into(), move || {
            ctx2.async_thread(p, rng)
        }));
    }
    // The test's own handle: dropped at once, or the final close once the app threads are done.
    let ctx2 = ctx.clone();
    let close_timeout = rng.millis(100, 3000);
    spawn(&ctx, "fuzz-finisher".into(), move || {
        let bound = ctx2.plan.delivery_timeout;
        if ctx2.plan.handle_dropped_first {
            ctx2.watch
                .call("drop of a producer handle", bound, || drop(producer));
            return;
        }
        for thread in threads {
            let _ = thread.join();
        }
        ctx2.close(&producer, close_timeout);
        let bytes = producer.buffered_bytes();
        if bytes != 0 {
            ctx2.watch
                .fail(format!("buffered_bytes() is {bytes} after the final close"));
        }
        ctx2.watch
            .call("drop of a producer handle", bound, || drop(producer));
    });
    // Names the seed, its plan and how to replay it, with the failures the calls noted so far.
    let fail = |what: String| {
        let noted = ctx.watch.state.lock().unwrap().failures.clone();
        let what = [what]
            .into_iter()
            .chain(noted)
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join("\n  ");
        Err(format!("seed {seed}: {what}\n  plan: {:?}\n  replay: KACRAB_FUZZ_SEED={seed} cargo test --features testkit --test api_fuzz -- --nocapture", ctx.plan))
    };
    let watch = &ctx.watch;
    if let Err(e) = watch.wait(Duration::from_secs(300), "the app threads", |s| {
        s.workers == 0
    }) {
        return fail(e);
    }
    if let Err(e) = watch.wait(
        plan.delivery_timeout + HANG,
        "the calls in callbacks",
        |s| s.running.is_empty(),
    ) {
        return fail(e);
    }
    // Every shard stops once the producer is closed and its last handle gone.
    if !runtime.wait_until(plan.delivery_timeout + HANG, |s| s.shards_running == 0) {
        let running: Vec<String> = watch
            .state
            .lock()
            .unwrap()
            .running
            .values()
            .map(|r| {
                format!(
                    "{} did not return within its bound {:?} + {HANG:?} (running for {:?})",
                    r.what,
                    r.bound,
                    r.started.elapsed()
                )
            })
            .collect();
        return fail(format!(
            "{}shard threads still running {:?} after the app threads were done",
            running.iter().map(|r| format!("{r}; ")).collect::<String>(),
            plan.delivery_timeout + HANG
        ));
    }
    let mut failures = Vec::new();
    // Every future and callback resolves.
    let deadline = Instant::now() + plan.delivery_timeout + HANG;
    let futures = std::mem::take(&mut *ctx.ledger.futures.lock().unwrap());
    for (id, future) in futures {
        match future.wait_timeout(deadline.saturating_duration_since(Instant::now())) {
            Some(result) => ctx.ledger.outcome(id, Outcome::Result(result)),
            None => failures.push(format!(
                "the future of record {id} did not resolve after the producer closed"
            )),
        }
    }
    let expected = std::mem::take(&mut *ctx.ledger.callbacks.lock().unwrap());
    let mut outcomes = ctx.ledger.outcomes.lock().unwrap();
    while expected.iter().any(|id| !outcomes.contains_key(id)) && Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        outcomes = ctx
            .ledger
            .outcome_added
            .wait_timeout(outcomes, left)
            .unwrap()
            .0;
    }
    let missing: Vec<&u64> = expected
        .iter()
        .filter(|id| !outcomes.contains_key(id))
        .collect();
    if !missing.is_empty() {
        failures.push(format!(
            "the callbacks of records {missing:?} never ran after the producer closed"
        ));
    }
    if !failures.is_empty() || !watch.state.lock().unwrap().failures.is_empty() {
        drop(outcomes);
        return fail(failures.join("\n  "));
    }
    cluster.faults().clear();
    let isolation = if plan.transactional {
        Isolation::ReadCommitted
    } else {
        Isolation::ReadUncommitted
    };
    let bootstrap = cluster.bootstrap_servers();
    let read = std::panic::catch_unwind(|| {
        read_back(
            &bootstrap,
            &topic,
            plan.partitions,
            isolation,
            Duration::from_secs(60),
        )
    });
    let read = read.and_then(|mut log| {
        if plan.slow_start {
            let second = std::panic::catch_unwind(|| {
                read_back(
                    &bootstrap,
                    &second_topic(seed),
                    1,
                    isolation,
                    Duration::from_secs(60),
                )
            })?;
            log.extend(second);
        }
        Ok(log)
    });
    let log = match read {
        Ok(log) => log,
        Err(panic) => {
            drop(outcomes);
            let why = panic.downcast_ref::<String>().cloned().unwrap_or_default();
            return fail(format!("reading the log back failed: {why}"));
        }
    };
    let (summary, broken) = check_log(&ctx, &outcomes, &log);
    drop(outcomes);
    if !broken.is_empty() {
        return fail(broken.join("\n  "));
    }
    Ok(format!("seed {seed}: {summary}, {:?}", started.elapsed()))
}

/// The topic a slow-start seed sends one record to, once the first topic's records fill
/// `buffer.memory`.
pub(crate) fn second_topic(seed: u64) -> String {
    format!("fuzz-{seed}-b")
}

/// The log against every outcome's promise; a summary and the promises broken.
fn check_log(
    ctx: &Ctx,
    outcomes: &HashMap<u64, Outcome>,
    log: &[Vec<common::ReadRecord>],
) -> (String, Vec<String>) {
    let (seed, ledger) = (ctx.plan.seed, &ctx.ledger);
    let sent = ledger.sent.lock().unwrap();
    let fates = ledger.fates.lock().unwrap();
    let fates_reliable = !ledger.fates_unreliable.load(Ordering::SeqCst);
    let mut broken = Vec::new();
    let mut at: HashMap<u64, Vec<(i32, i64)>> = HashMap::new();
    for record in log.iter().flatten() {
        let payload = record.payload.as_deref().unwrap_or_default();
        if payload.len() < 16 || u64::from_be_bytes(payload[8..16].try_into().unwrap()) != seed {
            broken.push(format!(
                "a record not of this seed at {}@{}",
                record.partition, record.offset
            ));
            continue;
        }
        let id = u64::from_be_bytes(payload[..8].try_into().unwrap());
        at.entry(id)
            .or_default()
            .push((record.partition, record.offset));
    }
    for (id, places) in &at {
        match sent.get(id) {
            None => broken.push(format!(
                "record {id} is in the log at {places:?} but was never sent"
            )),
            Some(s) if places.len() > 1 => broken.push(format!(
                "record {id} ({}) is in the log {} times: {places:?}",
                s.how,
                places.len()
            )),
            _ => {}
        }
    }
    let (mut acked, mut absent, mut unknown) = (0, 0, 0);
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for (id, s) in sent.iter() {
        let places = at.get(id).map(Vec::as_slice).unwrap_or_default();
        let what = format!("record {id} ({}, {:?})", s.how, s.member);
        match outcomes.get(id) {
            None => broken.push(format!("{what} has no outcome")),
            Some(Outcome::NotQueued) => {
                absent += 1;
                *errors.entry("TrySendError".into()).or_default() += 1;
                if !places.is_empty() {
                    broken.push(format!(
                        "{what}: try_send gave it back, but it is in the log at {places:?}"
                    ));
                }
            }
            Some(Outcome::Result(Ok(meta))) => {
                acked += 1;
                let place = (meta.partition, meta.offset);
                if s.partition.is_some_and(|p| p != meta.partition) {
                    broken.push(format!(
                        "{what} was sent to partition {:?} and acknowledged on {}",
                        s.partition, meta.partition
                    ));
                }
                let fate = match s.member {
                    Member::NotTransactional => Some(Fate::Committed),
                    Member::Txn(n) if fates_reliable => fates.get(&n).copied(),
                    _ => None,
                };
                match fate {
                    Some(Fate::Committed) if places != [place] => broken.push(format!("{what} was acknowledged at {}@{} (committed), but the log has it at {places:?}", place.0, place.1)),
                    Some(Fate::Aborted) if !places.is_empty() => broken.push(format!("{what} is in the log at {places:?}, but its transaction was aborted")),
                    None if places.iter().any(|p| *p != place) => broken.push(format!("{what} was acknowledged at {}@{}, but the log has it at {places:?}", place.0, place.1)),
                    _ => {}
                }
            }
            Some(Outcome::Result(Err(e))) => {
                let kind = format!("{e:?}");
                let kind = kind.split([' ', '(', '{']).next().unwrap_or_default();
                *errors.entry(kind.to_string()).or_default() += 1;
                if verbose() {
                    eprintln!("{what}: {e}");
                }
                let promises_absent = matches!(
                    e,
                    ProduceError::Rejected { .. }
                        | ProduceError::TimedOut { .. }
                        | ProduceError::RecordTooLarge { .. }
                        | ProduceError::InvalidPartition { .. }
                        | ProduceError::MetadataTimeout { .. }
                        | ProduceError::BufferExhausted { .. }
                        | ProduceError::Closed
                        | ProduceError::Purged
                        | ProduceError::TransactionAborted
                        | ProduceError::TransactionAbortable(_)
                        | ProduceError::Transaction(_)
                );
                if promises_absent {
                    absent += 1;
                    if !places.is_empty() {
                        broken.push(format!(
                            "{what} failed with `{e}`, but it is in the log at {places:?}"
                        ));
                    }
                } else {
                    unknown += 1;
                }
            }
        }
    }
    // Each lane's records, per partition, in send order (ids grow in send order per lane).
    let mut lanes: BTreeMap<(u32, i32), Vec<(u64, i64)>> = BTreeMap::new();
    for (id, places) in &at {
        if let (Some(lane), [(partition, offset)]) =
            (sent.get(id).and_then(|s| s.lane), places.as_slice())
        {
            lanes
                .entry((lane, *partition))
                .or_default()
                .push((*id, *offset));
        }
    }
    for ((lane, partition), mut records) in lanes {
        records.sort();
        if let Some(w) = records.windows(2).find(|w| w[0].1 > w[1].1) {
            broken.push(format!("lane {lane}, partition {partition}: record {} was sent before {} but is at offset {} after {}", w[0].0, w[1].0, w[0].1, w[1].1));
        }
    }
    let summary = format!(
        "{}{} sent, {acked} acknowledged, {absent} failed and not in the log, {unknown} of unknown outcome, {} in the log; errors {errors:?}",
        if ctx.plan.transactional {
            let committed = fates.values().filter(|f| **f == Fate::Committed).count();
            format!(
                "transactional ({committed} committed, {} aborted{}): ",
                fates.len() - committed,
                if fates_reliable { "" } else { ", fates unreliable" }
            )
        } else {
            String::new()
        },
        sent.len(),
        at.len()
    );
    (summary, broken)
}
