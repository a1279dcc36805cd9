//! `kacrab-perf --sweep DIR`: one knob at a time, each point a fresh run of this binary (so
//! RSS and CPU are that run's alone), repeated and reduced to medians, written as a CSV of
//! every run and an SVG plot per scenario.
//!
//! Two scenarios, as in BENCHMARKS.md:
//! - `small`: unthrottled 10-byte records over 16 partitions. Axes: `kacrab.shards`; where
//!   one shard sits against the sending thread (`placement`: the same core, its SMT sibling
//!   when the machine has one, another core); `linger.ms`; `batch.size`.
//! - `latency`: a fixed rate with `linger.ms=0`. Axes: `kacrab.spin.before.park.us`, and
//!   `placement` as above.
//!
//! Arguments after `--sweep DIR` that are not the sweep's own go to every run after the
//! scenario's defaults, so they override them (e.g. `--bootstrap-servers`, `--num-records`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context as _, Result};

/// What the sweep was asked for.
pub struct SweepArgs {
    pub dir: PathBuf,
    pub reps: usize,
    /// Passed to every run, after the scenario's defaults.
    pub passthrough: Vec<String>,
}

/// Splits `--sweep DIR` and `--sweep-reps N` from the rest; `None` without `--sweep`.
pub fn parse(argv: &[String]) -> Result<Option<SweepArgs>> {
    let mut dir = None;
    let mut reps = 3;
    let mut passthrough = Vec::new();
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        match arg.split_once('=') {
            Some(("--sweep", v)) => dir = Some(PathBuf::from(v)),
            Some(("--sweep-reps", v)) => reps = reps_value(v)?,
            _ => match arg.as_str() {
                "--sweep" => {
                    dir = Some(PathBuf::from(
                        it.next()
                            .ok_or_else(|| anyhow!("--sweep needs a directory"))?,
                    ))
                }
                "--sweep-reps" => {
                    reps = reps_value(it.next().ok_or_else(|| anyhow!("--sweep-reps needs N"))?)?
                }
                _ => passthrough.push(arg.clone()),
            },
        }
    }
    Ok(dir.map(|dir| SweepArgs {
        dir,
        reps,
        passthrough,
    }))
}

fn reps_value(v: &str) -> Result<usize> {
    match v.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => bail!("--sweep-reps: `{v}` is not a count of at least 1"),
    }
}

/// One run's figures, from its `--json` line.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    records_per_sec: f64,
    cpu_s_per_million: f64,
    client_cpu_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    peak_rss_mib: f64,
    errors: f64,
}

/// One point of an axis: its label and the arguments that make it.
struct Point {
    label: String,
    args: Vec<String>,
}

struct Axis {
    name: &'static str,
    points: Vec<Point>,
}

struct Scenario {
    name: &'static str,
    defaults: Vec<String>,
    axes: Vec<Axis>,
}

