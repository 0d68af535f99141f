#!/usr/bin/env python3
"""synthetic_model_ply.py: a 3DGS PLY (binary, SH degree 3) of N Gaussians for timing model
conversions at a size no test trains to (docs/commands.md, SOG). Positions and SH lie in 2,000
clusters, so the SH coefficients are correlated as a trained model's are rather than uniform
noise; DC colours, opacities, log-scales (-7..0) and unnormalised rotations are random. Seeded
(numpy's default_rng(1)): the same N gives the same file.

    python3 tools/synthetic_model_ply.py OUT.ply 1000000
"""
import sys

import numpy as np


def main() -> None:
    out, n = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(1)
    cluster = rng.integers(0, 2000, n)
    centres = rng.normal(0, 10, (2000, 3))
    sh = rng.normal(0, 0.2, (2000, 45))
    props = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
    props += [f"f_rest_{i}" for i in range(45)]
    props += ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    a = np.zeros((n, len(props)), dtype="<f4")
    a[:, 0:3] = centres[cluster] + rng.normal(0, 0.5, (n, 3))
    a[:, 6:9] = rng.normal(0, 1, (n, 3))
    a[:, 9:54] = sh[cluster] + rng.normal(0, 0.05, (n, 45))
    a[:, 54] = rng.normal(0, 2, n)
    a[:, 55:58] = rng.uniform(-7, 0, (n, 3))
    a[:, 58:62] = rng.normal(0, 1, (n, 4))
    header = "ply\nformat binary_little_endian 1.0\nelement vertex %d\n" % n
    header += "".join("property float %s\n" % p for p in props) + "end_header\n"
    with open(out, "wb") as f:
        f.write(header.encode())
        f.write(a.tobytes())


if __name__ == "__main__":
    main()
