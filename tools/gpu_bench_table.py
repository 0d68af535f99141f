#!/usr/bin/env python3
"""The side-by-side table of tools/gpu-bench.sh: `python3 tools/gpu_bench_table.py OUT`.

Reads OUT/fox-ours.segments/N.json (gs-train's report.json of each call a run took; N.vram the
peak device memory nvidia-smi saw for that process, MiB), OUT/fox-gsplat.json (report of
tools/gsplat_train.py), OUT/fox-gsplat.vram, OUT/synth-budget.json and the *.command files,
and prints markdown. Iterations/s is iterations / train_s for both trainers (training loop
only, warm-up included, segments added up); gsplat's after-warm-up figure is given apart.
"""
import json
import pathlib
import sys


def load(p):
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def text(p, default="?"):
    try:
        return p.read_text().strip()
    except OSError:
        return default


def mib(v):
    return "?" if v is None else f"{v / 2**20:,.0f} MiB"


def fmt(v, spec):
    return "?" if v is None else format(v, spec)


def windows(phase_ms):
    """A report's profiled windows as a list (reports from before windows held one dict)."""
    if not phase_ms:
        return []
    return [phase_ms] if isinstance(phase_ms, dict) else list(phase_ms)


def ours_combined(out):
    segs = sorted((out / "fox-ours.segments").glob("*.json"), key=lambda p: int(p.stem))
    reps = [r for r in (load(p) for p in segs) if r]
    if not reps:
        return None
    last = reps[-1]
    train_s = sum(r["train_s"] for r in reps)
    vram = []
    for p in segs:
        v = text(p.with_suffix(".vram"), "")
        if v.replace(".", "").isdigit():
            vram.append(float(v))
    return {
        "done": not last["interrupted"],
        "iterations": last["iterations"],
        "its": last["iterations"] / train_s if train_s else None,
        "train_s": train_s,
        "wall_s": sum(r["wall_s"] for r in reps),
        "segments": len(reps),
        "psnr": last["test_psnr"], "ssim": last["test_ssim"], "views": last["test_views"],
        "gaussians": last["num_gaussians"],
        "rss": max(r["peak_rss_bytes"] or 0 for r in reps),
        "stall": sum(r["stall_fraction"] * r["train_s"] for r in reps) / train_s if train_s else None,
        "vram_smi": max(vram) * 2**20 if vram else None,
        # The device layer's own count of its buffers (reports from before the field existed
        # have none).
        "vram_alloc": max((r.get("peak_device_bytes") or 0 for r in reps), default=0) or None,
        "backend": last["backend"], "seed": last["seed"],
        # gs-train --profile-steps / --profile-at: every segment's windows, in order.
        "phases": [w for r in reps for w in windows(r.get("phase_ms"))],
    }


def gsplat_combined(out):
    r = load(out / "fox-gsplat.json")
    if not r:
        return None
    v = text(out / "fox-gsplat.vram", "")
    return {
        "done": True, "iterations": r["iterations"],
        "its": r["iterations"] / r["train_s"], "its_warm": r["iterations_per_s"],
        "train_s": r["train_s"], "wall_s": r["wall_s"], "segments": r.get("segments", 1),
        "psnr": r["test_psnr"], "ssim": r["test_ssim"], "views": r["test_views"],
        "gaussians": r["num_gaussians"], "rss": r["peak_rss_bytes"], "stall": None,
        "vram_smi": float(v) * 2**20 if v.replace(".", "").isdigit() else None,
        "vram_alloc": r["peak_device_bytes"], "backend": r["backend"], "seed": r["seed"],
        "jit": r.get("jit_compile_s"), "ssim_loss": r.get("ssim_loss"),
        "device": r.get("device_name"), "phases": windows(r.get("phase_ms")),
    }


