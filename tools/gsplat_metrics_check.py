#!/usr/bin/env python3
"""Checks tools/gsplat_train.py's scoring (numpy) against ramsplat's on the same images.

    gs-render --ply MODEL.ply --pack PACK --split test -o R
    python3 tools/gsplat_metrics_check.py R [--psnr-tol 1e-4] [--ssim-tol 1e-5]

gs-render writes each view as a side-by-side PNG (ground truth left, 8-bit render right) and
its PSNR/SSIM in R/metrics.json. This script splits every PNG, scores the render half against
the ground-truth half with gsplat_train.score (the render given as its 8-bit values / 255, which
quantise back to the same bytes), and compares per view. Views scored with a mask cannot be
re-scored from the PNG alone (their PSNR is over the used pixels), so packs with masks are not
for this check. Needs numpy only (Pillow used when installed). Exit 0 when every view agrees within the
tolerances, 1 otherwise.
"""
import argparse
import json
import math
import pathlib
import sys

import struct
import zlib

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gsplat_train  # noqa: E402


def read_png_rgb(path):
    """8-bit RGB/RGBA non-interlaced PNG to H x W x 3 uint8: Pillow when installed, else a small
    decoder (zlib + the five row filters), enough for gs-render's side-by-side images."""
    try:
        from PIL import Image
        return np.asarray(Image.open(path).convert("RGB"))
    except ImportError:
        pass
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG")
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    w, h, depth, colour, _, _, interlace = hdr
    channels = {2: 3, 6: 4}.get(colour)
    if depth != 8 or channels is None or interlace:
        raise SystemExit(f"{path}: only 8-bit RGB/RGBA non-interlaced PNG without Pillow")
    raw = zlib.decompress(idat)
    stride = w * channels
    out = np.zeros((h, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int32)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) & 255
        else:
            cur = np.zeros(stride, dtype=np.int32)
            for i in range(stride):
                a = cur[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                if f == 1:
                    pred = a
                elif f == 3:
                    pred = (a + b) >> 1
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[i] = (line[i] + pred) & 255
        out[y] = cur
        prev = cur
    return out.reshape(h, w, channels)[..., :3]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("render_dir")
    ap.add_argument("--psnr-tol", type=float, default=1e-4)
    ap.add_argument("--ssim-tol", type=float, default=1e-5)
    a = ap.parse_args()
    d = pathlib.Path(a.render_dir)
    m = json.load(open(d / "metrics.json"))
    worst_p, worst_s, bad, views = 0.0, 0.0, 0, []
    for v in m["views"]:
        side = read_png_rgb(d / v["file"])
        w = side.shape[1] // 2
        gt, r8 = side[:, :w], side[:, w:]
        p, s = gsplat_train.score(r8.astype(np.float32) / np.float32(255.0), gt)
        ours_p = math.inf if v["psnr"] is None else v["psnr"]
        dp = 0.0 if (math.isinf(p) and math.isinf(ours_p)) else abs(p - ours_p)
        ds = abs(s - v["ssim"])
        worst_p, worst_s = max(worst_p, dp), max(worst_s, ds)
        ok = dp <= a.psnr_tol and ds <= a.ssim_tol
        bad += not ok
        views.append({"psnr": None if math.isinf(p) else p, "ssim": s})
        print(f"{v['file']}: PSNR ramsplat {ours_p:.6f} numpy {p:.6f} (|d| {dp:.2e}); SSIM "
              f"ramsplat {v['ssim']:.7f} numpy {s:.7f} (|d| {ds:.2e}){'' if ok else '  MISMATCH'}")
    mp, ms = gsplat_train.mean_scores(views)
    print(f"{len(views)} views; means: PSNR ramsplat {m['mean_psnr']} numpy {mp}; SSIM ramsplat "
          f"{m['mean_ssim']} numpy {ms}; worst |dPSNR| {worst_p:.2e} dB, worst |dSSIM| "
          f"{worst_s:.2e}")
    if not views:
        sys.exit("no views in metrics.json")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
