//! Captures the producer's `tracing` events, from every thread (the shards log on their own),
//! as formatted lines. One capture per test binary: the subscriber is process-wide.

use std::io::Write;
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Installs the process-wide subscriber at DEBUG and returns what it writes to.
    pub fn install() -> Captured {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        captured
    }

    pub fn lines(&self) -> Vec<String> {
        let lines: Vec<String> = String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_string)
            .collect();
        if std::env::var_os("KACRAB_SHOW_LOGS").is_some() {
            println!("{}", lines.join("\n"));
        }
        lines
    }

    /// Whether one line holds every needle.
    pub fn has(lines: &[String], needles: &[&str]) -> bool {
        lines.iter().any(|l| needles.iter().all(|n| l.contains(n)))
    }
}
