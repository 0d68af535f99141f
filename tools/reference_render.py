#!/usr/bin/env python3
"""Independent numpy reference renderer for 3D Gaussian Splatting models (standard 3DGS PLY).

What it does
    Implements the forward rendering math that src/render/cpu/project.rs and rasterize.rs
    document (the original 3DGS / gsplat conventions) straight from the formulas, in float64, one Gaussian at a time over whole
    pixel arrays. It shares no code with ramsplat's Rust rasterizer: tests/render_reference.rs
    uses it as an oracle for the CPU backend, on models and cameras generated here with numpy's
    own random generator (so no ramsplat code path chooses the inputs).

How to run (needs only python3 + numpy)
    # a random degree-3 model and a set of cameras (one inside the cloud) into DIR
    python3 tools/reference_render.py make-scene --out DIR [--seed 7] [--n 2000]
                                                 [--width 128] [--height 96]
    # render one camera to a float64 .npy of shape (H, W, 3), optionally an 8-bit PNG
    python3 tools/reference_render.py render --ply DIR/model.ply --camera DIR/cam_inside.json \
        --out OUT.npy [--png OUT.png] [--bg r,g,b] [--sh-degree D] [--antialiased]

Conventions (as src/scene/camera.rs and src/render/cpu/{project,rasterize}.rs state them)
    Camera JSON {"width","height","fx","fy","cx","cy","world_to_camera": 4x4 row-major},
    OpenCV axes, world-to-camera p_cam = R p + t. Pixel (i, j) has its centre at (i+0.5, j+0.5);
    mean2d = (fx x/z + cx, fy y/z + cy). Sigma = R S S^T R^T (R from the normalised wxyz
    quaternion, S = diag(exp(log_scale))); Sigma2d = J W Sigma W^T J^T with the clamped EWA
    Jacobian, +0.3 on the diagonal; cull det <= 0 and z <= 0.01. Radius = ceil(3 sqrt(lambda_max))
    (lambda from mid +- sqrt(max(0.1, mid^2 - det)), as 3DGS computes it); a Gaussian reaches
    the 16x16 tiles its radius box touches, and only those (the tile-based cut-off is part of
    the forward function the rasterizers compute). SH colour by dir = normalize(mean - centre),
    colour = max(SH + 0.5, 0). Front-to-back by camera z (ties by index): sigma = 1/2 (a dx^2 +
    c dy^2) + b dx dy with d = mean2d - pixel centre, alpha = min(0.999, o exp(-sigma)), skip
    sigma < 0 or alpha < 1/255, stop before the Gaussian that would make T (1 - alpha) < 1e-4,
    C += colour alpha T, T *= 1 - alpha, output C + T background.
    --antialiased (Mip-Splatting's 2D filter, gsplat's rasterize_mode="antialiased"): the
    opacity is multiplied by sqrt(max(0, det Sigma2d / det(Sigma2d + 0.3 I))).
    "camera_model": "fisheye" in the camera JSON: the equidistant fisheye (gsplat's
    camera_model="fisheye"): with r = |(x, y)| and theta = atan2(r, z), mean2d =
    (fx theta x/r + cx, fy theta y/r + cy), J the derivative of that map (unclamped).

The PLY writer/reader here handles the 3DGS layout only (binary little-endian float32 vertex
properties, looked up by name).
"""

import argparse
import json
import math
import os
import struct
import sys
import zlib

import numpy as np

TILE = 16
NEAR = 0.01
ALPHA_MAX = 0.999
ALPHA_MIN = 1.0 / 255.0
T_MIN = 1e-4

C0 = 0.28209479177387814
C1 = 0.4886025119029199
C2 = [1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792,
      0.5462742152960396]
C3 = [-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
      -0.4570457994644658, 1.445305721320277, -0.5900435899266435]


# ----------------------------------------------------------------------------- PLY

