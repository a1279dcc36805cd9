"""Interleaved A/B of two kacrab-perf binaries: N runs of each, alternating, medians and ratios.

usage: python3 benches/ab.py N BIN_A BIN_B -- <kacrab-perf arguments>
"""
import json, subprocess, statistics, sys
n = int(sys.argv[1]); a, b = sys.argv[2], sys.argv[3]; args = sys.argv[5:]
rows = {a: [], b: []}
for i in range(n):
    for v in ((a, b) if i % 2 == 0 else (b, a)):
        out = subprocess.run([v] + args + ["--json"], capture_output=True, text=True, timeout=300).stdout
        d = json.loads(out.strip().splitlines()[-1])
        rows[v].append((d["records_per_sec"], d["client_cpu_s_per_million"], d["peak_rss_bytes"] / 2**20, d["latency_ms"]["p99"], d["mb_per_sec"], d["errors"], d["latency_ms"]["p999"]))
        print(v, i, rows[v][-1], flush=True)
for v in rows:
    cols = list(zip(*rows[v]))
    print(v, "median records/s %.0f, CPU s/M %.3f, peak RSS %.1f MiB, p99 %.1f ms, MB/s %.1f, errors %d, p99.9 %.1f ms" % (
        statistics.median(cols[0]), statistics.median(cols[1]), statistics.median(cols[2]), statistics.median(cols[3]), statistics.median(cols[4]), sum(cols[5]), statistics.median(cols[6])))
x = [statistics.median(c) for i, c in enumerate(zip(*rows[a])) if i != 5]
y = [statistics.median(c) for i, c in enumerate(zip(*rows[b])) if i != 5]
print("B/A: records/s %.2f, CPU/M %.2f, RSS %.2f, p99 %.2f, MB/s %.2f, p99.9 %.2f" % tuple(q / p if p else float("nan") for p, q in zip(x, y)))
