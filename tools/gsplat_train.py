#!/usr/bin/env python3
"""gsplat's default 3DGS training, scored by ramsplat's rules, for a side-by-side benchmark.

    python3 tools/gsplat_train.py DATA OUT [--iterations 30000] [--eval] [--init ply|random]
                                  [--seed S] [--check] [--compile-only]

DATA is a nerfstudio-style folder (what `gs-pack export PACK -o DATA` writes): `images/`,
optional `masks/` (8-bit, 0 = excluded), `transforms.json` with per-frame PINHOLE intrinsics
(`w h fl_x fl_y cx cy`, top-level values as defaults), `transform_matrix` (camera-to-world,
OpenGL axes), optional `mask_path`, top-level `train_filenames` / `test_filenames` and
optionally `ply_file_path` (binary little-endian PLY, float x y z, uchar red green blue).

The training is gsplat 1.5.3's examples/simple_trainer.py with its default configuration,
rebuilt on gsplat's public API (`gsplat.rasterization`, `gsplat.strategy.DefaultStrategy`):
- world normalised as its COLMAP parser does (cameras rotated up / re-centred on their focus
  point / scaled to median distance 1, then the points' principal axes, then the up-side-down
  fix); scene scale = 1.1 x the largest camera distance from the cameras' mean;
- init from the PLY (`--init ply`, default when the folder has one) or 100,000 random points
  in a cube of half-side 3 x scene scale (`--init random`); scales = log of the mean distance
  to the 3 nearest neighbours, quaternions uniform in [0, 1)^4 (normalised by the
  rasteriser), opacity 0.1, SH degree 3 with DC from the point colour, rest 0;
- one Adam per parameter (eps 1e-15): means 1.6e-4 x scene scale decaying exponentially to
  1 % at the last step, scales 5e-3, quats 1e-3, opacities 5e-2, sh0 2.5e-3, shN 2.5e-3/20;
- batch 1, a fresh shuffle of the training views every epoch; SH degree +1 every 1000 steps;
  near 0.01, far 1e10, classic rasterisation (`--antialiased`: simple_trainer's flag of the
  same name, rasterize_mode="antialiased"), not packed, black background;
- loss 0.8 L1 + 0.2 (1 - SSIM), SSIM with an 11x11 Gaussian window (sigma 1.5) over the
  "valid" region; the loss is read back every step, as simple_trainer's progress bar does;
- DefaultStrategy() with its defaults (grow grad2d 2e-4, refine 500..15000 every 100, opacity
  reset every 3000, prune opacity 0.005, ...); masked pixels zeroed in render and target.
  `--absgrad` (simple_trainer's flag, as gs-train --absgrad): DefaultStrategy(absgrad=True)
  and rasterization(absgrad=True), with grow grad2d 8e-4 (gs-train's default for it) unless
  `--grow-grad2d` says otherwise. `--revised-opacity`: DefaultStrategy(revised_opacity=True)
  (as gs-train --revised-opacity).
Differences from simple_trainer.py, kept on purpose: the images are decoded once and kept in
pinned host memory (copied to the device each step), where simple_trainer decodes them in
DataLoader workers; no viewer, TensorBoard, checkpoints, LPIPS or trajectory video; the SSIM
loss is fused_ssim only where that package is installed (it is not on PyPI), else the same
formula as separable torch convolutions (checked against the numpy SSIM on the valid region).

Evaluation (`--eval`, at the end) follows ramsplat's src/eval.rs exactly: the render is
clamped and quantised to 8 bits (x255, round half up), PSNR on the 8-bit images (peak 255),
SSIM (11x11 Gaussian window, sigma 1.5, C1 = 0.01^2, C2 = 0.03^2, zero-padded "same"
convolution, mean over every pixel and channel) on the 8-bit images / 255; masked views:
excluded pixels black in both, PSNR over the used pixels; RGBA views composited over white and
rendered over white. Those functions need numpy only (`score`, `ssim_u8`, `psnr_u8`) and are
checked against gs-render's numbers by tools/gsplat_metrics_check.py.

OUT/report.json uses ramsplat's report keys where they mean the same (test_psnr, test_ssim,
test_views, iterations, iterations_per_s, train_s, wall_s, num_gaussians, peak_rss_bytes,
backend, seed) plus peak_device_bytes (torch.cuda.max_memory_allocated). iterations_per_s
counts the steps after --warmup steps, between two CUDA synchronisations; train_s is the whole
training loop (synchronised). gsplat compiles its CUDA code on first use (cached under
$TORCH_EXTENSIONS_DIR); that happens before any timing starts and is reported as
jit_compile_s. `--stop-after S` ends the training loop S seconds after the process started and
saves everything a continuation needs to OUT/resume.pt (exit status 75); `--resume` continues
from it (model, Adam moments, schedule, strategy state, sampling order and RNG restored; the
report adds up the segments).
`--profile-steps N` (default 200) times the phases of N steps after the warm-up with CUDA
events (host clocks without a GPU): upload, render, loss (L1, SSIM and the strategy's
pre-backward hook), backward, optimisers (after the loss read-back), strategy; the medians go to
the log and to report.json's `phase_ms`, a list of windows. An event pair measures the stream's
time between two points, idle time waiting for the host's launches included, so the phases add
up to the step. `--profile-at ITER...` times N steps from each of these 1-based iterations
instead (as gs-train's option of that name); each window also gives the median Gaussians after
a step and tile intersections of a render (the length of gsplat's `flatten_ids`).
`--compile-only` compiles and exits; `--check` loads DATA, builds the split,
the initial model, the optimisers and the strategy on the CPU and exits (no GPU needed).
"""
import argparse
import json
import math
import os
import pathlib
import random
import sys
import time