def ply_names(degree):
    rest = 3 * ((degree + 1) ** 2 - 1)
    return (["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
            + ["f_rest_%d" % i for i in range(rest)]
            + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"])


def write_ply(path, means, log_scales, quats, logit_opacity, sh):
    """sh: (N, K, 3). Writes the standard layout, f_rest channel-major."""
    n, k, _ = sh.shape
    degree = int(round(math.sqrt(k))) - 1
    names = ply_names(degree)
    # Put one unknown property first, so the reader under test must match by name.
    names = ["confidence"] + names
    cols = [np.full(n, 0.5), means[:, 0], means[:, 1], means[:, 2],
            np.zeros(n), np.zeros(n), np.zeros(n), sh[:, 0, 0], sh[:, 0, 1], sh[:, 0, 2]]
    for c in range(3):
        for j in range(1, k):
            cols.append(sh[:, j, c])
    cols.append(logit_opacity)
    cols += [log_scales[:, 0], log_scales[:, 1], log_scales[:, 2]]
    cols += [quats[:, 0], quats[:, 1], quats[:, 2], quats[:, 3]]
    data = np.stack(cols, axis=1).astype("<f4")
    header = "ply\nformat binary_little_endian 1.0\ncomment reference_render.py\n"
    header += "element vertex %d\n" % n
    header += "".join("property float %s\n" % name for name in names)
    header += "end_header\n"
    with open(path, "wb") as f:
        f.write(header.encode("ascii"))
        f.write(data.tobytes())


def read_ply(path):
    with open(path, "rb") as f:
        raw = f.read()
    end = raw.index(b"end_header\n") + len(b"end_header\n")
    lines = raw[:end].decode("ascii").splitlines()
    if "format binary_little_endian 1.0" not in lines:
        sys.exit("%s: only binary_little_endian 3DGS files are supported here" % path)
    names, n = [], None
    for line in lines:
        parts = line.split()
        if parts[:2] == ["element", "vertex"]:
            n = int(parts[2])
        elif parts and parts[0] == "property":
            if parts[1] not in ("float", "float32"):
                sys.exit("%s: property %s is not float32" % (path, parts[-1]))
            names.append(parts[2])
    data = np.frombuffer(raw[end:end + n * 4 * len(names)], dtype="<f4").reshape(n, len(names))
    col = {name: data[:, i].astype(np.float64) for i, name in enumerate(names)}
    rest = sum(1 for name in names if name.startswith("f_rest_"))
    k = rest // 3 + 1
    sh = np.zeros((n, k, 3))
    for c in range(3):
        sh[:, 0, c] = col["f_dc_%d" % c]
        for j in range(1, k):
            sh[:, j, c] = col["f_rest_%d" % (c * (k - 1) + j - 1)]
    means = np.stack([col["x"], col["y"], col["z"]], axis=1)
    log_scales = np.stack([col["scale_%d" % i] for i in range(3)], axis=1)
    quats = np.stack([col["rot_%d" % i] for i in range(4)], axis=1)
    return means, log_scales, quats, col["opacity"], sh


# ----------------------------------------------------------------------------- math

def quat_to_rot(q):
    """(N, 4) wxyz, normalised here -> (N, 3, 3)."""
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], axis=1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], axis=1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1),
    ], axis=1)


def sh_colour(sh, dirs, degree):
    """sh (N, K, 3), dirs (N, 3) unit -> (N, 3) colour before the +0.5 and clamp."""
    x, y, z = dirs[:, 0:1], dirs[:, 1:2], dirs[:, 2:3]
    out = C0 * sh[:, 0]
    if degree >= 1:
        out = out - C1 * y * sh[:, 1] + C1 * z * sh[:, 2] - C1 * x * sh[:, 3]
    if degree >= 2:
        xx, yy, zz = x * x, y * y, z * z
        out = (out + C2[0] * x * y * sh[:, 4] + C2[1] * y * z * sh[:, 5]
               + C2[2] * (2 * zz - xx - yy) * sh[:, 6] + C2[3] * x * z * sh[:, 7]
               + C2[4] * (xx - yy) * sh[:, 8])
    if degree >= 3:
        out = (out + C3[0] * y * (3 * xx - yy) * sh[:, 9] + C3[1] * x * y * z * sh[:, 10]
               + C3[2] * y * (4 * zz - xx - yy) * sh[:, 11]
               + C3[3] * z * (2 * zz - 3 * xx - 3 * yy) * sh[:, 12]
               + C3[4] * x * (4 * zz - xx - yy) * sh[:, 13]
               + C3[5] * z * (xx - yy) * sh[:, 14] + C3[6] * x * (xx - 3 * yy) * sh[:, 15])
    return out