fn strings(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn props(kv: &str) -> Vec<String> {
    strings(&["--producer-props", kv])
}

/// The sending thread on the first CPU of the mask; one shard on that CPU, on its SMT sibling
/// (when there is one) and on another CPU that is not a sibling.
fn placement_axis(online: &[usize]) -> Axis {
    let app = online[0];
    let siblings = smt_siblings(app);
    let mut points = vec![Point {
        label: "same".into(),
        args: strings(&["--app-core", &app.to_string(), "--cores", &app.to_string()]),
    }];
    if let Some(&sibling) = siblings.iter().find(|&&c| c != app && online.contains(&c)) {
        points.push(Point {
            label: "sibling".into(),
            args: strings(&[
                "--app-core",
                &app.to_string(),
                "--cores",
                &sibling.to_string(),
            ]),
        });
    }
    if let Some(&other) = online.iter().find(|&&c| c != app && !siblings.contains(&c)) {
        points.push(Point {
            label: "other".into(),
            args: strings(&[
                "--app-core",
                &app.to_string(),
                "--cores",
                &other.to_string(),
            ]),
        });
    }
    Axis {
        name: "placement",
        points,
    }
}

/// The CPUs that share `cpu`'s physical core (itself included), from sysfs.
fn smt_siblings(cpu: usize) -> Vec<usize> {
    let path = format!("/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list");
    let Ok(list) = std::fs::read_to_string(path) else {
        return vec![cpu];
    };
    let mut out = Vec::new();
    for part in list.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

fn scenarios(online: &[usize]) -> Vec<Scenario> {
    let shard_counts: Vec<usize> = [1, 2, 4, 8]
        .into_iter()
        .filter(|&n| n <= online.len())
        .collect();
    vec![
        Scenario {
            name: "small",
            defaults: strings(&[
                "--num-records",
                "1000000",
                "--record-size",
                "10",
                "--partitions",
                "16",
            ]),
            axes: vec![
                Axis {
                    name: "kacrab.shards",
                    points: shard_counts
                        .iter()
                        .map(|n| Point {
                            label: n.to_string(),
                            args: strings(&["--shards", &n.to_string()]),
                        })
                        .collect(),
                },
                placement_axis(online),
                Axis {
                    name: "linger.ms",
                    points: [0, 1, 5, 20]
                        .into_iter()
                        .map(|ms| Point {
                            label: ms.to_string(),
                            args: props(&format!("linger.ms={ms}")),
                        })
                        .collect(),
                },
                Axis {
                    name: "batch.size",
                    points: [4096, 16384, 65536, 262144]
                        .into_iter()
                        .map(|b| Point {
                            label: b.to_string(),
                            args: props(&format!("batch.size={b}")),
                        })
                        .collect(),
                },
            ],
        },
        Scenario {
            name: "latency",
            defaults: strings(&[
                "--num-records",
                "100000",
                "--record-size",
                "10",
                "--partitions",
                "16",
                "--throughput",
                "20000",
                "--producer-props",
                "linger.ms=0",
            ]),
            axes: vec![
                Axis {
                    name: "kacrab.spin.before.park.us",
                    points: [0, 50, 200]
                        .into_iter()
                        .map(|us| Point {
                            label: us.to_string(),
                            args: if us == 0 {
                                Vec::new()
                            } else {
                                props(&format!("kacrab.spin.before.park.us={us}"))
                            },
                        })
                        .collect(),
                },
                placement_axis(online),
            ],
        },
    ]
}

pub fn run(sweep: &SweepArgs) -> Result<()> {
    let exe = std::env::current_exe().context("locating this executable")?;
    std::fs::create_dir_all(&sweep.dir)
        .with_context(|| format!("creating {}", sweep.dir.display()))?;
    // The CPUs of this process's affinity mask, as the producer reads them.
    let online: Vec<usize> = core_affinity::get_core_ids()
        .map(|ids| ids.into_iter().map(|c| c.id).collect())
        .unwrap_or_else(|| vec![0]);
    let mut csv = String::from(
        "scenario,axis,value,rep,records_per_sec,client_cpu_s_per_million,client_cpu_s,\
         p50_ms,p99_ms,p999_ms,peak_rss_mib,errors\n",
    );
    for scenario in scenarios(&online) {
        let mut medians: Vec<(&str, Vec<(String, Figures)>)> = Vec::new();
        for axis in &scenario.axes {
            let mut row = Vec::new();
            for point in &axis.points {
                let mut runs = Vec::with_capacity(sweep.reps);
                for rep in 0..sweep.reps {
                    let mut args = scenario.defaults.clone();
                    args.extend(sweep.passthrough.iter().cloned());
                    args.extend(point.args.iter().cloned());
                    args.extend(strings(&["--json", "--reporting-interval", "3600000"]));
                    let f = run_once(&exe, &args).with_context(|| {
                        format!(
                            "{} {}={} (run {rep})",
                            scenario.name, axis.name, point.label
                        )
                    })?;
                    eprintln!(
                        "{} {}={} rep {rep}: {:.0} records/s, {:.3} CPU s/M, p99 {:.3} ms",
                        scenario.name,
                        axis.name,
                        point.label,
                        f.records_per_sec,
                        f.cpu_s_per_million,
                        f.p99_ms
                    );
                    let _ = writeln!(
                        csv,
                        "{},{},{},{rep},{:.1},{:.4},{:.4},{:.4},{:.4},{:.4},{:.1},{}",
                        scenario.name,
                        axis.name,
                        point.label,
                        f.records_per_sec,
                        f.cpu_s_per_million,
                        f.client_cpu_s,
                        f.p50_ms,
                        f.p99_ms,
                        f.p999_ms,
                        f.peak_rss_mib,
                        f.errors
                    );
                    runs.push(f);
                }
                row.push((point.label.clone(), median(&runs)));
            }
            medians.push((axis.name, row));
        }
        let svg = sweep.dir.join(format!("sweep-{}.svg", scenario.name));
        plot::write(&svg, scenario.name, &medians)?;
        eprintln!("wrote {}", svg.display());
    }
    let csv_path = sweep.dir.join("sweep.csv");
    std::fs::write(&csv_path, csv).with_context(|| format!("writing {}", csv_path.display()))?;
    eprintln!("wrote {}", csv_path.display());
    Ok(())
}

fn run_once(exe: &Path, args: &[String]) -> Result<Figures> {
    let out = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("starting a run")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| {
            anyhow!(
                "no result (exit {}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let n = |key: &str| number(line, key).ok_or_else(|| anyhow!("no `{key}` in {line}"));
    Ok(Figures {
        records_per_sec: n("records_per_sec")?,
        cpu_s_per_million: n("client_cpu_s_per_million")?,
        client_cpu_s: n("client_cpu_s")?,
        p50_ms: n("p50")?,
        p99_ms: n("p99")?,
        p999_ms: n("p999")?,
        peak_rss_mib: n("peak_rss_bytes")? / (1024.0 * 1024.0),
        errors: n("errors")?,
    })
}

/// The number after `"key":` in a flat JSON line this binary wrote (its keys are unique).
fn number(line: &str, key: &str) -> Option<f64> {
    let pattern = format!("\"{key}\":");
    let start = line.find(&pattern)? + pattern.len();
    let rest = &line[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | 'E' | '+')))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Each figure's median over the runs, taken on its own.
fn median(runs: &[Figures]) -> Figures {
    let m = |get: fn(&Figures) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(get).collect();
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        if v.len() % 2 == 0 {
            (v[mid - 1] + v[mid]) / 2.0
        } else {
            v[mid]
        }
    };
    Figures {
        records_per_sec: m(|f| f.records_per_sec),
        cpu_s_per_million: m(|f| f.cpu_s_per_million),
        client_cpu_s: m(|f| f.client_cpu_s),
        p50_ms: m(|f| f.p50_ms),
        p99_ms: m(|f| f.p99_ms),
        p999_ms: m(|f| f.p999_ms),
        peak_rss_mib: m(|f| f.peak_rss_mib),
        errors: m(|f| f.errors),
    }
}

/// The SVG: a row per axis; the `small` scenario plots records/s and CPU per million
/// records, the `latency` scenario p50/p99 and the run's client CPU.
#[cfg(feature = "perf")]
mod plot {
    use std::path::Path;

    use anyhow::{anyhow, Result};
    use plotters::prelude::*;

    use super::Figures;

    type Series = (&'static str, fn(&Figures) -> f64, RGBColor);

    pub fn write(
        path: &Path,
        scenario: &str,
        axes: &[(&str, Vec<(String, Figures)>)],
    ) -> Result<()> {
        let panels: [(&str, Vec<Series>); 2] = if scenario == "latency" {
            [
                (
                    "latency (ms)",
                    vec![("p50", |f| f.p50_ms, BLUE), ("p99", |f| f.p99_ms, RED)],
                ),
                ("client CPU (s)", vec![("cpu", |f| f.client_cpu_s, BLACK)]),
            ]
        } else {
            [
                (
                    "records/s",
                    vec![("records/s", |f| f.records_per_sec, BLUE)],
                ),
                (
                    "CPU s per M records",
                    vec![("cpu", |f| f.cpu_s_per_million, BLACK)],
                ),
            ]
        };
        let root = SVGBackend::new(path, (1000, 320 * axes.len() as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let cells = root.split_evenly((axes.len(), panels.len()));
        for (i, (axis, points)) in axes.iter().enumerate() {
            for (j, (what, series)) in panels.iter().enumerate() {
                let labels: Vec<&str> = points.iter().map(|(l, _)| l.as_str()).collect();
                let top = points
                    .iter()
                    .flat_map(|(_, f)| series.iter().map(move |(_, get, _)| get(f)))
                    .fold(0.0f64, f64::max)
                    .max(1e-9)
                    * 1.15;
                let n = labels.len() as f64;
                let mut chart = ChartBuilder::on(&cells[i * panels.len() + j])
                    .caption(format!("{scenario}: {what} by {axis}"), ("sans-serif", 16))
                    .margin(12)
                    .x_label_area_size(35)
                    .y_label_area_size(70)
                    .build_cartesian_2d(-0.5f64..(n - 0.5), 0f64..top)
                    .map_err(|e| anyhow!("{e}"))?;
                chart
                    .configure_mesh()
                    .x_labels(labels.len())
                    .x_label_formatter(&|x| {
                        let i = x.round();
                        if (x - i).abs() < 0.01 && i >= 0.0 {
                            labels
                                .get(i as usize)
                                .map(|s| s.to_string())
                                .unwrap_or_default()
                        } else {
                            String::new()
                        }
                    })
                    .x_desc(*axis)
                    .y_desc(*what)
                    .draw()
                    .map_err(|e| anyhow!("{e}"))?;
                for &(name, get, color) in series {
                    let xy: Vec<(f64, f64)> = points
                        .iter()
                        .enumerate()
                        .map(|(k, (_, f))| (k as f64, get(f)))
                        .collect();
                    chart
                        .draw_series(LineSeries::new(xy.clone(), color))
                        .map_err(|e| anyhow!("{e}"))?
                        .label(name)
                        .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
                    chart
                        .draw_series(xy.iter().map(|&p| Circle::new(p, 3, color.filled())))
                        .map_err(|e| anyhow!("{e}"))?;
                }
                if series.len() > 1 {
                    chart
                        .configure_series_labels()
                        .border_style(BLACK)
                        .draw()
                        .map_err(|e| anyhow!("{e}"))?;
                }
            }
        }
        root.present().map_err(|e| anyhow!("{e}"))
    }
}

/// Without the `perf` feature there is no plotting library: the CSV is still written.
#[cfg(not(feature = "perf"))]
mod plot {
    use std::path::Path;

    use anyhow::Result;

    use super::Figures;

    pub fn write(path: &Path, _: &str, _: &[(&str, Vec<(String, Figures)>)]) -> Result<()> {
        eprintln!(
            "not writing {}: built without the `perf` feature (no plotting)",
            path.display()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_by_key_from_the_json_line() {
        let line = r#"{"records_per_sec":1234.5,"latency_ms":{"p50":0.25,"p99":1.5e0,"p999":2},"client_cpu_s":0.7,"client_cpu_s_per_million":0.9,"errors":0}"#;
        assert_eq!(number(line, "records_per_sec"), Some(1234.5));
        assert_eq!(number(line, "p99"), Some(1.5));
        assert_eq!(number(line, "p999"), Some(2.0));
        assert_eq!(number(line, "client_cpu_s"), Some(0.7));
        assert_eq!(number(line, "client_cpu_s_per_million"), Some(0.9));
        assert_eq!(number(line, "missing"), None);
    }

    #[test]
    fn the_sweeps_own_flags_are_split_from_those_every_run_gets() {
        let argv: Vec<String> = [
            "--sweep",
            "out",
            "--bootstrap-servers",
            "b:9092",
            "--sweep-reps=5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let s = parse(&argv).unwrap().expect("a sweep");
        assert_eq!(s.dir, PathBuf::from("out"));
        assert_eq!(s.reps, 5);
        assert_eq!(s.passthrough, vec!["--bootstrap-servers", "b:9092"]);
        assert!(parse(&argv[2..4]).unwrap().is_none());
        assert!(parse(&["--sweep-reps".to_string(), "0".to_string()]).is_err());
    }

    #[test]
    fn medians_are_taken_per_figure() {
        let f = |r: f64, c: f64| Figures {
            records_per_sec: r,
            cpu_s_per_million: c,
            ..Figures::default()
        };
        let m = median(&[f(3.0, 1.0), f(1.0, 3.0), f(2.0, 2.0)]);
        assert_eq!((m.records_per_sec, m.cpu_s_per_million), (2.0, 2.0));
        assert_eq!(median(&[f(1.0, 0.0), f(2.0, 0.0)]).records_per_sec, 1.5);
    }
}