import numpy as np

# ---------------------------------------------------------------------------------------------
# Scoring: ramsplat's src/eval.rs and src/metrics.rs, in numpy (no torch needed).

SSIM_WINDOW = 11
SSIM_SIGMA = 1.5
SSIM_C1 = 0.01**2
SSIM_C2 = 0.03**2


def window_1d():
    t = np.arange(SSIM_WINDOW, dtype=np.float64) - SSIM_WINDOW // 2
    w = np.exp(-t * t / (2.0 * SSIM_SIGMA * SSIM_SIGMA))
    return w / w.sum()


def _blur_same(plane, win):
    """Separable zero-padded 'same' convolution of a 2-D plane with the 1-D window."""
    r = len(win) // 2
    h, w = plane.shape
    p = np.zeros((h, w + 2 * r), dtype=np.float64)
    p[:, r:r + w] = plane
    tmp = np.zeros((h, w), dtype=np.float64)
    for k, wk in enumerate(win):
        tmp += wk * p[:, k:k + w]
    p = np.zeros((h + 2 * r, w), dtype=np.float64)
    p[r:r + h] = tmp
    out = np.zeros((h, w), dtype=np.float64)
    for k, wk in enumerate(win):
        out += wk * p[k:k + h]
    return out


def ssim_unit(a, b):
    """Mean SSIM of two H x W x 3 float images in [0, 1] (ramsplat's convention)."""
    win = window_1d()
    total = 0.0
    for c in range(3):
        x = a[..., c].astype(np.float64)
        y = b[..., c].astype(np.float64)
        mx, my = _blur_same(x, win), _blur_same(y, win)
        sxx = _blur_same(x * x, win) - mx * mx
        syy = _blur_same(y * y, win) - my * my
        sxy = _blur_same(x * y, win) - mx * my
        s = ((2 * mx * my + SSIM_C1) * (2 * sxy + SSIM_C2)) / (
            (mx * mx + my * my + SSIM_C1) * (sxx + syy + SSIM_C2))
        total += float(s.sum())
    return total / a.size


def ssim_u8(a, b):
    """Mean SSIM of two H x W x 3 uint8 images, scaled to [0, 1]."""
    return ssim_unit(a.astype(np.float64) / 255.0, b.astype(np.float64) / 255.0)


def psnr_from_mse(mse, peak=255.0):
    return math.inf if mse == 0 else 10.0 * math.log10(peak * peak / mse)


def psnr_u8(a, b):
    d = a.astype(np.int64) - b.astype(np.int64)
    return psnr_from_mse(float((d * d).sum()) / d.size)


def to_rgb8(image):
    """Float colour to 8 bits: x255, round half up, clamp (src/eval.rs `to_rgb8`)."""
    v = np.asarray(image, dtype=np.float32) * np.float32(255.0) + np.float32(0.5)
    return np.clip(np.floor(v), 0, 255).astype(np.uint8)


def score(render, gt, mask=None):
    """(PSNR, SSIM) of a float H x W x 3 render against the uint8 ground truth; `mask` (H x W,
    0 = excluded) scores the used pixels only (src/eval.rs `score_masked`)."""
    r8 = to_rgb8(render)
    if mask is None:
        return psnr_u8(r8, gt), ssim_u8(r8, gt)
    keep = (np.asarray(mask) != 0)[..., None]
    r8 = np.where(keep, r8, 0).astype(np.uint8)
    g8 = np.where(keep, gt, 0).astype(np.uint8)
    used = int(keep.sum())
    d = r8.astype(np.int64) - g8.astype(np.int64)
    psnr = math.nan if used == 0 else psnr_from_mse(float((d * d).sum()) / (3 * used))
    return psnr, ssim_u8(r8, g8)


def composite_rgba8(rgba, bg):
    """RGBA8 (straight alpha) over a background in [0, 1]^3, rounded to RGB8 (src/train/alpha.rs)."""
    a = rgba[..., 3:4].astype(np.float32) * np.float32(1.0 / 255.0)
    bgv = np.clip(np.asarray(bg, dtype=np.float32), 0, 1) * np.float32(255.0)
    v = a * rgba[..., :3].astype(np.float32) + (np.float32(1.0) - a) * bgv
    return np.clip(np.round(v), 0, 255).astype(np.uint8)


def mean_scores(views):
    finite = [v["psnr"] for v in views if v["psnr"] is not None]
    psnr = sum(finite) / len(finite) if finite else None
    ssim = sum(v["ssim"] for v in views) / len(views) if views else None
    return psnr, ssim


# ---------------------------------------------------------------------------------------------
# Data.

def log(msg):
    print(msg, flush=True)


