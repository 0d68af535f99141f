#!/usr/bin/env python3
"""gain_photos.py: a copy of a NeRF/instant-ngp dataset whose every photo is brightened or
darkened by its own random gain, what auto-exposure does to a capture, to measure exposure
compensation (docs/training.md § Exposure compensation) on real photos; with --isp, also a
tone curve and a vignette of its own, what a camera's processing does locally, to measure
bilateral grids (docs/training.md § Bilateral grids).

    python3 tools/gain_photos.py ../shared/data/fox /tmp/foxgain [--low 0.7] [--high 1.3] [--seed 5]
    gs-pack convert /tmp/foxgain -o foxgain8.pack --downscale 8

--isp: after the gain, each channel value v in [0, 1] becomes v^γ · (1 − s·r²), γ uniform in
[0.8, 1.25] per photo, r the distance from a centre drawn per photo inside the middle half of
the image (in units of the image's half-diagonal), s uniform in [0.2, 0.5] per photo.

Copies transforms.json, writes each image of SRC/images/ multiplied by a uniform gain in
[low, high] (rounded, clipped to 255; JPEG quality 95, PNG as PNG) into DST/images/, and the
gains into DST/gains.json. Needs numpy and Pillow. DST must not exist.
"""
import argparse
import json
import os
import random
import shutil
import sys

import numpy as np
from PIL import Image


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--low", type=float, default=0.7)
    ap.add_argument("--high", type=float, default=1.3)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--isp", action="store_true", help="also a tone curve and a vignette per photo")
    a = ap.parse_args()
    if os.path.exists(a.dst):
        sys.exit(f"{a.dst} exists; give a new folder")
    os.makedirs(os.path.join(a.dst, "images"))
    shutil.copy(os.path.join(a.src, "transforms.json"), a.dst)
    rng = random.Random(a.seed)
    gains = {}
    src = os.path.join(a.src, "images")
    for name in sorted(os.listdir(src)):
        g = rng.uniform(a.low, a.high)
        pixels = np.asarray(Image.open(os.path.join(src, name))).astype(np.float32)
        values = pixels * g
        record = g
        if a.isp:
            gamma = rng.uniform(0.8, 1.25)
            strength = rng.uniform(0.2, 0.5)
            h, w = pixels.shape[:2]
            cx, cy = rng.uniform(0.25, 0.75) * w, rng.uniform(0.25, 0.75) * h
            y, x = np.mgrid[0:h, 0:w].astype(np.float32) + 0.5
            r2 = ((x - cx) ** 2 + (y - cy) ** 2) / ((w / 2) ** 2 + (h / 2) ** 2)
            vignette = (1.0 - strength * r2)[..., None]
            values = (np.clip(values / 255.0, 0, 1) ** gamma) * vignette * 255.0
            record = {"gain": g, "gamma": gamma, "vignette": strength, "centre": [cx, cy]}
        out = Image.fromarray(np.clip(np.round(values), 0, 255).astype(np.uint8))
        path = os.path.join(a.dst, "images", name)
        if name.lower().endswith((".jpg", ".jpeg")):
            out.save(path, quality=95)
        else:
            out.save(path)
        gains[name] = record
    with open(os.path.join(a.dst, "gains.json"), "w") as f:
        json.dump(gains, f, indent=1)
    g = [r["gain"] if isinstance(r, dict) else r for r in gains.values()]
    print(f"{len(gains)} images, gains {min(g):.3f} to {max(g):.3f}")


if __name__ == "__main__":
    main()
