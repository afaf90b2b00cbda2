#!/usr/bin/env python3
"""Prints kda_bench's Google Benchmark JSON as readable tables (python3 standard library only).

    scripts/bench_table.py build/bench.json

One table for chunk_kda_fwd end to end: one row per batch and gate, with GPU ms per call, host µs to enqueue one
call, TFLOP/s and GB/s for both metadata modes (builder: tables built on the host and uploaded once; derived: the
call derives them on the device). If the JSON holds per-stage or metadata benchmarks, a second table lists them;
shape/ benchmarks (other I/O types and head dims) get a table of their own, with each shape's GPU time as a ratio
to the batch's bf16, K = V = 128 run of the same file.
With --benchmark_repetitions the median aggregate is shown (else the mean, else the single run).
"""
import json
import sys

MODES = ("builder", "derived")
BATCH_ORDER = ("single1k", "single8k", "single32k", "varlen16", "mixed64", "spec256x8")
STAGE_ORDER = ("l2norm", "gate_cumsum", "intra_chunk", "solve_tril", "intra_solve", "recompute_w_u", "prepare",
               "prepare_inputs", "state_recurrence", "chunk_output")


def base_name(name):
    """e2e/single8k/builder/gate_lb/manual_time/repeats:3 -> [e2e, single8k, builder, gate_lb]."""
    return [p for p in name.split("/") if p not in ("manual_time", "real_time") and ":" not in p]


def pick_runs(benchmarks):
    """One record per benchmark: the median aggregate if present, else the mean, else the (last) plain run."""
    rank = {"median": 3, "mean": 2}
    chosen = {}
    for b in benchmarks:
        run_name = b.get("run_name", b["name"])
        if b.get("run_type") == "aggregate":
            r = rank.get(b.get("aggregate_name"), -1)
            if r < 0:
                continue  # stddev, cv, ...
        else:
            r = 1
        key = tuple(base_name(run_name))
        if key not in chosen or r >= chosen[key][0]:
            chosen[key] = (r, b)
    return {k: v[1] for k, v in chosen.items()}


def order(value, known):
    return (known.index(value), "") if value in known else (len(known), value)


def fmt(value, width, digits):
    if value is None:
        return "-".rjust(width)
    if isinstance(value, str):
        return value[:width].rjust(width)
    if digits == "ms":  # GPU ms: 3 significant decimals for small values
        text = f"{value:.4f}" if value < 1 else f"{value:.3f}" if value < 100 else f"{value:.1f}"
    else:
        text = f"{value:.{digits}f}"
    return text.rjust(width)


def metrics(record):
    """(gpu_ms, host_us, TFLOPs, GBps) of a record, or an error string in place of gpu_ms."""
    if record is None:
        return (None, None, None, None)
    if record.get("error_occurred"):
        msg = record.get("error_message", "error")
        return ("ERR: " + msg, None, None, None)
    return (record.get("gpu_ms"), record.get("host_us"), record.get("TFLOPs"), record.get("GBps"))


def mode_cells(m, show_rates=True):
    gpu, host, tf, gb = m
    if isinstance(gpu, str):
        return [gpu.ljust(8 + 1 + 8 + (1 + 8 + 1 + 8 if show_rates else 0))]
    cells = [fmt(gpu, 8, "ms"), fmt(host, 8, 1)]
    if show_rates:
        cells += [fmt(tf if tf else None, 8, 2), fmt(gb, 8, 0)]  # no TFLOP/s for stages without matrix products
    return cells


def print_table(title, header_left, rows, show_rates=True, modes=MODES):
    """rows: list of (left cells, {mode: record})."""
    sub = ["GPU ms", "host us"] + (["TFLOP/s", "GB/s"] if show_rates else [])
    left_w = [max(len(h), *(len(r[0][i]) for r in rows)) for i, h in enumerate(header_left)] if rows else []
    group_w = len(" ".join(s.rjust(8) for s in sub))
    line1 = "  ".join(h.ljust(w) for h, w in zip(header_left, left_w))
    line2 = "  ".join(" " * w for w in left_w)
    for mode in modes:
        line1 += " | " + mode.center(group_w)
        line2 += " | " + " ".join(s.rjust(8) for s in sub)
    print(title)
    print(line1)
    print(line2)
    print("-" * len(line2))
    for left, by_mode in rows:
        text = "  ".join(
            (c.rjust(w) if c[:1].isdigit() else c.ljust(w)) for c, w in zip(left, left_w))
        for mode in modes:
            text += " | " + " ".join(mode_cells(metrics(by_mode.get(mode)), show_rates))
        print(text.rstrip())
    print()