def phase_table(ours, gs):
    """The profiled windows of both trainers, one row each, by iteration: a step's parts
    (median ms; gsplat's strategy in the statistics column, where ours updates its densification
    statistics) with the model's size and the render's intersections then, and ours'
    rasterizer stages."""
    rows = []
    for name, r in (("ramsplat", ours), ("gsplat", gs)):
        for w in (r or {}).get("phases") or []:
            rows.append((w.get("from_iteration") or 0, name, w))
    if not rows:
        return []
    cols = ("upload", "render", "loss", "backward", "stats", "optimizer", "step")
    stages = ("project", "binning", "rasterize", "rasterize_bwd", "project_bwd")
    clock = next((w.get("clock") for _, n, w in rows if n == "ramsplat"), "?")
    out = ["", f"Per-step medians (ms) over each profiled window (ramsplat: {clock}; gsplat: "
           "CUDA events); Gaussians and intersections are medians over the window:", "",
           "| from iteration | trainer | steps | Gaussians | intersections | "
           + " | ".join("stats / strategy" if c == "stats" else c for c in cols)
           + " | ns per Gaussian | " + " | ".join(stages) + " |",
           "|" + "---|" * (6 + len(cols) + len(stages))]
    for it, name, w in sorted(rows, key=lambda x: (x[0], x[1])):
        vals = [w.get("strategy") if (c == "stats" and name == "gsplat") else w.get(c)
                for c in cols]
        g, n = w.get("num_gaussians"), w.get("intersections")
        per = (1e6 * w["step"] / g) if g and w.get("step") is not None else None
        # Blank where the trainer does not split its render (gsplat; reports of ours made
        # before the CPU engine timed its stages).
        st = [w.get(k) for k in stages] if any(w.get(k) for k in stages) else [None] * 5
        out.append(f"| {it} | {name} | {w.get('steps', '?')} | {fmt(g, ',')} | {fmt(n, ',')} | "
                   + " | ".join(fmt(v, ".2f") for v in vals) + f" | {fmt(per, '.1f')} | "
                   + " | ".join("" if v is None else format(v, ".2f") for v in st) + " |")
    return out


def main():
    out = pathlib.Path(sys.argv[1])
    ours, gs = ours_combined(out), gsplat_combined(out)
    lines = ["## Fox, full resolution (1080x1920 photos, packed 1067x1902), same GPU, same split, "
             "same initial points", "",
             "| trainer | iterations | it/s | train s | wall s | test PSNR | test SSIM | Gaussians "
             "| peak device (nvidia-smi, process) | peak device (allocated) | peak host RSS "
             "| stall |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in (("ramsplat", ours), ("gsplat", gs)):
        if r is None:
            lines.append(f"| {name} | (no report) |||||||||||")
            continue
        it = f"{r['iterations']}" + ("" if r["done"] else " (unfinished)")
        lines.append(
            f"| {r['backend']} | {it} | {fmt(r['its'], '.2f')} | {fmt(r['train_s'], '.0f')} | "
            f"{fmt(r['wall_s'], '.0f')} | {fmt(r['psnr'], '.2f')} dB | {fmt(r['ssim'], '.4f')} | "
            f"{r['gaussians']:,} | {mib(r['vram_smi'])} | {mib(r['vram_alloc'])} | "
            f"{mib(r['rss'])} | "
            f"{'n/a' if r['stall'] is None else format(100 * r['stall'], '.2f') + ' %'} |")
    lines.append("")
    if ours:
        lines.append(f"ramsplat: `{text(out / 'fox-ours.command')}` (seed {ours['seed']}, "
                     f"{ours['segments']} call(s), {ours['views']} test views)")
    if gs:
        lines.append(f"gsplat: `{text(out / 'fox-gsplat.command')}` (seed {gs['seed']}, "
                     f"{gs['segments']} call(s), {gs['views']} test views; "
                     f"{fmt(gs['its_warm'], '.2f')} it/s after warm-up; JIT compile "
                     f"{fmt(gs['jit'], '.0f')} s, not counted; SSIM loss {gs['ssim_loss']}; "
                     f"{gs['device']})")
    lines += phase_table(ours, gs)
    lines += ["", "it/s = iterations / train_s (the training loop, evaluation and saving "
              "excluded). Both scored by src/eval.rs's rules (8-bit renders, PSNR peak 255, "
              "3DGS SSIM). nvidia-smi's figure is the process's whole device footprint "
              "(context, allocator pools, buffers); 'allocated' is what the trainer's own buffers "
              "held at most: gsplat's torch.cuda.max_memory_allocated, ours' report.json "
              "peak_device_bytes (the device layer's count), both without the CUDA context.", ""]
    s = load(out / "synth-budget.json")
    lines += ["## Synthetic scene under --ram-budget 2G (600 views 1600x1066, 1M SfM points)", ""]
    if s:
        v = text(out / "synth-budget.vram", "")
        lines += [
            "| iterations | it/s | stall | peak RSS | budget | within | cache hit rate | "
            "Gaussians | peak device (nvidia-smi) |",
            "|---|---|---|---|---|---|---|---|---|",
            f"| {s['iterations']}{' (time-boxed)' if s['interrupted'] else ''} | "
            f"{s['iterations_per_s']:.2f} | {100 * s['stall_fraction']:.3f} % | "
            f"{mib(s['peak_rss_bytes'])} | {mib(s['ram_budget_bytes'])} | {s['within_budget']} | "
            f"{s['cache_hit_rate']:.3f} | {s['num_gaussians']:,} | "
            f"{mib(float(v) * 2**20) if v.replace('.', '').isdigit() else '?'} |", "",
            f"command: `{text(out / 'synth-budget.command')}`", ""]
    else:
        lines += ["(no report)", ""]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