def render(model, cam, background=(0.0, 0.0, 0.0), sh_degree=None, antialiased=False):
    means, log_scales, quats, logit_opacity, sh = model
    W, H = int(cam["width"]), int(cam["height"])
    fx, fy, cx, cy = (float(cam[k]) for k in ("fx", "fy", "cx", "cy"))
    M = np.array(cam["world_to_camera"], dtype=np.float64)
    Rw, t = M[:3, :3], M[:3, 3]
    k = sh.shape[1]
    stored = int(round(math.sqrt(k))) - 1
    degree = stored if sh_degree is None else sh_degree

    p = means @ Rw.T + t
    z = p[:, 2]
    keep = z > NEAR
    # Cov3d and the clamped EWA Jacobian.
    R = quat_to_rot(quats)
    s = np.exp(log_scales)
    M3 = R * s[:, None, :]                       # R S
    cov3 = M3 @ np.transpose(M3, (0, 2, 1))      # R S S^T R^T
    zs = np.where(keep, z, 1.0)
    J = np.zeros((len(z), 2, 3))
    fisheye = cam.get("camera_model", "pinhole") == "fisheye"
    if fisheye:
        # u = fx k x + cx with k = theta/r; dk/dr = (r dtheta/dr - theta)/r^2 with
        # dtheta/dr = z/rho^2, dk/dz = dtheta/dz / r = -1/rho^2. On the axis k = 1/z and the
        # x^2 (dk/dr)/r terms vanish with x, y: r is floored where it underflows.
        x, y = p[:, 0], p[:, 1]
        r = np.maximum(np.hypot(x, y), 1e-300)
        rho2 = r * r + zs * zs
        theta = np.arctan2(r, zs)
        k = np.where(np.hypot(x, y) > 0, theta / r, 1.0 / zs)
        dk_dr_over_r = (zs / rho2 - k) / (r * r)
        J[:, 0, 0] = fx * (k + dk_dr_over_r * x * x)
        J[:, 0, 1] = fx * dk_dr_over_r * x * y
        J[:, 0, 2] = -fx * x / rho2
        J[:, 1, 0] = fy * dk_dr_over_r * x * y
        J[:, 1, 1] = fy * (k + dk_dr_over_r * y * y)
        J[:, 1, 2] = -fy * y / rho2
    else:
        tan_x, tan_y = W / (2 * fx), H / (2 * fy)
        lim_x_lo, lim_x_hi = -(cx / fx + 0.3 * tan_x), (W - cx) / fx + 0.3 * tan_x
        lim_y_lo, lim_y_hi = -(cy / fy + 0.3 * tan_y), (H - cy) / fy + 0.3 * tan_y
        tx = np.clip(p[:, 0] / zs, lim_x_lo, lim_x_hi) * zs
        ty = np.clip(p[:, 1] / zs, lim_y_lo, lim_y_hi) * zs
        J[:, 0, 0] = fx / zs
        J[:, 0, 2] = -fx * tx / (zs * zs)
        J[:, 1, 1] = fy / zs
        J[:, 1, 2] = -fy * ty / (zs * zs)
    T = J @ Rw                                   # J W
    cov2 = T @ cov3 @ np.transpose(T, (0, 2, 1))
    a = cov2[:, 0, 0] + 0.3
    b = cov2[:, 0, 1]
    c = cov2[:, 1, 1] + 0.3
    det = a * c - b * b
    keep &= det > 0
    dets = np.where(keep, det, 1.0)
    conic = np.stack([c / dets, -b / dets, a / dets], axis=1)
    mid = 0.5 * (a + c)
    lam1 = mid + np.sqrt(np.maximum(0.1, mid * mid - det))
    lam2 = mid - np.sqrt(np.maximum(0.1, mid * mid - det))
    radius = np.ceil(3.0 * np.sqrt(np.maximum(lam1, lam2)))
    if fisheye:
        mx = fx * k * p[:, 0] + cx
        my = fy * k * p[:, 1] + cy
    else:
        mx = fx * p[:, 0] / zs + cx
        my = fy * p[:, 1] / zs + cy
    # Colour from the view direction.
    centre = -Rw.T @ t
    d = means - centre
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    colour = np.maximum(sh_colour(sh, d, degree) + 0.5, 0.0)
    opacity = 1.0 / (1.0 + np.exp(-logit_opacity))
    if antialiased:
        det_raw = cov2[:, 0, 0] * cov2[:, 1, 1] - cov2[:, 0, 1] * cov2[:, 1, 0]
        opacity = opacity * np.sqrt(np.maximum(0.0, det_raw / dets))

    gx, gy = (W + TILE - 1) // TILE, (H + TILE - 1) // TILE
    img = np.zeros((H, W, 3))
    trans = np.ones((H, W))
    done = np.zeros((H, W), dtype=bool)
    jj, ii = np.mgrid[0:H, 0:W]
    px, py = ii + 0.5, jj + 0.5
    order = np.argsort(np.where(keep, z, np.inf), kind="stable")
    for g in order:
        if not keep[g]:
            break
        r = radius[g]
        # Tiles touched by the radius box [mean - r, mean + r] (continuous pixel coordinates,
        # tile tx covers [16 tx, 16 tx + 16)), clipped to the image.
        x0 = min(gx, max(0, int(math.floor((mx[g] - r) / TILE))))
        x1 = min(gx, max(0, int(math.floor((mx[g] + r) / TILE)) + 1))
        y0 = min(gy, max(0, int(math.floor((my[g] - r) / TILE))))
        y1 = min(gy, max(0, int(math.floor((my[g] + r) / TILE)) + 1))
        if x1 <= x0 or y1 <= y0:
            continue
        sl = (slice(y0 * TILE, min(H, y1 * TILE)), slice(x0 * TILE, min(W, x1 * TILE)))
        dx = mx[g] - px[sl]
        dy = my[g] - py[sl]
        A, B, C = conic[g]
        sigma = 0.5 * (A * dx * dx + C * dy * dy) + B * dx * dy
        alpha = np.minimum(ALPHA_MAX, opacity[g] * np.exp(-sigma))
        valid = (sigma >= 0) & (alpha >= ALPHA_MIN) & ~done[sl]
        Tp = trans[sl]
        test = Tp * (1.0 - alpha)
        stop = valid & (test < T_MIN)
        done[sl] |= stop
        use = valid & ~stop
        w = np.where(use, alpha * Tp, 0.0)
        img[sl] += w[..., None] * colour[g]
        trans[sl] = np.where(use, test, Tp)
    return img + trans[..., None] * np.asarray(background, dtype=np.float64)