def peak_rss_bytes():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def read_ply_points(path):
    """x y z (float) and red green blue (uchar) of a binary little-endian PLY's vertices."""
    with open(path, "rb") as f:
        header = []
        while True:
            line = f.readline()
            if not line:
                raise SystemExit(f"{path}: no end_header")
            line = line.decode("ascii", "replace").strip()
            header.append(line)
            if line == "end_header":
                break
        body = f.read()
    if "format binary_little_endian 1.0" not in header:
        raise SystemExit(f"{path}: only binary_little_endian PLY is read")
    types = {"float": "<f4", "float32": "<f4", "double": "<f8", "uchar": "u1", "uint8": "u1",
             "int": "<i4", "uint": "<u4", "short": "<i2", "ushort": "<u2"}
    count, fields, in_vertex = 0, [], False
    for line in header:
        parts = line.split()
        if parts[:1] == ["element"]:
            in_vertex = parts[1] == "vertex"
            if in_vertex:
                count = int(parts[2])
        elif parts[:1] == ["property"] and in_vertex:
            if parts[1] == "list":
                raise SystemExit(f"{path}: list properties in vertices are not supported")
            fields.append((parts[2], types[parts[1]]))
    data = np.frombuffer(body, dtype=np.dtype(fields), count=count)
    xyz = np.stack([data[k] for k in ("x", "y", "z")], axis=1).astype(np.float64)
    if all(k in data.dtype.names for k in ("red", "green", "blue")):
        rgb = np.stack([data[k] for k in ("red", "green", "blue")], axis=1).astype(np.float64)
    else:
        rgb = np.full((count, 3), 127.5)
    return xyz, rgb


def load_image(path):
    from PIL import Image
    im = Image.open(path)
    if im.mode not in ("RGB", "RGBA"):
        im = im.convert("RGBA" if "A" in im.getbands() else "RGB")
    return np.asarray(im)


def load_dataset(data_dir, want_images=True):
    """Frames of DATA/transforms.json: name, K, OpenCV camera-to-world, image, mask."""
    data_dir = pathlib.Path(data_dir)
    meta = json.load(open(data_dir / "transforms.json"))
    if meta.get("camera_model", "PINHOLE").upper() != "PINHOLE":
        raise SystemExit(f"{data_dir}: camera_model {meta['camera_model']} (PINHOLE only)")
    frames = []
    for fr in meta["frames"]:
        g = lambda k: fr.get(k, meta.get(k))  # noqa: E731 (per-frame value, else top-level)
        missing = [k for k in ("w", "h", "fl_x", "fl_y", "cx", "cy") if g(k) is None]
        if missing:
            raise SystemExit(f"{fr['file_path']}: no {missing} in transforms.json")
        c2w = np.asarray(fr["transform_matrix"], dtype=np.float64).reshape(4, 4).copy()
        c2w[:3, 1:3] *= -1.0  # OpenGL (y up, z back) -> OpenCV (y down, z forward)
        K = np.array([[g("fl_x"), 0, g("cx")], [0, g("fl_y"), g("cy")], [0, 0, 1]], np.float64)
        f = {"name": fr["file_path"], "w": int(g("w")), "h": int(g("h")), "K": K, "c2w": c2w,
             "mask_path": fr.get("mask_path")}
        if want_images:
            img = load_image(data_dir / fr["file_path"])
            if img.shape[:2] != (f["h"], f["w"]):
                raise SystemExit(f"{fr['file_path']}: {img.shape[1]}x{img.shape[0]} pixels, "
                                 f"transforms.json says {f['w']}x{f['h']}")
            f["image"] = img
            if f["mask_path"]:
                m = np.array(__import__("PIL.Image").Image.open(data_dir / f["mask_path"])
                               .convert("L"))
                f["mask"] = m != 0
        frames.append(f)
    by_name = {f["name"]: i for i, f in enumerate(frames)}
    split = {}
    for key in ("train_filenames", "test_filenames"):
        names = meta.get(key)
        if names is None:
            raise SystemExit(f"{data_dir}/transforms.json: no {key}")
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise SystemExit(f"{key} names frames that do not exist: {unknown[:3]}")
        split[key] = [by_name[n] for n in names]
    ply = meta.get("ply_file_path")
    points = read_ply_points(data_dir / ply) if ply else None
    return frames, split["train_filenames"], split["test_filenames"], points


def normalize_world(c2ws, points):
    """simple_trainer's `normalize_world_space`: a similarity from the cameras (up axis, focus
    centre, median distance 1), then the points' principal axes, then the up-side-down fix.
    Returns the transformed cameras and points. Rendering is invariant to it; it matters for
    near/far, the random-init cube and the absolute thresholds of the strategy."""
    R, t = c2ws[:, :3, :3], c2ws[:, :3, 3]
    up = (R @ np.array([0.0, -1.0, 0.0])).mean(axis=0)
    up /= np.linalg.norm(up)
    cam_up = np.array([0.0, -1.0, 0.0])
    c = float(up @ cam_up)
    v = np.cross(up, cam_up)
    vx = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    Ra = np.eye(3) + vx + vx @ vx / (1 + c) if c > -1 else np.diag([-1.0, 1.0, 1.0])
    R2 = Ra @ R
    t2 = t @ Ra.T
    fwd = R2[:, :, 2]
    nearest = t2 + ((-t2) * fwd).sum(-1, keepdims=True) * fwd
    shift = -np.median(nearest, axis=0)
    s = 1.0 / np.median(np.linalg.norm(t2 + shift, axis=-1))
    T1 = np.eye(4)
    T1[:3, :3] = s * Ra
    T1[:3, 3] = s * shift

    def apply(T, c2ws, pts):
        out = T[None] @ c2ws
        scale = np.linalg.norm(out[:, :3, 0], axis=-1)
        out[:, :3, :3] /= scale[:, None, None]
        return out, (pts @ T[:3, :3].T + T[:3, 3] if pts is not None else None)

    c2ws, points = apply(T1, c2ws, points)
    if points is not None and len(points) >= 3:
        centre = np.median(points, axis=0)
        evals, evecs = np.linalg.eigh(np.cov(points - centre, rowvar=False))
        evecs = evecs[:, np.argsort(evals)[::-1]]
        if np.linalg.det(evecs) < 0:
            evecs[:, 0] *= -1
        T2 = np.eye(4)
        T2[:3, :3] = evecs.T
        T2[:3, 3] = -evecs.T @ centre
        c2ws, points = apply(T2, c2ws, points)
        if np.median(points[:, 2]) > np.mean(points[:, 2]):
            c2ws, points = apply(np.diag([1.0, -1.0, -1.0, 1.0]), c2ws, points)
    return c2ws, points


