#!/usr/bin/env python3
"""gain_photos.py: a copy of a NeRF/instant-ngp dataset whose every photo is brightened or
darkened by its own random gain, what auto-exposure does to a capture, to measure exposure
compensation (README § Exposure compensation) on real photos.

    python3 tools/gain_photos.py ../shared/data/fox /tmp/foxgain [--low 0.7] [--high 1.3] [--seed 5]
    gs-pack convert /tmp/foxgain -o foxgain8.pack --downscale 8

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
        out = Image.fromarray(np.clip(np.round(pixels * g), 0, 255).astype(np.uint8))
        path = os.path.join(a.dst, "images", name)
        if name.lower().endswith((".jpg", ".jpeg")):
            out.save(path, quality=95)
        else:
            out.save(path)
        gains[name] = g
    with open(os.path.join(a.dst, "gains.json"), "w") as f:
        json.dump(gains, f, indent=1)
    print(f"{len(gains)} images, gains {min(gains.values()):.3f} to {max(gains.values()):.3f}")


if __name__ == "__main__":
    main()