# ----------------------------------------------------------------------------- scene

def look_at(centre, target, roll=0.0):
    """World-to-camera 4x4 (OpenCV axes) for a camera at `centre` looking at `target`."""
    centre = np.asarray(centre, dtype=np.float64)
    zc = np.asarray(target, dtype=np.float64) - centre
    zc /= np.linalg.norm(zc)
    down = np.array([0.0, 1.0, 0.0])
    xc = np.cross(down, zc)
    xc /= np.linalg.norm(xc)
    yc = np.cross(zc, xc)
    cr, sr = math.cos(roll), math.sin(roll)
    xr, yr = cr * xc + sr * yc, -sr * xc + cr * yc
    R = np.stack([xr, yr, zc])
    M = np.eye(4)
    M[:3, :3] = R
    M[:3, 3] = -R @ centre
    return M


def make_scene(out, seed, n, width, height):
    rng = np.random.default_rng(seed)
    # A ball of radius ~1 around the origin.
    means = rng.normal(size=(n, 3))
    means *= (rng.uniform(size=(n, 1)) ** (1 / 3)) / np.linalg.norm(means, axis=1, keepdims=True)
    log_scales = rng.uniform(math.log(0.01), math.log(0.15), size=(n, 3))
    quats = rng.normal(size=(n, 4))
    # Up to logit 8 (opacity 0.99966): the alpha clamp at 0.999 is reached at Gaussian centres.
    logit_opacity = rng.uniform(-3.0, 8.0, size=n)
    sh = rng.normal(scale=0.25, size=(n, 16, 3))
    sh[:, 0] = rng.normal(scale=0.9, size=(n, 3))
    os.makedirs(out, exist_ok=True)
    write_ply(os.path.join(out, "model.ply"), means, log_scales, quats, logit_opacity, sh)
    w, h = width, height
    cams = {
        "outside": (look_at([0.0, 0.0, -3.5], [0.0, 0.0, 0.0]), 110.0, 110.0, w / 2, h / 2),
        "inside": (look_at([0.1, -0.05, 0.2], [1.0, 0.3, 0.9], roll=0.3), 60.0, 60.0, w / 2, h / 2),
        "oblique": (look_at([2.5, -1.5, -2.0], [0.1, 0.0, 0.0], roll=-0.4),
                    130.0, 120.0, w * 0.47, h * 0.53),
        "wide": (look_at([0.0, -0.3, -1.6], [0.0, 0.0, 0.0]), 40.0, 40.0, w / 2, h / 2),
        # Equidistant fisheyes: ~190 degrees across the width from inside the cloud, and the
        # whole cloud within ~35 degrees of the axis from outside.
        "fisheye_inside": (look_at([0.1, -0.05, 0.2], [1.0, 0.3, 0.9], roll=0.3),
                           0.3 * w, 0.3 * w, w / 2, h / 2),
        "fisheye_outside": (look_at([0.4, -0.3, -2.2], [0.0, 0.0, 0.0], roll=0.2),
                            0.55 * w, 0.5 * w, w * 0.52, h * 0.48),
    }
    for name, (M, fx, fy, cx, cy) in cams.items():
        cam = {"width": w, "height": h, "fx": fx, "fy": fy, "cx": cx, "cy": cy,
               "world_to_camera": M.tolist()}
        if name.startswith("fisheye"):
            cam["camera_model"] = "fisheye"
        with open(os.path.join(out, "cam_%s.json" % name), "w") as f:
            json.dump(cam, f, indent=1)