def knn_mean_dist(points, k=3):
    """Mean distance of each point to its k nearest other points (simple_trainer's knn init)."""
    import torch
    try:
        from scipy.spatial import cKDTree
        d, _ = cKDTree(points).query(points, k=k + 1)
        return torch.from_numpy(np.sqrt((d[:, 1:] ** 2).mean(-1))).float()
    except ImportError:
        pass
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.from_numpy(points).float().to(dev)
    out = torch.empty(len(x), device=dev)
    step = 4096 if dev == "cuda" else 1024
    for i in range(0, len(x), step):
        d2 = torch.cdist(x[i:i + step], x).square()
        out[i:i + step] = d2.topk(k + 1, dim=1, largest=False).values[:, 1:].mean(-1).sqrt()
    return out.cpu()


class PhaseTimer:
    """Per-phase medians over windows of steps: CUDA events on the current stream when `cuda`,
    else host clocks (a CPU run is synchronous). `firsts` are the windows' first steps
    (0-based), each window `steps` long. `mark(step, name)` closes the phase `name` that began
    at the previous mark of that step (the first mark, "start", opens it); `size(step,
    gaussians, intersections)` records the step's work."""

    def __init__(self, cuda, firsts, steps):
        if cuda:
            import torch
            self.torch = torch
        self.cuda = cuda
        self.windows = [range(f, f + max(steps, 0)) for f in firsts]
        self.marks = {}  # step -> [(name, event or seconds)]
        self.sizes = {}  # step -> (Gaussians after the step, intersections or None)

    def timed(self, step):
        return any(step in w for w in self.windows)

    def mark(self, step, name):
        if not self.timed(step):
            return
        if self.cuda:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
        else:
            e = time.perf_counter()
        self.marks.setdefault(step, []).append((name, e))

    def size(self, step, gaussians, intersections):
        if self.timed(step):
            self.sizes[step] = (gaussians, intersections)

    def medians(self):
        """One dict per window with timed steps, in order: {phase: median ms, "step": median
        total, "from_iteration" (1-based), "steps", "num_gaussians", "intersections"} (the
        last two medians too; intersections None when the rasteriser gives none)."""
        if not self.marks:
            return []
        if self.cuda:
            self.torch.cuda.synchronize()
        out = []
        for w in self.windows:
            steps = sorted(s for s in self.marks if s in w)
            if not steps:
                continue
            per, totals = {}, []
            for s in steps:
                marks, total = self.marks[s], 0.0
                for (_, a), (name, b) in zip(marks, marks[1:]):
                    ms = a.elapsed_time(b) if self.cuda else 1e3 * (b - a)
                    per.setdefault(name, []).append(ms)
                    total += ms
                totals.append(total)
            win = {k: float(np.median(v)) for k, v in per.items()}
            win["step"] = float(np.median(totals))
            sizes = [self.sizes[s] for s in steps if s in self.sizes]
            gs = [g for g, _ in sizes]
            isects = [n for _, n in sizes if n is not None]
            win.update({"from_iteration": steps[0] + 1, "steps": len(steps),
                        "num_gaussians": int(np.median(gs)) if gs else None,
                        "intersections": int(np.median(isects)) if isects else None})
            out.append(win)
        return out


# ---------------------------------------------------------------------------------------------
# Model and training.

SH_C0 = 0.28209479177387814
LRS = {"means": 1.6e-4, "scales": 5e-3, "quats": 1e-3, "opacities": 5e-2, "sh0": 2.5e-3,
       "shN": 2.5e-3 / 20}


def build_model(points_xyz, points_rgb, scene_scale, device, sh_degree=3, init_opacity=0.1):
    import torch
    pts = torch.from_numpy(points_xyz).float()
    rgb = torch.from_numpy(points_rgb / 255.0).float()
    dist = knn_mean_dist(points_xyz).clamp_min(1e-7)
    n = len(pts)
    colours = torch.zeros((n, (sh_degree + 1) ** 2, 3))
    colours[:, 0, :] = (rgb - 0.5) / SH_C0
    params = {
        "means": pts,
        "scales": torch.log(dist).unsqueeze(-1).repeat(1, 3),
        "quats": torch.rand((n, 4)),
        "opacities": torch.logit(torch.full((n,), init_opacity)),
        "sh0": colours[:, :1, :],
        "shN": colours[:, 1:, :],
    }
    return with_optimizers(params, scene_scale, device)


def with_optimizers(params, scene_scale, device):
    """The parameters as a ParameterDict on `device` and one Adam each (simple_trainer's)."""
    import torch
    splats = torch.nn.ParameterDict(
        {k: torch.nn.Parameter(v) for k, v in params.items()}).to(device)
    lr = dict(LRS, means=LRS["means"] * scene_scale)
    optimizers = {k: torch.optim.Adam([{"params": splats[k], "lr": lr[k], "name": k}],
                                      eps=1e-15, betas=(0.9, 0.999))
                  for k in params}
    return splats, optimizers


