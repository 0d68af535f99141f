"""Writes the LAS/LAZ fixtures of tests/las_import.rs with laspy and the LASzip library.

The importer decompresses LAZ with the `laz` crate; these files come from LASzip itself (the
reference C++ implementation, through laspy's `laszip` backend), so the tests check that what
LASzip writes reads back exactly. Every point's values follow `point(i)` below, which the Rust
test recomputes. (`gps_recursion.laz` beside them is not made here: it is what the `las` fuzz
target made of these files, kept as the regression case of tests/las_import.rs.)

    python3 -m venv v && v/bin/pip install laspy laszip numpy
    v/bin/python tools/las_fixtures.py tests/data/las
"""

import sys
from pathlib import Path

import laspy
import numpy as np

POINTS = 600
SCALE = (0.001, 0.002, 0.0005)
OFFSET = (1000.0, -250.0, 12.5)


def columns(n, withheld_every):
    i = np.arange(n, dtype=np.int64)
    x = (i * 7919) % 200001 - 100000
    y = (i * 104729) % 150001 - 75000
    z = (i * 31) % 40001 - 20000
    red = ((i * 37) % 256) * 257
    green = ((i * 91) % 256) * 256
    blue = (i * 4099) % 65536
    cls = i % 19
    withheld = (i % withheld_every == 3) if withheld_every else np.zeros(n, bool)
    return x, y, z, red, green, blue, cls, withheld


def write(out: Path, name: str, version: str, fmt: int, withheld_every: int):
    header = laspy.LasHeader(point_format=fmt, version=version)
    header.scales = np.array(SCALE)
    header.offsets = np.array(OFFSET)
    las = laspy.LasData(header)
    x, y, z, red, green, blue, cls, withheld = columns(POINTS, withheld_every)
    las.X, las.Y, las.Z = x.astype(np.int32), y.astype(np.int32), z.astype(np.int32)
    las.classification = cls.astype(np.uint8)
    las.withheld = withheld
    if "red" in las.point_format.dimension_names:
        las.red, las.green, las.blue = (c.astype(np.uint16) for c in (red, green, blue))
    las.write(out / f"{name}.las")
    las.write(out / f"{name}.laz", laz_backend=laspy.LazBackend.Laszip)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    write(out, "f3_v12", "1.2", 3, 0)
    write(out, "f7_v14", "1.4", 7, 10)
    write(out, "f1_v12", "1.2", 1, 0)


if __name__ == "__main__":
    main()