def write_png(path, img):
    """8-bit PNG (x255, round half up, clamp) with zlib only, no imaging library needed."""
    h, w, _ = img.shape
    q = np.clip(np.floor(img * 255.0 + 0.5), 0, 255).astype(np.uint8)
    raw = b"".join(b"\x00" + q[j].tobytes() for j in range(h))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(png)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ms = sub.add_parser("make-scene")
    ms.add_argument("--out", required=True)
    ms.add_argument("--seed", type=int, default=7)
    ms.add_argument("--n", type=int, default=2000)
    ms.add_argument("--width", type=int, default=128)
    ms.add_argument("--height", type=int, default=96)
    rd = sub.add_parser("render")
    rd.add_argument("--ply", required=True)
    rd.add_argument("--camera", required=True)
    rd.add_argument("--out", required=True)
    rd.add_argument("--png")
    rd.add_argument("--bg", default="0,0,0")
    rd.add_argument("--sh-degree", type=int)
    rd.add_argument("--antialiased", action="store_true")
    args = ap.parse_args()
    if args.cmd == "make-scene":
        make_scene(args.out, args.seed, args.n, args.width, args.height)
        return
    with open(args.camera) as f:
        cam = json.load(f)
    bg = [float(v) for v in args.bg.split(",")]
    img = render(read_ply(args.ply), cam, bg, args.sh_degree, args.antialiased)
    np.save(args.out, img)
    if args.png:
        write_png(args.png, img)


if __name__ == "__main__":
    main()