def ssim_loss_fn():
    """SSIM over the valid region (the loss takes 1 - it): fused_ssim when installed (not on
    PyPI; simple_trainer uses it), else the same formula as separable torch convolutions."""
    import torch
    import torch.nn.functional as F
    try:
        from fused_ssim import fused_ssim

        def fused(a, b):
            return fused_ssim(a, b, padding="valid")
        return fused, "fused_ssim (valid)"
    except ImportError:
        pass
    win1 = torch.from_numpy(window_1d()).float()
    cache = {}

    def ssim(a, b):  # a, b: [1, 3, H, W]
        w = cache.get(a.device)
        if w is None:
            w = win1.to(a.device)
            w = (w.view(1, 1, 1, 11).expand(15, 1, 1, 11).contiguous(),
                 w.view(1, 1, 11, 1).expand(15, 1, 11, 1).contiguous())
            cache[a.device] = w
        # The five local statistics of the three channels in one separable pass (11 + 11 taps).
        st = torch.cat([a, b, a * a, b * b, a * b], 1)
        st = F.conv2d(F.conv2d(st, w[0], groups=15), w[1], groups=15)
        mu_a, mu_b, paa, pbb, pab = st.split(3, 1)
        saa, sbb, sab = paa - mu_a * mu_a, pbb - mu_b * mu_b, pab - mu_a * mu_b
        m = ((2 * mu_a * mu_b + SSIM_C1) * (2 * sab + SSIM_C2)) / (
            (mu_a * mu_a + mu_b * mu_b + SSIM_C1) * (saa + sbb + SSIM_C2))
        return m.mean()
    return ssim, "torch separable conv2d (valid), fused_ssim's formula"


def fake_rasterization(means, quats, scales, opacities, colors, viewmats, Ks, width, height,
                       **_):
    """CPU stand-in for gsplat.rasterization (GSPLAT_TRAIN_FAKE_RASTER=1, for testing this
    script's loop, strategy calls, evaluation and report without a GPU): projects the means
    (differentiably, so the strategy's gradient statistics run) and paints a flat image of the
    opacity-weighted DC colours. Not a renderer."""
    import torch
    cam = means @ viewmats[0, :3, :3].T + viewmats[0, :3, 3]
    z = cam[:, 2:3].clamp_min(1e-3)
    means2d = (cam[:, :2] / z) @ Ks[0, :2, :2].T + Ks[0, :2, 2]
    means2d = means2d[None]
    radii = torch.where(cam[:, 2:3] > 0.01, 3, 0).expand(-1, 2)[None].int()
    w = opacities[:, None]
    dc = 0.5 + SH_C0 * colors[:, 0, :]
    flat = (w * dc).sum(0) / w.sum().clamp_min(1e-6)
    flat = flat + 1e-4 * (means2d.mean() + scales.mean() + quats.mean())
    img = flat.expand(1, height, width, 3)
    alphas = torch.ones(1, height, width, 1)
    info = {"means2d": means2d, "radii": radii, "width": width, "height": height,
            "n_cameras": 1, "gaussian_ids": None}
    return img, alphas, info


