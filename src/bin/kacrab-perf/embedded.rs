//! The embedded reference cluster, run in a child process so that the client's CPU time and
//! peak RSS are the client's alone (the broker keeps every record in memory and answers on
//! its own threads).
//!
//! The parent re-executes this binary with `--broker-process`. The child starts the cluster,
//! creates the topic, prints `bootstrap <servers>` and then answers one command per line on
//! stdin:
//!
//! - `verify <topic> <partitions> <expected>`: reads every partition's log and prints
//!   `verified <found> <expected> <duplicates> <out-of-order> <unexpected> <records>`;
//! - `cpu`: prints `cpu <seconds>`, the child's own CPU time so far;
//! - `quit` (or end of input): stops the cluster and exits.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

/// What `verify` found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verification {
    /// Distinct ids 0..expected found.
    pub found: u64,
    pub expected: u64,
    /// Records whose id had been seen before.
    pub duplicates: u64,
    /// Records whose id is not above the previous id of the same partition.
    pub out_of_order: u64,
    /// Records without an id in 0..expected.
    pub unexpected: u64,
    /// Records in the log.
    pub records: u64,
}

/// Checks exactly-once and per-partition order over the payload ids of `partitions`, each an
/// iterator of payloads in log order. A payload's id is its first 8 bytes, big-endian.
#[cfg_attr(not(feature = "testkit"), allow(dead_code))]
pub fn verify_ids<'a>(
    partitions: impl IntoIterator<Item = Vec<Option<&'a [u8]>>>,
    expected: u64,
) -> Verification {
    let mut seen = vec![0u64; expected.div_ceil(64) as usize];
    let mut v = Verification {
        expected,
        ..Verification::default()
    };
    for payloads in partitions {
        let mut last: Option<u64> = None;
        for payload in payloads {
            v.records += 1;
            let id = payload
                .filter(|p| p.len() >= 8)
                .map(|p| u64::from_be_bytes(p[..8].try_into().expect("8 bytes")));
            let Some(id) = id.filter(|id| *id < expected) else {
                v.unexpected += 1;
                continue;
            };
            let (word, bit) = ((id / 64) as usize, 1u64 << (id % 64));
            if seen[word] & bit != 0 {
                v.duplicates += 1;
            } else {
                seen[word] |= bit;
                v.found += 1;
            }
            if last.is_some_and(|l| id <= l) {
                v.out_of_order += 1;
            }
            last = Some(id);
        }
    }
    v
}

/// The child's side: runs until `quit` or end of input.
#[cfg(feature = "testkit")]
pub fn broker_process_main(
    topic: &str,
    partitions: i32,
    brokers: usize,
    retention: Option<usize>,
) -> Result<()> {
    use kacrab::testkit::batch::decode_records;
    use kacrab::testkit::broker::BrokerRules;
    use kacrab::testkit::server::ReferenceCluster;

    let rules = BrokerRules {
        retention_bytes_per_partition: retention,
        ..BrokerRules::default()
    };
    let cluster = ReferenceCluster::start(brokers, rules);
    let leaders: Vec<i32> = (0..partitions).map(|p| 1 + p % brokers as i32).collect();
    cluster.create_topic(topic, &leaders);
    let mut out = std::io::stdout().lock();
    writeln!(out, "bootstrap {}", cluster.bootstrap_servers())?;
    out.flush()?;
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["verify", topic, partitions, expected] => {
                let partitions: i32 = partitions.parse()?;
                let expected: u64 = expected.parse()?;
                let v = cluster.with_cluster(|c| -> Result<Verification> {
                    let mut decoded = Vec::with_capacity(partitions as usize);
                    for p in 0..partitions {
                        let mut records = Vec::new();
                        // Transaction markers carry no records of the run.
                        for batch in c.partition_log(topic, p).iter().filter(|b| !b.control) {
                            records.extend(
                                decode_records(&batch.bytes)
                                    .map_err(|e| anyhow!("partition {p}: {e}"))?,
                            );
                        }
                        decoded.push(records);
                    }
                    Ok(verify_ids(
                        decoded
                            .iter()
                            .map(|r| r.iter().map(|r| r.value.as_deref()).collect()),
                        expected,
                    ))
                })?;
                writeln!(
                    out,
                    "verified {} {} {} {} {} {}",
                    v.found, v.expected, v.duplicates, v.out_of_order, v.unexpected, v.records
                )?;
            }
            ["cpu"] => writeln!(
                out,
                "cpu {:.6}",
                super::procstat::process_cpu().as_secs_f64()
            )?,
            ["quit"] => break,
            _ => writeln!(out, "error unknown command: {line}")?,
        }
        out.flush()?;
    }
    cluster.shutdown();
    Ok(())
}

/// The parent's handle on a broker child process.
pub struct BrokerChild {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub bootstrap: String,
}

impl BrokerChild {
    /// Starts `program args...` and waits for its `bootstrap` line.
    pub fn spawn(program: &std::path::Path, args: &[String]) -> Result<BrokerChild> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let Some(bootstrap) = line.trim().strip_prefix("bootstrap ") else {
            let _ = child.kill();
            bail!("broker process did not start: {line:?}");
        };
        Ok(BrokerChild {
            bootstrap: bootstrap.to_string(),
            child,
            stdin,
            stdout,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn ask(&mut self, command: &str) -> Result<String> {
        writeln!(self.stdin, "{command}")?;
        self.stdin.flush()?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("broker process exited");
        }
        Ok(line.trim().to_string())
    }

    /// The child's CPU time so far.
    pub fn cpu(&mut self) -> Result<Duration> {
        let answer = self.ask("cpu")?;
        let secs: f64 = answer
            .strip_prefix("cpu ")
            .ok_or_else(|| anyhow!("unexpected answer {answer:?}"))?
            .parse()?;
        Ok(Duration::from_secs_f64(secs))
    }

    pub fn verify(&mut self, topic: &str, partitions: i32, expected: u64) -> Result<Verification> {
        let answer = self.ask(&format!("verify {topic} {partitions} {expected}"))?;
        let n: Vec<u64> = answer
            .strip_prefix("verified ")
            .ok_or_else(|| anyhow!("verification failed: {answer}"))?
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        if n.len() != 6 {
            bail!("unexpected answer {answer:?}");
        }
        Ok(Verification {
            found: n[0],
            expected: n[1],
            duplicates: n[2],
            out_of_order: n[3],
            unexpected: n[4],
            records: n[5],
        })
    }

    /// Asks the child to stop and waits for it.
    pub fn stop(mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

impl Drop for BrokerChild {
    fn drop(&mut self) {
        // `stop` consumed the child normally; this covers early returns.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> [u8; 8] {
        n.to_be_bytes()
    }

    #[test]
    fn counts_duplicates_gaps_and_disorder() {
        let (a, b, c, d) = (id(0), id(1), id(2), id(3));
        let p0 = vec![Some(&a[..]), Some(&c[..]), Some(&c[..])];
        let p1 = vec![Some(&d[..]), Some(&b[..]), None];
        let v = verify_ids([p0, p1], 5);
        assert_eq!(v.found, 4);
        assert_eq!(v.duplicates, 1);
        // 2 after 2 (the duplicate) and 1 after 3.
        assert_eq!(v.out_of_order, 2);
        assert_eq!(v.unexpected, 1);
        assert_eq!(v.records, 6);
    }
}
