#!/usr/bin/env python3
"""Writes tests/data/e57/: small E57 files made by libE57Format (the reference C++ library,
through pye57), so the E57 importer is checked against a writer it shares no code with.

    python3 -m venv /tmp/e57venv && /tmp/e57venv/bin/pip install pye57 numpy
    /tmp/e57venv/bin/python tools/e57_fixtures.py tests/data/e57

two_scans.e57 holds two scans of 300 points each, written as pye57 writes them (positions as
32-bit floats, colour as integers 0-255, intensity, cartesianInvalidState):
- scan 0, "station A": posed by a rotation of 90 degrees about z and a translation of
  (10, 20, 30); colour; every tenth point (i % 10 == 3) marked invalid (state 2);
- scan 1, "station B": no colour; identity pose.
Point i of scan s is at local (i / 8 - 20, (i % 17) / 4 + s, (i % 5) / 2) metres (exact in
float32), colour (7i mod 256, 13i mod 256, 29i mod 256). tests/e57_import.rs recomputes them.
"""
import math
import sys
from pathlib import Path

import numpy as np
import pye57


def scan_points(s, n=300, colour=True, invalid=False):
    i = np.arange(n)
    data = {
        "cartesianX": (i / 8.0 - 20.0).astype(np.float64),
        "cartesianY": ((i % 17) / 4.0 + s).astype(np.float64),
        "cartesianZ": ((i % 5) / 2.0).astype(np.float64),
        "intensity": (i % 100 / 100.0).astype(np.float32),
    }
    if colour:
        data["colorRed"] = (7 * i % 256).astype(np.uint8)
        data["colorGreen"] = (13 * i % 256).astype(np.uint8)
        data["colorBlue"] = (29 * i % 256).astype(np.uint8)
    if invalid:
        data["cartesianInvalidState"] = np.where(i % 10 == 3, 2, 0).astype(np.int8)
    return data


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "two_scans.e57"
    if path.exists():
        path.unlink()
    e57 = pye57.E57(str(path), mode="w")
    h = math.sqrt(0.5)
    e57.write_scan_raw(
        scan_points(0, colour=True, invalid=True),
        name="station A",
        rotation=np.array([h, 0.0, 0.0, h]),
        translation=np.array([10.0, 20.0, 30.0]),
    )
    e57.write_scan_raw(scan_points(1, colour=False), name="station B")
    e57.close()
    print(path, path.stat().st_size, "bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/e57")
