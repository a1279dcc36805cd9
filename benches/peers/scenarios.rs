//! The scenarios the peer benchmark runs: each one's records, rate and settings, and the
//! clients it compares.

pub(super) struct Scenario {
    pub(super) name: &'static str,
    pub(super) title: &'static str,
    pub(super) records: u64,
    pub(super) size: usize,
    pub(super) partitions: i32,
    pub(super) rate: f64,
    pub(super) linger_ms: u64,
    pub(super) batch_size: usize,
    /// (label, client, shards, spin µs)
    pub(super) clients: Vec<(&'static str, &'static str, usize, u64)>,
    /// Transactions of this many ms; 0 is none.
    pub(super) txn_ms: u64,
    /// `compression.type` of every client.
    pub(super) compression: &'static str,
}

pub(super) fn scenarios(scale: f64) -> Vec<Scenario> {
    let n = |x: u64| ((x as f64 * scale) as u64).max(1000);
    let peers = vec![
        ("null", "null", 0, 0),
        // 0 shards: the producer's default shard count for the machine.
        ("kacrab", "kacrab", 0, 0),
        ("kacrab-batch", "kacrab-batch", 0, 0),
        ("librdkafka", "librdkafka", 0, 0),
        ("rskafka", "rskafka", 0, 0),
        ("java", "java", 0, 0),
    ];
    // The compressed scenarios differ in their codec alone. rskafka is built without its
    // compression features.
    let compressed = |codec: &'static str, title: &'static str| Scenario {
        name: codec,
        title,
        records: n(1_000_000),
        size: 100,
        partitions: 6,
        rate: 0.0,
        linger_ms: 5,
        batch_size: 16384,
        clients: vec![
            ("null", "null", 0, 0),
            ("kacrab", "kacrab", 2, 0),
            ("kacrab-batch", "kacrab-batch", 2, 0),
            ("librdkafka", "librdkafka", 0, 0),
            ("java", "java", 0, 0),
        ],
        txn_ms: 0,
        compression: codec,
    };
    vec![
        Scenario {
            name: "small",
            title: "5,000,000 x 10 B, 16 partitions, unthrottled, linger.ms=5, batch.size=16384",
            records: n(5_000_000),
            size: 10,
            partitions: 16,
            rate: 0.0,
            linger_ms: 5,
            batch_size: 16384,
            clients: peers.clone(),
            txn_ms: 0,
            compression: "none",
        },
        Scenario {
            name: "large",
            title: "100,000 x 10 KiB, 3 partitions, unthrottled, linger.ms=5, batch.size=1048576",
            records: n(100_000),
            size: 10 * 1024,
            partitions: 3,
            rate: 0.0,
            linger_ms: 5,
            batch_size: 1 << 20,
            clients: {
                let mut c = peers.clone();
                c.push(("loopback TCP", "loopback", 0, 0));
                c
            },
            txn_ms: 0,
            compression: "none",
        },
        Scenario {
            name: "latency",
            title: "50,000 records/s x 100 B, 6 partitions, linger.ms=0, 250,000 records",
            records: n(250_000),
            size: 100,
            partitions: 6,
            rate: 50_000.0,
            linger_ms: 0,
            batch_size: 16384,
            clients: {
                let mut c = peers.clone();
                c.insert(2, ("kacrab 2 shards", "kacrab", 2, 0));
                c.push(("loopback TCP RTT", "loopback-rtt", 0, 0));
                c
            },
            txn_ms: 0,
            compression: "none",
        },
        Scenario {
            name: "shards",
            title:
                "kacrab's default shard count vs 1 and 2 shards: 5,000,000 x 10 B, 16 partitions, \
                    unthrottled",
            records: n(5_000_000),
            size: 10,
            partitions: 16,
            rate: 0.0,
            linger_ms: 5,
            batch_size: 16384,
            clients: vec![
                ("null", "null", 0, 0),
                ("kacrab default", "kacrab", 0, 0),
                ("kacrab 1 shard", "kacrab", 1, 0),
                ("kacrab 2 shards", "kacrab", 2, 0),
            ],
            txn_ms: 0,
            compression: "none",
        },
        Scenario {
            name: "txn",
            title:
                "transactions of 100 ms: 1,000,000 x 100 B, 6 partitions, unthrottled, linger.ms=5",
            records: n(1_000_000),
            size: 100,
            partitions: 6,
            rate: 0.0,
            linger_ms: 5,
            batch_size: 16384,
            // rskafka has no transactions; the Java runner does not take the flag.
            clients: vec![
                ("null", "null", 0, 0),
                ("kacrab", "kacrab", 2, 0),
                ("kacrab-batch", "kacrab-batch", 2, 0),
                ("librdkafka", "librdkafka", 0, 0),
            ],
            txn_ms: 100,
            compression: "none",
        },
        compressed(
            "lz4",
            "lz4: 1,000,000 x 100 B, 6 partitions, unthrottled, linger.ms=5, batch.size=16384",
        ),
        compressed(
            "zstd",
            "zstd: 1,000,000 x 100 B, 6 partitions, unthrottled, linger.ms=5, batch.size=16384",
        ),
    ]
}