def compile_gsplat():
    """Imports gsplat's CUDA extension (JIT-compiling it if needed); exits with the compiler's
    error tail on failure. Returns the seconds it took."""
    t0 = time.time()
    try:
        from gsplat.cuda._backend import _C
    except Exception as e:  # noqa: BLE001 (torch raises RuntimeError/OSError/ImportError)
        text = str(e)
        tail = "\n".join(text.splitlines()[-60:])
        sys.stderr.write(f"gsplat_train: gsplat's CUDA extension failed to build or load "
                         f"({type(e).__name__}). Last lines of the compiler output:\n{tail}\n"
                         f"Build directory: $TORCH_EXTENSIONS_DIR="
                         f"{os.environ.get('TORCH_EXTENSIONS_DIR', '(torch default)')}; "
                         f"rerun with VERBOSE=1 for the full log.\n")
        raise SystemExit(4)
    if _C is None:
        sys.stderr.write("gsplat_train: gsplat found no CUDA toolkit (nvcc / CUDA_HOME), so "
                         "its CUDA extension was not built; set CUDA_HOME=/usr/local/cuda.\n")
        raise SystemExit(4)
    return time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--iterations", type=int, default=30_000)
    ap.add_argument("--eval", action="store_true", help="score test_filenames at the end")
    ap.add_argument("--init", choices=["ply", "random"], default=None,
                    help="default: ply when transforms.json names one, else random")
    ap.add_argument("--init-points", type=int, default=100_000, help="--init random count")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--sh-degree", type=int, default=3)
    ap.add_argument("--no-normalize", action="store_true", help="keep the world as given")
    ap.add_argument("--warmup", type=int, default=100, help="steps before iterations_per_s")
    ap.add_argument("--profile-steps", type=int, default=200,
                    help="time the phases of this many steps after the warm-up (0: none)")
    ap.add_argument("--profile-at", type=int, nargs="+", default=None, metavar="ITER",
                    help="time --profile-steps steps from each of these 1-based iterations "
                         "instead (ascending, windows apart)")
    ap.add_argument("--log-every", type=int, default=500)
    ap.add_argument("--white-background", action="store_true")
    ap.add_argument("--antialiased", action="store_true",
                    help='rasterize_mode="antialiased" (as gs-train --antialiased)')
    ap.add_argument("--absgrad", action="store_true",
                    help="AbsGS densification (as gs-train --absgrad; grow grad2d 8e-4)")
    ap.add_argument("--grow-grad2d", type=float, default=None,
                    help="DefaultStrategy's grow_grad2d (gs-train --densify-grad-threshold); "
                         "default 2e-4, or 8e-4 with --absgrad")
    ap.add_argument("--revised-opacity", action="store_true",
                    help="split children at opacity 1 - sqrt(1 - o) (as gs-train --revised-opacity)")
    ap.add_argument("--check", action="store_true",
                    help="build data, split, init, optimisers and strategy on the CPU; exit")
    ap.add_argument("--compile-only", action="store_true",
                    help="build/load gsplat's CUDA extension and exit")
    ap.add_argument("--stop-after", type=float, default=None, metavar="S",
                    help="stop training S seconds after the process started (leave time for the "
                    "save), writing OUT/resume.pt and exiting with 75")
    ap.add_argument("--resume", action="store_true",
                    help="continue from OUT/resume.pt (same DATA and options)")
    args = ap.parse_args()
    if not args.compile_only and (args.data is None or args.out is None):
        ap.error("DATA and OUT are required")
    if args.profile_at:
        at = args.profile_at
        if args.profile_steps <= 0:
            ap.error("--profile-at needs --profile-steps N, the number of steps each window times")
        if at[0] < 1 or any(b < a + args.profile_steps for a, b in zip(at, at[1:])):
            ap.error(f"--profile-at {at}: each window of --profile-steps {args.profile_steps} "
                     "must start at iteration 1 or later and after the previous window ends")
    t_start = time.time()
    out = pathlib.Path(args.out or ".")

    import torch
    import gsplat
    from gsplat import rasterization
    from gsplat.strategy import DefaultStrategy

    fake = os.environ.get("GSPLAT_TRAIN_FAKE_RASTER") == "1"
    if fake:
        if args.absgrad:
            ap.error("--absgrad needs gsplat's rasteriser (the fake one has no absolute "
                     "gradient)")
        rasterization = fake_rasterization  # noqa: F811
    cuda = not (args.check or fake)
    if args.compile_only and fake:
        log("gsplat_train: GSPLAT_TRAIN_FAKE_RASTER=1, nothing to compile")
        return
    if args.compile_only:
        log(f"gsplat {gsplat.__version__}: CUDA extension ready in {compile_gsplat():.1f} s")
        return
    if not cuda:
        device = "cpu"
        jit_s = None
    else:
        if not torch.cuda.is_available():
            raise SystemExit("gsplat_train: no CUDA device (use --check for a CPU dry run)")
        device = "cuda"
        jit_s = compile_gsplat()
        log(f"gsplat {gsplat.__version__}: CUDA extension ready in {jit_s:.1f} s")

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    frames, train_idx, test_idx, points = load_dataset(args.data)
    c2ws = np.stack([f["c2w"] for f in frames])
    init = args.init or ("ply" if points is not None else "random")
    if init == "ply" and points is None:
        raise SystemExit("--init ply: transforms.json names no ply_file_path")
    pts = points[0] if init == "ply" else None
    if not args.no_normalize:
        c2ws, pts = normalize_world(c2ws, pts)
    centres = c2ws[:, :3, 3]
    scene_scale = float(np.linalg.norm(centres - centres.mean(0), axis=1).max()) * 1.1
    if init == "random":
        n = args.init_points
        pts = 3.0 * scene_scale * (torch.rand((n, 3)) * 2 - 1).double().numpy()
        rgb = torch.rand((n, 3)).double().numpy() * 255.0
    else:
        rgb = points[1]
    resume_path = out / "resume.pt"
    ck = None
    if args.resume:
        if not resume_path.exists():
            raise SystemExit(f"--resume: no {resume_path}")
        ck = torch.load(resume_path, map_location="cpu", weights_only=False)
        if ck["iterations"] != args.iterations or ck["seed"] != args.seed:
            raise SystemExit(f"--resume: {resume_path} was saved by a run of "
                             f"{ck['iterations']} iterations, seed {ck['seed']}")
        splats, optimizers = with_optimizers(ck["splats"], scene_scale, device)
        for k, o in optimizers.items():
            o.load_state_dict(ck["optimizers"][k])
        log(f"resuming at iteration {ck['step']} with {len(splats['means'])} Gaussians")
    else:
        splats, optimizers = build_model(pts, rgb, scene_scale, device, args.sh_degree)
    grow = args.grow_grad2d if args.grow_grad2d is not None else (8e-4 if args.absgrad else 2e-4)
    strategy = DefaultStrategy(absgrad=args.absgrad, grow_grad2d=grow,
                               revised_opacity=args.revised_opacity)
    strategy.check_sanity(splats, optimizers)
    state = strategy.initialize_state(scene_scale=scene_scale)
    means_sched = torch.optim.lr_scheduler.ExponentialLR(
        optimizers["means"], gamma=0.01 ** (1.0 / max(args.iterations, 1)))
    if ck is not None:
        means_sched.load_state_dict(ck["scheduler"])
        state = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in ck["state"].items()}
    ssim_fn, ssim_impl = ssim_loss_fn()
    sizes = sorted({(f["w"], f["h"]) for f in frames})
    log(f"data: {len(frames)} views ({len(train_idx)} train, {len(test_idx)} test), sizes "
        f"{sizes[:3]}{'...' if len(sizes) > 3 else ''}, {sum('mask' in f for f in frames)} "
        f"masked, {sum(f['image'].shape[2] == 4 for f in frames)} RGBA; init {init}: "
        f"{len(pts)} points; scene scale {scene_scale:.4f}; SSIM loss: {ssim_impl}")
    if args.check:
        log(f"check: {len(splats['means'])} Gaussians, optimisers "
            f"{ {k: o.param_groups[0]['lr'] for k, o in optimizers.items()} }, strategy "
            f"{type(strategy).__name__}(refine {strategy.refine_start_iter}.."
            f"{strategy.refine_stop_iter}/{strategy.refine_every}, reset "
            f"{strategy.reset_every}); OK")
        return

    bg = 1.0 if args.white_background else 0.0

    def target_rgb8(f, background):
        img = f["image"]
        return composite_rgba8(img, [background] * 3) if img.shape[2] == 4 else img

    # Training targets as pinned host uint8 (what a pinned DataLoader hands over), masks too.
    host = {}
    for i in train_idx:
        f = frames[i]
        t = torch.from_numpy(np.array(target_rgb8(f, bg), copy=True))
        m = torch.from_numpy(f["mask"]) if "mask" in f else None
        t, m = (t.pin_memory(), m.pin_memory() if m is not None else None) if cuda else (t, m)
        host[i] = (t, m)
    Ks = {i: torch.from_numpy(frames[i]["K"]).float().to(device) for i in range(len(frames))}
    viewmats = {i: torch.linalg.inv(torch.from_numpy(c2ws[i]).float()).to(device)
                for i in range(len(frames))}
    bgs = torch.full((1, 3), bg, device=device) if bg else None

    def render(i, sh_degree):
        f = frames[i]
        colours, alphas, info = rasterization(
            means=splats["means"], quats=splats["quats"], scales=torch.exp(splats["scales"]),
            opacities=torch.sigmoid(splats["opacities"]),
            colors=torch.cat([splats["sh0"], splats["shN"]], 1),
            viewmats=viewmats[i][None], Ks=Ks[i][None], width=f["w"], height=f["h"],
            sh_degree=sh_degree, near_plane=0.01, far_plane=1e10, packed=False,
            absgrad=args.absgrad, sparse_grad=False,
            rasterize_mode="antialiased" if args.antialiased else "classic",
            camera_model="pinhole", backgrounds=bgs)
        return colours, alphas, info

    out.mkdir(parents=True, exist_ok=True)
    order, pos, first = [], 0, 0
    # Accumulated over the segments of a run stopped by --stop-after and resumed.
    acc = {"train_s": 0.0, "timed_s": 0.0, "timed_iters": 0, "wall_s": 0.0, "segments": 0,
           "peak_rss_bytes": 0, "peak_device_bytes": 0, "peak_device_reserved_bytes": 0,
           "jit_compile_s": jit_s}
    if ck is not None:
        first, order, pos, acc = ck["step"], ck["order"], ck["pos"], ck["acc"]
        random.setstate(ck["rng"]["python"])
        np.random.set_state(ck["rng"]["numpy"])
        torch.set_rng_state(ck["rng"]["torch"])
        if cuda and ck["rng"]["cuda"] is not None:
            torch.cuda.set_rng_state(ck["rng"]["cuda"])
        del ck
    warm_at = first + args.warmup
    # Windows by 0-based step: iteration k is step k - 1.
    prof = PhaseTimer(cuda, [a - 1 for a in args.profile_at] if args.profile_at else [warm_at],
                      args.profile_steps)
    def sync():
        if cuda:
            torch.cuda.synchronize()

    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    t_warm = None
    t_log, it_log = t0, 0
    loss_acc = 0.0
    stopped = None
    for step in range(first, args.iterations):
        if step == warm_at:
            sync()
            t_warm = time.time()
        if args.stop_after is not None and time.time() - t_start > args.stop_after:
            stopped = step
            break
        if pos == len(order):
            order, pos = list(np.random.permutation(train_idx)), 0
        i = int(order[pos])
        pos += 1
        prof.mark(step, "start")
        t, m = host[i]
        pixels = t.to(device, non_blocking=True).float().div_(255.0)[None]
        prof.mark(step, "upload")
        sh = min(step // 1000, args.sh_degree)
        colours, _, info = render(i, sh)
        prof.mark(step, "render")
        if m is not None:
            keep = m.to(device, non_blocking=True)[None, ..., None]
            colours = colours * keep
            pixels = pixels * keep
        strategy.step_pre_backward(splats, optimizers, state, step, info)
        l1 = torch.nn.functional.l1_loss(colours, pixels)
        s = ssim_fn(colours.permute(0, 3, 1, 2), pixels.permute(0, 3, 1, 2))
        loss = 0.8 * l1 + 0.2 * (1.0 - s)
        prof.mark(step, "loss")
        loss.backward()
        prof.mark(step, "backward")
        # simple_trainer reads the loss every step (its progress bar); so do we (and ours reads
        # its loss every step too), so that both pay the same per-step synchronisation.
        loss_acc = float(loss.item())
        for o in optimizers.values():
            o.step()
            o.zero_grad(set_to_none=True)
        means_sched.step()
        prof.mark(step, "optimizer")
        strategy.step_post_backward(splats, optimizers, state, step, info, packed=False)
        prof.mark(step, "strategy")
        # Shapes only: neither count waits for the device.
        isects = info.get("flatten_ids")
        prof.size(step, len(splats["means"]), None if isects is None else int(isects.numel()))
        if (step + 1) % args.log_every == 0 or step + 1 == args.iterations:
            now = time.time()
            log(f"iteration {step + 1}/{args.iterations} loss {loss_acc:.4f} Gaussians "
                f"{len(splats['means'])} {(step + 1 - it_log) / (now - t_log):.1f} it/s")
            t_log, it_log = now, step + 1
    sync()
    t1 = time.time()
    end = args.iterations if stopped is None else stopped
    sizes = ("from_iteration", "steps", "num_gaussians", "intersections")
    for win in prof.medians():
        # A run resumed over several segments lists each segment's windows.
        acc.setdefault("phase_ms", []).append(win)
        log(f"phases (median ms over {win['steps']} steps from iteration "
            f"{win['from_iteration']}; {win['num_gaussians']} Gaussians, "
            f"{win['intersections']} intersections): "
            + ", ".join(f"{k} {v:.2f}" for k, v in win.items() if k not in sizes))
    acc["train_s"] += t1 - t0
    if t_warm is not None and end > warm_at:
        acc["timed_s"] += t1 - t_warm
        acc["timed_iters"] += end - warm_at
    acc["segments"] += 1
    acc["peak_rss_bytes"] = max(acc["peak_rss_bytes"], peak_rss_bytes() or 0)
    if cuda:
        acc["peak_device_bytes"] = max(acc["peak_device_bytes"],
                                       int(torch.cuda.max_memory_allocated()))
        acc["peak_device_reserved_bytes"] = max(acc["peak_device_reserved_bytes"],
                                                int(torch.cuda.max_memory_reserved()))
    if stopped is not None:
        acc["wall_s"] += time.time() - t_start
        ck = {"step": stopped, "iterations": args.iterations, "seed": args.seed,
              "order": order, "pos": pos, "acc": acc,
              "splats": {k: v.detach().cpu() for k, v in splats.items()},
              "optimizers": {k: o.state_dict() for k, o in optimizers.items()},
              "scheduler": means_sched.state_dict(),
              "state": {k: (v.cpu() if torch.is_tensor(v) else v) for k, v in state.items()},
              "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                      "torch": torch.get_rng_state(),
                      "cuda": torch.cuda.get_rng_state() if cuda else None}}
        torch.save(ck, out / "resume.pt.tmp")
        (out / "resume.pt.tmp").replace(resume_path)
        log(f"stopped after {args.stop_after} s at iteration {stopped}/{args.iterations} with "
            f"{len(splats['means'])} Gaussians; state in {resume_path} "
            f"({resume_path.stat().st_size / 2**20:.0f} MiB): rerun with --resume")
        raise SystemExit(75)
    train_s = acc["train_s"]
    its = (acc["timed_iters"] / acc["timed_s"] if acc["timed_iters"] > 0
           else args.iterations / train_s)

    views = []
    if args.eval:
        with torch.no_grad():
            for i in test_idx:
                f = frames[i]
                rgba = f["image"].shape[2] == 4
                gt = composite_rgba8(f["image"], [1.0] * 3) if rgba else f["image"]
                if rgba and not bg:
                    saved, bgs = bgs, torch.ones((1, 3), device=device)
                colours, _, _ = render(i, args.sh_degree)
                if rgba and not bg:
                    bgs = saved
                img = colours[0].clamp(0, 1).cpu().numpy()
                p, s = score(img, gt, f.get("mask"))
                views.append({"view": i, "name": f["name"],
                              "psnr": p if math.isfinite(p) else None, "ssim": s})
                log(f"test {f['name']}: PSNR {p:.4f} dB, SSIM {s:.5f}")
        (out / "test").mkdir(exist_ok=True)
        json.dump(views, open(out / "test" / "metrics.json", "w"), indent=1)
    psnr, ssim = mean_scores(views)
    report = {
        "test_psnr": psnr, "test_ssim": ssim, "test_views": len(views),
        "iterations": args.iterations, "iterations_per_s": its,
        "iterations_per_s_total": args.iterations / train_s, "warmup_iterations": args.warmup,
        "num_gaussians": int(len(splats["means"])),
        "peak_device_bytes": acc["peak_device_bytes"] if cuda else None,
        "peak_device_reserved_bytes": acc["peak_device_reserved_bytes"] if cuda else None,
        "peak_rss_bytes": max(acc["peak_rss_bytes"], peak_rss_bytes() or 0),
        "segments": acc["segments"],
        "phase_ms": acc.get("phase_ms", []),
        "backend": f"gsplat {gsplat.__version__}", "torch": torch.__version__,
        "rasterize_mode": "antialiased" if args.antialiased else "classic",
        "densification": "absgrad" if args.absgrad else "default", "grow_grad2d": grow,
        "revised_opacity": args.revised_opacity,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu (fake rasteriser)", "seed": args.seed, "init": init,
        "init_points": int(len(pts)), "scene_scale": scene_scale, "ssim_loss": ssim_impl,
        "jit_compile_s": acc["jit_compile_s"], "train_s": train_s,
        "wall_s": acc["wall_s"] + time.time() - t_start,
        "data": str(args.data),
    }
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(out / "report.json")
    log(f"done: {args.iterations} iterations in {train_s:.1f} s ({its:.2f} it/s after "
        f"warm-up), {report['num_gaussians']} Gaussians, test PSNR {psnr}, SSIM {ssim}, peak "
        f"device {(report['peak_device_bytes'] or 0) / 2**20:.0f} MiB, wall {report['wall_s']:.1f} s")


if __name__ == "__main__":
    main()
