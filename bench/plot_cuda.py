#!/usr/bin/env python3
"""Plots one `strata bench` JSON (a CUDA run with --batch and/or --prefill) as PNGs next to it, or in --out-dir:

  NAME_pareto.png  batched decode: tokens/s per GPU (y) against tokens/s per user (x), one curve per context length,
                   each point a batch size. Up and to the right is better; the curve is the throughput/latency trade.
  NAME_floor.png   measured time over the hardware floor (1 = as fast as the device's bandwidth and bf16 peak allow):
                   per batch size for each context length, and per prompt length for prefill.

usage: python3 bench/plot_cuda.py bench/results/cuda_flash.json [--out-dir DIR]
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")  # files only: the GPU machine has no display
import matplotlib.pyplot as plt


def title(run):
    c, d = run["config"], run["device"]
    model = f'{c.get("model", "?")}, {c.get("num_hidden_layers", "?")} layers'
    if "dtype" in c:
        model += f', {c["dtype"]} weights'
        per_param = d.get("weight_bytes_per_param")
        if isinstance(per_param, dict):  # newer runs: {layer_matrices, embedding_and_head}
            per_param = per_param.get("layer_matrices")
        if per_param:  # what the device actually stores may differ from what was generated
            stored = "fp8" if per_param < 1.5 else {2.0: "bf16", 4.0: "fp32"}.get(per_param, f"{per_param} B/param")
            model += f" ({stored} on the device)"
    device = d.get("gpu") or d.get("cpu", "?")
    return f'{model} on {device} ({run.get("date", "")[:10]}, {str(run.get("commit", ""))[:8]})'


def plot_pareto(run, path):
    fig, ax = plt.subplots(figsize=(7, 5))
    for i, ctx in enumerate(c for c in run["batched_decode"] if c["decode"] and "error" not in c["decode"][0]):
        rows = sorted((r for r in ctx["decode"] if "error" not in r), key=lambda r: r["batch"])  # skip points that did not fit
        x = [r["tokens_per_s_per_user"] for r in rows]
        y = [r["tokens_per_s"] for r in rows]
        ax.plot(x, y, marker="o", label=f'context {ctx["context"]}')
        for r, xi, yi in zip(rows, x, y):  # batch sizes on the first curve only: the others share them
            if i == 0:
                ax.annotate(f'B={r["batch"]}', (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens/s per user (1 / step time)")
    ax.set_ylabel("tokens/s per GPU (batch / step time)")
    ax.set_title("Batched decode\n" + title(run), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_floor(run, path):
    decode = [ctx for ctx in run.get("batched_decode", []) if ctx["decode"] and "measured_over_floor" in ctx["decode"][0]]
    prefill = [r for r in run.get("prefill_lengths", []) if "measured_over_floor" in r]
    panels = [p for p in (decode, prefill) if p]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    axes = list(axes[0])
    d = run["device"]
    ceilings = f'floor: {d["copy_bandwidth_gbs"]:.0f} GB/s copy, {d["bf16_gemm_tflops"]:.0f} TFLOP/s bf16'
    if decode:
        ax = axes.pop(0)
        for ctx in decode:
            rows = sorted((r for r in ctx["decode"] if "error" not in r), key=lambda r: r["batch"])
            ax.plot([r["batch"] for r in rows], [r["measured_over_floor"] for r in rows], marker="o",
                    label=f'context {ctx["context"]}')
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_title("decode step / floor", fontsize=10)
    if prefill:
        ax = axes.pop(0)
        rows = sorted(prefill, key=lambda r: r["tokens"])
        ax.plot([r["tokens"] for r in rows], [r["measured_over_floor"] for r in rows], marker="o", label="prefill")
        for r in rows:
            ax.annotate(r["floor_bound"], (r["tokens"], r["measured_over_floor"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("prompt tokens")
        ax.set_title("prefill / floor", fontsize=10)
    for ax in fig.axes:
        ax.set_yscale("log")
        ax.set_ylabel("measured / floor (1 = at the hardware floor)")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title(run) + "\n" + ceilings, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", help="a strata bench JSON")
    parser.add_argument("--out-dir", help="where to write the PNGs (default: beside the JSON)")
    args = parser.parse_args()
    with open(args.json) as f:
        run = json.load(f)
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.json))
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, os.path.splitext(os.path.basename(args.json))[0])
    written = []
    if run.get("batched_decode"):
        plot_pareto(run, stem + "_pareto.png")
        written.append(stem + "_pareto.png")
    has_floors = "copy_bandwidth_gbs" in run["device"]
    if has_floors and (run.get("batched_decode") or run.get("prefill_lengths")):
        plot_floor(run, stem + "_floor.png")
        written.append(stem + "_floor.png")
    if not written:
        raise SystemExit(f"{args.json}: nothing to plot (run strata bench with --batch, or on cuda with --prefill)")
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