def tokens_of(*records):
    for r in records:
        if r is not None and r.get("tokens") is not None:
            return str(int(r["tokens"]))
    return "-"


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    with open(argv[1]) as f:
        data = json.load(f)
    ctx = data.get("context", {})
    runs = pick_runs(data.get("benchmarks", []))

    gpu = ctx.get("kda_gpu", "unknown GPU")
    timing = ctx.get("kda_timing", "direct")
    calls = ctx.get("kda_calls_per_iteration", "?")
    print(f"kda bench: {gpu}, {ctx.get('date', '?')}, {ctx.get('kda_runtime', '')}".rstrip(", "))
    print(f"H=32 K=V=128 bf16, l2norm + beta sigmoid + gate in the kernel, fp32 initial and final state (K-first)")
    print(f"GPU ms: GPU events around {calls} back-to-back calls ({timing} launches) / {calls}; "
          "host us: CPU time to enqueue one call")
    print()

    e2e = {}   # (batch, gate) -> {mode: record}
    stages = {}  # (stage, batch) -> {mode: record}
    meta = {}  # batch -> {"builder": record}
    shapes = {}  # (batch, shape) -> {"builder": record}
    for key, rec in runs.items():
        if len(key) >= 3 and key[0] == "e2e" and key[2] in MODES:
            gate = "gate_lb" if "gate_lb" in key[3:] else "softplus"
            e2e.setdefault((key[1], gate), {})[key[2]] = rec
        elif len(key) >= 4 and key[0] == "stage" and key[3] in MODES:
            stages.setdefault((key[1], key[2]), {})[key[3]] = rec
        elif len(key) >= 3 and key[0] == "metadata":
            meta.setdefault((key[1], key[2]), {})["builder"] = rec
        elif len(key) >= 3 and key[0] == "shape":
            shapes.setdefault((key[1], key[2]), {})["builder"] = rec

    if e2e:
        rows = []
        for (batch, gate) in sorted(e2e, key=lambda k: (order(k[0], BATCH_ORDER), k[1] != "softplus")):
            by_mode = e2e[(batch, gate)]
            rows.append(([batch, tokens_of(*by_mode.values()), gate], by_mode))
        print_table("chunk_kda_fwd, end to end (per call)", ["batch", "tokens", "gate"], rows)
    else:
        print("no e2e/ benchmarks in this file")
        print()
    if stages:
        rows = []
        for (stage, batch) in sorted(stages, key=lambda k: (order(k[0], STAGE_ORDER), order(k[1], BATCH_ORDER))):
            by_mode = stages[(stage, batch)]
            rows.append(([stage, batch, tokens_of(*by_mode.values())], by_mode))
        print_table("stages alone, softplus gate (per launcher call; derived includes the table derivation)",
                    ["stage", "batch", "tokens"], rows)
    if meta:
        rows = []
        for (what, batch) in sorted(meta, key=lambda k: (k[0], order(k[1], BATCH_ORDER))):
            rows.append(([what, batch, tokens_of(*meta[(what, batch)].values())], meta[(what, batch)]))
        print_table("metadata: host builder, build both tables + enqueue their one upload (per call)",
                    ["metadata", "batch", "tokens"], rows, show_rates=False, modes=("builder",))
    if shapes:
        rows = []
        for (batch, shape) in sorted(shapes, key=lambda k: (order(k[0], BATCH_ORDER), k[1])):
            by_mode = shapes[(batch, shape)]
            base = metrics(shapes.get((batch, "bf16_k128_v128"), {}).get("builder"))[0]
            this = metrics(by_mode.get("builder"))[0]
            ratio = f"{this / base:.3f}" if isinstance(this, float) and isinstance(base, float) and base else "-"
            rows.append(([batch, shape, ratio], by_mode))
        print_table("shapes: chunk_kda_fwd at other I/O types and head dims (builder, softplus; x = GPU ms against "
                    "bf16_k128_v128)", ["batch", "shape", "x"], rows, modes=("builder",))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
