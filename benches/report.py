#!/usr/bin/env python3
"""The results table of benches/run.sh.

run.sh appends one line per measurement to a samples file:  FIGURE <TAB> SERIES <TAB> VALUE
  - SERIES "x" is the figure itself, one value per repetition (a ratio, or an absolute figure);
  - other series are the absolute measurements behind a ratio (shown as medians in the detail column);
  - SERIES "note" replaces the figure with "not yet: why" or "failed: the error".
Each figure is the median of its repetitions, with min and max.

usage: report.py SAMPLES [--markdown OUT --meta META --explain DIR]
  prints the table; with --markdown also writes docs/benchmarks.md (META: key<TAB>value lines;
  DIR: EXPLAIN ANALYZE outputs, FIGURE.txt, shown under a figure that misses its goal).
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

# id, label, goal (op, bound) or None for a figure without a goal, unit, detail: [(series, label, unit)]
FIGURES = [
    ("P1w", "P1 writes: TPC-B tps, tracked / plain db", (">=", 0.9), "x",
     [("tracked", "tracked", "tps"), ("plain", "plain", "tps")]),
    ("P1s", "P1 select-only (-S): tps, tracked / plain db", (">=", 0.98), "x",
     [("tracked", "tracked", "tps"), ("plain", "plain", "tps")]),
    ("P1wn", "P1 writes vs cluster without preload", (">=", 0.9), "x",
     [("tracked", "tracked", "tps"), ("nopreload", "no preload", "tps")]),
    ("P1sn", "P1 select-only vs cluster without preload", (">=", 0.98), "x",
     [("tracked", "tracked", "tps"), ("nopreload", "no preload", "tps")]),
    ("P1wi", "P1 writes, counted: instructions per TPC-B transaction, plain / tracked (valgrind; same data, one backend)", (">=", 0.92), "x",
     [("tracked", "tracked", "instr"), ("plain", "plain", "instr")]),
    ("P1si", "P1 select-only, counted: instructions per SELECT, plain / tracked", (">=", 0.98), "x",
     [("tracked", "tracked", "instr"), ("plain", "plain", "instr")]),
    ("P2point", "P2 point lookup: latency world / main", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms")]),
    ("P2range", "P2 range scan (100 rows): world / main", ("<=", 1.15), "x",
     [("world", "world", "ms"), ("main", "main", "ms")]),
    ("P2join", "P2 join orders->items (10 rows): world / main", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms")]),
    ("P2count", "P2 full scan count(*): world / main", ("<=", 1.25), "x",
     [("world", "world", "ms"), ("main", "main", "ms")]),
    ("P2pointi", "P2 point lookup, counted: instructions world / main (valgrind; the server's work alone)", ("<=", 1.3), "x",
     [("world", "world", "instr"), ("main", "main", "instr")]),
    ("P2rangei", "P2 range scan (100 rows), counted", ("<=", 1.3), "x",
     [("world", "world", "instr"), ("main", "main", "instr")]),
    ("P2joini", "P2 join orders->items (10 rows), counted", ("<=", 1.3), "x",
     [("world", "world", "instr"), ("main", "main", "instr")]),
    ("P2counti", "P2 full scan count(*), counted", ("<=", 1.5), "x",
     [("world", "world", "instr"), ("main", "main", "instr")]),
    ("P3", "P3 CREATE WORLD: big db / small db", ("<=", 1.5), "x",
     [("big", "big", "ms"), ("small", "small", "ms")]),
    ("P3abs", "P3 CREATE WORLD on the big db", None, "ms", []),
    ("P4", "P4 merge: into big table / into small table", ("<=", 1.5), "x",
     [("big", "big", "ms"), ("small", "small", "ms")]),
    ("P4rate", "P4 merge into the big table", (">=", 50000), "rows/s", []),
    ("P5", "P5 merge / same changes as plain DML", ("<=", 2.0), "x",
     [("merge", "merge", "ms"), ("dml", "DML", "ms")]),
    ("P5p", "P5 planned: merge of rows main also changed since the fork (other columns) / the same changes as plain DML", ("<=", 2.0), "x",
     [("merge", "merge", "ms"), ("dml", "DML", "ms")]),
    ("P6", "P6 AS OF (1% changed since) / plain scan: `FROM t AS OF '<time>'` in a statement (the moment cached after its first read, as the spec says)", ("<=", 1.5), "x",
     [("asof", "as of", "ms"), ("plain", "plain", "ms")]),
    ("P6u", "P6 the same, rebuilt from history every time (`AS OF '<time>'::timestamptz`, not cached)", None, "x",
     [("asof", "as of", "ms"), ("plain", "plain", "ms")]),
    ("P6fn", "P6 the same through worlds.as_of() (a set-returning function)", None, "x",
     [("asof", "as_of()", "ms"), ("plain", "plain", "ms")]),
    ("P7", "P7 TPC-B in an old world (forked before main's own TPC-B ran) / in a fresh world", (">=", 0.9), "x",
     [("old", "old", "tps"), ("fresh", "fresh", "tps")]),
    ("P8c1", "P8 TPC-B inside a world / on main, same database, alternating: 1 client", (">=", 0.8), "x",
     [("world", "world", "tps"), ("main", "main", "tps")]),
    ("P8c2", "P8 the same, 2 clients", (">=", 0.8), "x",
     [("world", "world", "tps"), ("main", "main", "tps")]),
    ("P8c4", "P8 the same, 4 clients", (">=", 0.8), "x",
     [("world", "world", "tps"), ("main", "main", "tps")]),
    ("P9", "P9 main's TPC-B while 4 sessions merge small worlds into main / while they write the same changes to main", (">=", 0.8), "x",
     [("merging", "merging", "tps"), ("direct", "direct", "tps")]),
    ("P10", "P10 CREATE TABLE of many tables (one transaction each) in a tracked database / in a plain one", ("<=", 2.0), "x",
     [("tracked", "tracked", "ms"), ("plain", "plain", "ms")]),
    ("P10E", "P10 the same with worlds.lazy_storage = off (each table's storage made by its CREATE TABLE) / plain", None, "x",
     [("eager", "eager", "ms"), ("plain", "plain", "ms")]),
    ("P11", "P11 merge of a world's changed rows with three indexed merge checks on its table / with none", ("<=", 1.3), "x",
     [("checks", "checks", "ms"), ("none", "none", "ms")]),
    ("P12S", "P12 select-only (-S) tps in a world that checks its reads / in one that doesn't", (">=", 0.9), "x",
     [("checking", "checking", "tps"), ("plain", "plain", "tps")]),
    ("P12w", "P12 TPC-B tps in a world that checks its reads / in one that doesn't", (">=", 0.9), "x",
     [("checking", "checking", "tps"), ("plain", "plain", "tps")]),
    ("P12r", "P12 select-only (-S) tps on main recording which columns clients read (worlds.record_reads on) / off", (">=", 0.97), "x",
     [("recording", "recording", "tps"), ("off", "off", "tps")]),
    ("P13", "P13 a client session's fork, run, score and drop loop / SIMULATE of the same worlds (KEEP 10, its background workers): the spec's pricing example", (">=", 1.6), "x",
     [("client", "client", "ms"), ("simulate", "SIMULATE", "ms")]),
    ("P13f", "P13 SIMULATE's time per world: many worlds (KEEP 10) / few", ("<=", 1.3), "x",
     [("many", "many", "ms"), ("few", "few", "ms")]),
    ("P14S", "P14 select-only (-S) tps, 2 clients: through worlds-proxy / through pgbouncer (session mode)", (">=", 1.0), "x",
     [("proxy", "proxy", "tps"), ("pgbouncer", "pgbouncer", "tps")]),
    ("P14Sd", "P14 select-only (-S) tps, 2 clients: through worlds-proxy / direct", (">=", 0.9), "x",
     [("proxy", "proxy", "tps"), ("direct", "direct", "tps")]),
    ("P14Sb", "P14 the same for reference: pgbouncer / direct", None, "x",
     [("pgbouncer", "pgbouncer", "tps"), ("direct", "direct", "tps")]),
    ("P14W", "P14 TPC-B tps, 2 clients: through worlds-proxy / through pgbouncer", (">=", 1.0), "x",
     [("proxy", "proxy", "tps"), ("pgbouncer", "pgbouncer", "tps")]),
    ("P14Wd", "P14 TPC-B tps, 2 clients: through worlds-proxy / direct", (">=", 0.9), "x",
     [("proxy", "proxy", "tps"), ("direct", "direct", "tps")]),
    ("P14Wb", "P14 the same for reference: pgbouncer / direct", None, "x",
     [("pgbouncer", "pgbouncer", "tps"), ("direct", "direct", "tps")]),
    ("P14P", "P14 select-only, extended protocol (-M prepared), 2 clients: worlds-proxy / pgbouncer", None, "x",
     [("proxy", "proxy", "tps"), ("pgbouncer", "pgbouncer", "tps")]),
    ("P14Pd", "P14 select-only, extended protocol (-M prepared), 2 clients: worlds-proxy / direct", None, "x",
     [("proxy", "proxy", "tps"), ("direct", "direct", "tps")]),
    ("P14M", "P14 select-only, 8 clients (four a core): worlds-proxy / pgbouncer", None, "x",
     [("proxy", "proxy", "tps"), ("pgbouncer", "pgbouncer", "tps")]),
    ("P14Md", "P14 select-only, 8 clients: worlds-proxy / direct", None, "x",
     [("proxy", "proxy", "tps"), ("direct", "direct", "tps")]),
    ("P14lat", "P14 latency worlds-proxy adds per round trip: 1/tps through it - 1/tps direct, select-only, 1 client", None, "µs",
     [("proxy", "proxy", "tps"), ("direct", "direct", "tps")]),
    ("P14latb", "P14 latency pgbouncer adds per round trip, the same way", None, "µs",
     [("pgbouncer", "pgbouncer", "tps"), ("direct", "direct", "tps")]),
    ("P14cS", "P14 CPU per transaction in the proxy's process / in pgbouncer's (user + system), select-only, 2 clients", None, "x",
     [("proxy", "proxy", "µs"), ("pgbouncer", "pgbouncer", "µs")]),
    ("P14cW", "P14 the same for TPC-B (7 statements a transaction)", None, "x",
     [("proxy", "proxy", "µs"), ("pgbouncer", "pgbouncer", "µs")]),
    ("P15gw", "P15 sysbench OLTP, geomean of average latency: in a world / stock database (4 tables, 1 thread; each test below)", ("<=", 1.10), "x", []),
    ("P15gm", "P15 the same geomean: main of a database with pg_worlds / stock", ("<=", 1.05), "x", []),
    ("P15_oltp_point_select", "P15 oltp_point_select: latency world / stock", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms"), ("stock", "stock", "ms")]),
    ("P15_oltp_read_only", "P15 oltp_read_only: latency world / stock", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms"), ("stock", "stock", "ms")]),
    ("P15_select_random_points", "P15 select_random_points: latency world / stock", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms"), ("stock", "stock", "ms")]),
    ("P15_select_random_ranges", "P15 select_random_ranges: latency world / stock", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms"), ("stock", "stock", "ms")]),
    ("P15_oltp_read_write", "P15 oltp_read_write: latency world / stock", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms"), ("stock", "stock", "ms")]),
    ("P15_oltp_write_only", "P15 oltp_write_only: latency world / stock", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms"), ("stock", "stock", "ms")]),
    ("P15_oltp_update_index", "P15 oltp_update_index: latency world / stock", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms"), ("stock", "stock", "ms")]),
    ("P15_oltp_update_non_index", "P15 oltp_update_non_index: latency world / stock", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms"), ("stock", "stock", "ms")]),
    ("P15_oltp_insert", "P15 oltp_insert: latency world / stock", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms"), ("stock", "stock", "ms")]),
    ("P15_oltp_delete", "P15 oltp_delete: latency world / stock", ("<=", 1.3), "x",
     [("world", "world", "ms"), ("main", "main", "ms"), ("stock", "stock", "ms")]),
    ("P16r", "P16 select-only tps in a world alone / in a world among many live worlds, each having changed rows of the same table", ("<=", 1.1), "x",
     [("one", "alone", "tps"), ("many", "among many", "tps")]),
    ("P16w", "P16 main's TPC-B tps beside many live worlds / beside one", (">=", 0.97), "x",
     [("many", "many", "tps"), ("one", "one", "tps")]),
    ("P16m", "P16 MERGE of a world among many live worlds / of a world alone", ("<=", 1.1), "x",
     [("many", "among many", "ms"), ("one", "alone", "ms")]),
    ("P16wi", "P16 main's TPC-B, counted: instructions per transaction beside one world / beside many (valgrind; same script, one backend)", (">=", 0.97), "x",
     [("many", "beside many", "instr"), ("one", "beside one", "instr")]),
    ("P16ri", "P16 select-only in a world, counted: instructions per SELECT alone / among many", (">=", 0.91), "x",
     [("many", "among many", "instr"), ("one", "alone", "instr")]),
]


def num(v, unit):
    if unit == "x":
        return f"{v:.2f}x"
    if unit in ("tps", "rows/s", "instr"):
        return f"{v:,.0f} {unit}"
    return f"{v:.3g} {unit}" if v < 100 else f"{v:,.0f} {unit}"


def goal_text(goal, unit="x"):
    if goal is None:
        return "-"
    bound = f"{goal[1]:g}x" if unit == "x" else f"{goal[1]:,.0f} {unit}"
    return f"{'≥' if goal[0] == '>=' else '≤'} {bound}"


def meets(goal, v):
    if goal is None:
        return "-"
    ok = v >= goal[1] if goal[0] == ">=" else v <= goal[1]
    return "yes" if ok else "NO"


def rows(samples):
    """One dict per figure that has samples, in FIGURES order."""
    out = []
    for fid, label, goal, unit, detail in FIGURES:
        s = samples.get(fid)
        if not s:
            continue
        if "note" in s:  # "not yet: why" or "failed: the error"
            what, _, why = s["note"][0].partition(": ")
            out.append(dict(id=fid, label=label, measured=what, goal=goal_text(goal, unit), min="", max="",
                            meets="FAILED" if what == "failed" else "-", detail=why, missed=False, n=0))
            continue
        xs = [float(v) for v in s["x"]]
        med = statistics.median(xs)
        parts = [f"{lab} {num(statistics.median(map(float, s[ser])), u)}" for ser, lab, u in detail if ser in s]
        m = meets(goal, med)
        out.append(dict(id=fid, label=label, measured=num(med, unit), goal=goal_text(goal, unit), min=num(min(xs), unit),
                        max=num(max(xs), unit), meets=m, detail=", ".join(parts), missed=(m == "NO"), n=len(xs)))
    return out


COLS = [("label", "figure"), ("measured", "measured"), ("goal", "goal"), ("min", "min"), ("max", "max"),
        ("meets", "meets"), ("detail", "detail (medians)")]


def text_table(rs):
    widths = [max(len(h), *(len(r[k]) for r in rs)) for k, h in COLS]
    line = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    out = [line([h for _, h in COLS]), "-+-".join("-" * w for w in widths)]
    out += [line([r[k] for k, _ in COLS]) for r in rs]
    return "\n".join(out)


def markdown(rs, meta, explain_dir):
    m = dict(meta)
    out = ["# Benchmarks", "",
           "Produced by `benches/run.sh` (full mode); re-run it to refresh this page. "
           "Each figure is the median of the repetitions, with min and max; ratios are taken per repetition "
           "from runs that alternate the two sides.", ""]
    for k in ("date", "commit", "build", "machine", "postgres", "sizes", "repetitions", "duration", "load"):
        if k in m:
            out.append(f"- **{k}**: {m[k]}")
    for k in ("warning", "note"):
        if k in m:
            out += ["", ("**Warning**: " if k == "warning" else "") + m[k]]
    out += ["", "| " + " | ".join(h for _, h in COLS) + " |", "|" + "---|" * len(COLS)]
    out += ["| " + " | ".join(r[k] for k, _ in COLS) + " |" for r in rs]
    missed = [r for r in rs if r["missed"]]
    out += ["", "## Missed goals", ""]
    if not missed:
        out.append("None.")
    for r in missed:
        out.append(f"- **{r['label']}**: {r['measured']} (goal {r['goal']}; min {r['min']}, max {r['max']}; "
                   f"{r['detail']}).")
    for r in missed:
        path = os.path.join(explain_dir or "", r["id"] + ".txt")
        if explain_dir and os.path.exists(path):
            out += ["", f"### {r['label']}: EXPLAIN ANALYZE", "", "```", open(path).read().rstrip(), "```"]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("samples")
    ap.add_argument("--markdown")
    ap.add_argument("--meta")
    ap.add_argument("--explain")
    a = ap.parse_args()
    samples = defaultdict(lambda: defaultdict(list))
    for line in open(a.samples):
        if line.strip():
            fid, series, value = line.rstrip("\n").split("\t", 2)
            samples[fid][series].append(value)
    unknown = set(samples) - {f[0] for f in FIGURES}
    if unknown:
        sys.exit(f"report.py: samples for unknown figures {sorted(unknown)}")
    rs = rows(samples)
    print(text_table(rs))
    if a.markdown:
        meta = [l.rstrip("\n").split("\t", 1) for l in open(a.meta)] if a.meta else []
        with open(a.markdown, "w") as f:
            f.write(markdown(rs, meta, a.explain))


if __name__ == "__main__":
    main()
