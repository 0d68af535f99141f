# Writes the fixture PLYs: N Gaussians (default 64) with REST f_rest properties (default 45, SH
# degree 3; 72 is degree 4) and random values (numpy, seed 7), in the standard 3DGS binary PLY
# layout. src.ply: `python3 make_source_ply.py src.ply`; src4.ply: `... src4.ply 32 72`.
import sys

import numpy as np

n = int(sys.argv[2]) if len(sys.argv) > 2 else 64
rest = int(sys.argv[3]) if len(sys.argv) > 3 else 45
rng = np.random.default_rng(7)
props = (
    ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
    + [f"f_rest_{i}" for i in range(rest)]
    + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
)
a = np.zeros((n, len(props)), np.float32)
a[:, 0:3] = rng.uniform(-3, 3, (n, 3))
a[:, 6:9] = rng.uniform(-1.5, 1.5, (n, 3))
a[:, 9 : 9 + rest] = rng.uniform(-0.9, 0.9, (n, rest))
a[:, 9 + rest] = rng.uniform(-4, 4, n)
a[:, 10 + rest : 13 + rest] = rng.uniform(-5, -1, (n, 3))
q = rng.normal(size=(n, 4))
q /= np.linalg.norm(q, axis=1, keepdims=True)
a[:, 13 + rest : 17 + rest] = q
with open(sys.argv[1], "wb") as f:
    f.write(b"ply\nformat binary_little_endian 1.0\nelement vertex %d\n" % n)
    for p in props:
        f.write(b"property float %s\n" % p.encode())
    f.write(b"end_header\n")
    f.write(a.astype("<f4").tobytes())
