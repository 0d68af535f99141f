#!/usr/bin/env python3
"""gsplat's rasterizer on the exact scenes of benches/cuda.rs, for a side-by-side on one GPU.

    GS_BENCH_DUMP=DIR benches/cuda        # ours; also writes DIR/<n>_{means,...,image}.f32
    python3 tools/gsplat_raster_bench.py DIR

For each dumped scene (100k and 1M Gaussians, SH degree 3, 1920x1080, identity pose,
fx = fy = 1600, principal point at the centre) it times gsplat.rasterization forward and
forward+backward with CUDA events (device-resident tensors, median of 20 after 3 warm-ups),
reports peak device memory, and compares gsplat's image with ours (PSNR, max abs difference),
an independent check of our renderer. Conventions shared with ours: pre-activation storage
(scales = exp, opacity = sigmoid), SH colour + 0.5 clamped at 0, near plane 0.01, 2D dilation
0.3, 16-pixel tiles, alpha clamp 0.999, black background.
"""
import math
import pathlib
import statistics
import sys

import numpy as np
import torch


def load(d, n, name, cols):
    a = np.fromfile(d / f"{n}_{name}.f32", dtype="<f4")
    return torch.from_numpy(a.reshape(-1, *cols) if cols else a).cuda()


def time_ms(fn, warmup=3, reps=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def main():
    d = pathlib.Path(sys.argv[1])
    from gsplat import rasterization
    import gsplat

    print(f"gsplat {gsplat.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    W, H = 1920, 1080
    K = torch.tensor([[1600.0, 0, 960.0], [0, 1600.0, 540.0], [0, 0, 1]], device="cuda")[None]
    view = torch.eye(4, device="cuda")[None]
    for n in (100_000, 1_000_000):
        if not (d / f"{n}_means.f32").exists():
            continue
        means = load(d, n, "means", (3,))
        scales = load(d, n, "log_scales", (3,)).exp()
        quats = load(d, n, "rotations", (4,))
        opac = torch.sigmoid(load(d, n, "logit_opacities", None))
        sh = load(d, n, "sh", (16, 3))
        ours = np.fromfile(d / f"{n}_image.f32", dtype="<f4").reshape(H, W, 3)

        def render():
            img, _, _ = rasterization(
                means, quats, scales, opac, sh, view, K, W, H, sh_degree=3,
                near_plane=0.01, eps2d=0.3, packed=False, tile_size=16,
                rasterize_mode="classic", render_mode="RGB")
            return img

        with torch.no_grad():
            img = render()[0].float().cpu().numpy()
        diff = np.abs(img - ours)
        mse = float((diff ** 2).mean())
        psnr = 10 * math.log10(1.0 / mse) if mse > 0 else float("inf")
        with torch.no_grad():
            t_fwd = time_ms(render)
        params = [t.clone().requires_grad_(True) for t in (means, quats, scales, opac, sh)]
        weights = torch.rand(1, H, W, 3, device="cuda")

        def fwd_bwd():
            img, _, _ = rasterization(
                *params, view, K, W, H, sh_degree=3, near_plane=0.01, eps2d=0.3,
                packed=False, tile_size=16, rasterize_mode="classic", render_mode="RGB")
            (img * weights).sum().backward()

        torch.cuda.reset_peak_memory_stats()
        t_fb = time_ms(fwd_bwd)
        peak = torch.cuda.max_memory_allocated() / 2**20
        print(f"gsplat {n} Gaussians 1920x1080: fwd {t_fwd:.2f} ms, fwd+bwd {t_fb:.2f} ms, "
              f"peak allocated {peak:.0f} MiB; image vs ours: PSNR {psnr:.1f} dB, "
              f"max |diff| {diff.max():.2e}, mean |diff| {diff.mean():.2e}")


if __name__ == "__main__":
    main()
