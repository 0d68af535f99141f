// project_bwd.cu: one thread per Gaussian; chains ∂L/∂(mean2d, conic, colour, opacity) back to
// the stored parameters. Twin of cpu::project::project_bwd (same derivation, same exact
// derivative through the Jacobian clamp, the same derivative of the antialiasing
// compensation). Every output element is written exactly once (culled → zeros), so the
// outputs need no clearing: a thread's stores land 4·(row width) bytes apart from its
// neighbours', each its own memory transaction, so a second pass of zeros would double them.
// The SH rows, the widest (48 floats at degree 3), go out in 16-byte stores where rows are
// 16-byte aligned (K a multiple of 4).
//
// project_bwd_pose is the same kernel that also sums the pose gradient ∂L/∂(ρ, φ) of the camera
// (cpu::project's module doc; twin of its `pose_contribution`): each Gaussian's share in double
// from the f32 intermediates, per block in a fixed tree (block_sum) into
// pose_part[k·gridDim.x + block]; then pose_finish adds the blocks in a fixed order into the
// caller's buffer. No atomics, so the result is deterministic; the parameter gradients are the
// same bits either way (one templated body). Two entry points rather than a null pointer: the
// pose path needs ~20 more registers (ptxas, sm_80: 102 against 80), which the plain kernel,
// run by every training step, would otherwise pay in occupancy. For the same reason each has a
// `_fisheye` twin for the equidistant projection (the projection a compile-time constant):
// with the choice made at run time the plain kernel spilled 32 B at its 80-register bound and
// the pose kernel took 130 registers.
#include "common.cuh"
#include "sh.cuh"
#include "projection.cuh"

// The buffers and settings both entry points take after `n` (project_bwd_pose adds
// `pose_part`), and the per-Gaussian body after the index: one list, written once.
#define PROJECT_BWD_PARAMS                                                                       \
    const float* __restrict__ means,            /* [N, 3] */                                     \
    const float* __restrict__ log_scales,       /* [N, 3] */                                     \
    const float* __restrict__ rotations,        /* [N, 4] */                                     \
    const float* __restrict__ logit_opacities,  /* [N] */                                        \
    const float* __restrict__ sh,               /* [N, K, 3] */                                  \
    u32 coeffs,                                 /* K */                                          \
    u32 degree,                                 /* active SH degree */                           \
    const float* __restrict__ cam_buf,          /* [GS_CAM_LEN] */                               \
    u32 antialiased,                            /* as given to project_fwd */                    \
    const float* __restrict__ filter_3d,        /* [N] 3D filter std, or null: none */           \
    const u32* __restrict__ radii,              /* [N] from project_fwd */                       \
    const float* __restrict__ conics,           /* [N, 3] from project_fwd */                    \
    const float* __restrict__ v_means2d,        /* [N, 2] from rasterize_bwd */                  \
    const float* __restrict__ v_conics,         /* [N, 3] from rasterize_bwd */                  \
    const float* __restrict__ v_colors,         /* [N, 3] from rasterize_bwd */                  \
    const float* __restrict__ v_opacities,      /* [N] from rasterize_bwd */                     \
    float* __restrict__ g_means,                /* [N, 3] out */                                 \
    float* __restrict__ g_log_scales,           /* [N, 3] out */                                 \
    float* __restrict__ g_rotations,            /* [N, 4] out */                                 \
    float* __restrict__ g_logit_opacities,      /* [N] out */                                    \
    float* __restrict__ g_sh,                   /* [N, K, 3] out */                              \
    float* __restrict__ g_means2d,              /* [N, 2] out */                                 \
    u32 with_depth,                             /* 1: v_inv_depths is read */                    \
    const float* __restrict__ v_inv_depths      /* [N] ∂L/∂(1/z) from rasterize_bwd */
#define PROJECT_BWD_ARGS                                                                         \
    means, log_scales, rotations, logit_opacities, sh, coeffs, degree, cam_buf, antialiased,     \
        filter_3d, radii, conics, v_means2d, v_conics, v_colors, v_opacities, g_means,           \
        g_log_scales, g_rotations, g_logit_opacities, g_sh, g_means2d, with_depth, v_inv_depths

// ∂L/∂t of the camera-space mean through the pinhole's Jacobian (∂L/∂J = d_j), exact through
// the clamp, and its 2D mean (∂L/∂mean2d = gm); twin of cpu::project::pinhole_bwd.
__device__ __forceinline__ void pinhole_bwd(float x, float y, float z, const Cam& cam,
                                            const Geometry& g, const float d_j[2][3],
                                            const float gm[2], float dt[3]) {
    const float rz = 1.0f / z, rz2 = rz * rz, rz3 = rz2 * rz;
    const float fx = cam.fx, fy = cam.fy;
    const float tx = -g.j[0][2] / (fx * rz2);
    const float ty = -g.j[1][2] / (fy * rz2);
    dt[0] = 0.0f;
    dt[1] = 0.0f;
    dt[2] = 0.0f;
    dt[2] += -fx * rz2 * d_j[0][0] - fy * rz2 * d_j[1][1];
    if (g.clamped[0]) {
        dt[2] += fx * tx * rz3 * d_j[0][2];
    } else {
        dt[0] += -fx * rz2 * d_j[0][2];
        dt[2] += 2.0f * fx * tx * rz3 * d_j[0][2];
    }
    if (g.clamped[1]) {
        dt[2] += fy * ty * rz3 * d_j[1][2];
    } else {
        dt[1] += -fy * rz2 * d_j[1][2];
        dt[2] += 2.0f * fy * ty * rz3 * d_j[1][2];
    }
    // mean2d = (fx·x/z + cx, fy·y/z + cy).
    dt[0] += fx * rz * gm[0];
    dt[1] += fy * rz * gm[1];
    dt[2] += -(fx * x * gm[0] + fy * y * gm[1]) * rz2;
}

// ∂L/∂t through the equidistant projection: its Jacobian (∂L/∂J = d_j) and its 2D mean
// (∂L/∂mean2d = gm, whose Jacobian is J itself, recomputed here from the radial terms so that
// J need not stay live); twin of cpu::project::fisheye_bwd, whose doc derives it.
__device__ __forceinline__ void fisheye_bwd(float x, float y, float z, const Cam& cam,
                                            const float d_j[2][3], const float gm[2],
                                            float dt[3]) {
    const Equidistant e = equidistant(x, y, z);
    const float g0[3] = {d_j[0][0] * cam.fx, d_j[0][1] * cam.fx, d_j[0][2] * cam.fx};
    const float g1[3] = {d_j[1][0] * cam.fy, d_j[1][1] * cam.fy, d_j[1][2] * cam.fy};
    const float hx = gm[0] * cam.fx, hy = gm[1] * cam.fy;
    const float m = x * hx + y * hy;
    const float p = g0[0] + g1[1];
    const float cxy = g0[1] + g1[0];
    const float q = g0[0] * x * x + cxy * x * y + g1[1] * y * y;
    const float r = g0[2] * x + g1[2] * y;
    const float irho2 = 1.0f / e.rho2;
    const float sz = -irho2;
    const float sz2 = 2.0f * irho2 * irho2;
    const float radial = p * e.a + q * e.b + r * sz2 + e.a * m;
    dt[0] = radial * x + e.a * (2.0f * g0[0] * x + cxy * y) + sz * g0[2] + e.s * hx;
    dt[1] = radial * y + e.a * (cxy * x + 2.0f * g1[1] * y) + sz * g1[2] + e.s * hy;
    dt[2] = p * sz + q * sz2 + r * sz2 * z + sz * m;
}

// One Gaussian's share of the pose gradient, added to `acc` (twin of
// cpu::project::pose_contribution, the same operations in the same order, in double from the
// same f32 intermediates): `d2` is ∂L/∂Σ2d (symmetric), `dt` ∂L/∂t of the camera-space mean
// (through the 2D mean and the Jacobian), `d_dir` ∂L/∂(μ − centre) through the SH colour alone.
__device__ __forceinline__ void pose_contribution(const Geometry& g, const Cam& cam,
                                                  const float d2f[2][2], const float dtf[3],
                                                  const float d_dir[3], double acc[6]) {
    // ∂L/∂Σc = Jᵀ·dΣ2·J and Σc = W·Σ·Wᵀ.
    double gc[3][3];
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c) {
            double s = 0.0;
#pragma unroll
            for (int a = 0; a < 2; ++a) {
                double row = 0.0;
#pragma unroll
                for (int b = 0; b < 2; ++b)
                    row += (double)g.j[a][r] * (double)d2f[a][b] * (double)g.j[b][c];
                s += row;
            }
            gc[r][c] = s;
        }
    double wc[3][3];
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c) {
            double s = 0.0;
#pragma unroll
            for (int k = 0; k < 3; ++k) s += (double)cam.rot[r][k] * (double)g.cov3[k][c];
            wc[r][c] = s;
        }
    double sc[3][3];
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c) {
            double s = 0.0;
#pragma unroll
            for (int k = 0; k < 3; ++k) s += wc[r][k] * (double)cam.rot[c][k];
            sc[r][c] = s;
        }
    // A = G·Σc − Σc·G (antisymmetric; (Σc·G)[r][c] = (G·Σc)[c][r]).
    double gs[3][3];
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c) {
            double s = 0.0;
#pragma unroll
            for (int k = 0; k < 3; ++k) s += gc[r][k] * sc[k][c];
            gs[r][c] = s;
        }
    const double t[3] = {(double)g.t[0], (double)g.t[1], (double)g.t[2]};
    const double dt[3] = {(double)dtf[0], (double)dtf[1], (double)dtf[2]};
    const double tx_dt[3] = {t[1] * dt[2] - t[2] * dt[1], t[2] * dt[0] - t[0] * dt[2],
                             t[0] * dt[1] - t[1] * dt[0]};
    // ρ: t' = t − ρ and the centre moves by Wᵀρ, so μ − centre by −Wᵀρ.
#pragma unroll
    for (int r = 0; r < 3; ++r) {
        double wd = 0.0;
#pragma unroll
        for (int k = 0; k < 3; ++k) wd += (double)cam.rot[r][k] * (double)d_dir[k];
        acc[r] -= dt[r] + wd;
    }
    // φ: t' = t − φ×t, Σc' = (I − [φ]×)·Σc·(I + [φ]×).
    acc[3] += 2.0 * (gs[1][2] - gs[2][1]) - tx_dt[0];
    acc[4] += 2.0 * (gs[2][0] - gs[0][2]) - tx_dt[1];
    acc[5] += 2.0 * (gs[0][1] - gs[1][0]) - tx_dt[2];
}

// The kernels' per-Gaussian body (their arguments, plus the Gaussian `i` < n and, with POSE,
// `pose`, this thread's pose accumulator): a function, so that its early returns for culled
// Gaussians leave every thread free to reach the block's pose reduction.
// Gaussian i's SH gradient row [K, 3]: ∂L/∂(coefficient k, channel ch) = d_raw[ch]·basis[k]
// for the `active` coefficients, 0 for the rest (all zeros: active = 0).
__device__ __forceinline__ void write_sh_grad(float* __restrict__ row, u32 coeffs, u32 active,
                                              const float d_raw[3], const float* basis) {
    const u32 len = 3 * coeffs;
    const float r0 = d_raw[0], r1 = d_raw[1], r2 = d_raw[2];
    // Element e of the row: coefficient e / 3, channel e % 3 (selected, not indexed, so the
    // channel gradients stay in registers).
    auto value = [&](u32 e) {
        const u32 ch = e % 3;
        return e / 3 < active ? (ch == 0 ? r0 : ch == 1 ? r1 : r2) * basis[e / 3] : 0.0f;
    };
    if ((coeffs & 3u) == 0) {
        // Rows of 12·K bytes, K a multiple of 4, in a buffer aligned to 256: 16-byte aligned.
        for (u32 e = 0; e < len; e += 4)
            *reinterpret_cast<float4*>(row + e) =
                make_float4(value(e), value(e + 1), value(e + 2), value(e + 3));
    } else {
        for (u32 e = 0; e < len; ++e) row[e] = value(e);
    }
}

// Gaussian i's gradients when it was culled (or its geometry fails): all zeros.
__device__ __forceinline__ void zero_gaussian(u32 i, PROJECT_BWD_PARAMS) {
    const float none[3] = {0.0f, 0.0f, 0.0f};
    write_sh_grad(g_sh + (size_t)i * coeffs * 3, coeffs, 0, none, nullptr);
#pragma unroll
    for (int a = 0; a < 3; ++a) { g_means[3 * i + a] = 0.0f; g_log_scales[3 * i + a] = 0.0f; }
#pragma unroll
    for (int a = 0; a < 4; ++a) g_rotations[4 * i + a] = 0.0f;
    g_logit_opacities[i] = 0.0f;
    g_means2d[2 * i] = 0.0f;
    g_means2d[2 * i + 1] = 0.0f;
}

template <bool POSE, bool FISHEYE>
__device__ __forceinline__ void project_bwd_gaussian(u32 i, PROJECT_BWD_PARAMS, double* pose)
{
    if (radii[i] == 0) {
        zero_gaussian(i, PROJECT_BWD_ARGS);
        return;
    }

    Cam cam = load_cam(cam_buf);
    // The projection is the entry point's, a constant: each variant compiles one of the two.
    cam.fisheye = FISHEYE;
    const float mean[3] = {means[3 * i], means[3 * i + 1], means[3 * i + 2]};
    const float ls[3] = {log_scales[3 * i], log_scales[3 * i + 1], log_scales[3 * i + 2]};
    const float q[4] = {rotations[4 * i], rotations[4 * i + 1], rotations[4 * i + 2],
                        rotations[4 * i + 3]};
    const float filter = filter_3d != nullptr ? filter_3d[i] : -1.0f;
    Geometry g;
    if (!geometry(mean, ls, q, filter, cam, g)) {
        zero_gaussian(i, PROJECT_BWD_ARGS);
        return;
    }

    const float gm2[2] = {v_means2d[2 * i], v_means2d[2 * i + 1]};
    g_means2d[2 * i] = gm2[0];
    g_means2d[2 * i + 1] = gm2[1];

    // Opacity through the sigmoid (recomputed: in antialiased mode the forward's opacity also
    // holds the compensation, through a 3D filter its factor), and the compensation's share,
    // added to Σ2d below. `o` is the sigmoid times the filter's factor (1 without one).
    const float sig = 1.0f / (1.0f + expf(-logit_opacities[i]));
    const float o = filter >= 0.0f ? sig * g.filter_coef : sig;
    float comp = 1.0f, ratio = 1.0f;
    if (antialiased) {
        float down, up;
        cov2_scale(g.cov2, down, up);
        comp = aa_compensation(g, down, ratio);
    }
    g_logit_opacities[i] = v_opacities[i] * comp * o * (1.0f - sig);
    // ∂L/∂(opacity drawn)·(opacity drawn), for the filter's share of the scales' gradient at
    // the end: one value kept live rather than the filter's four (ptxas spilled those).
    const float drawn = filter >= 0.0f ? v_opacities[i] * comp * o : 0.0f;

    // Colour: SH coefficients and view direction; clamped channels pass no gradient.
    float dir[3];
    const float vlen = view_dir(mean, cam, dir);
    const float* co = sh + (size_t)i * coeffs * 3;
    float basis[SH_MAX_BASIS];
    float bgrad[SH_MAX_BASIS][3];
    sh_basis(dir[0], dir[1], dir[2], degree, basis);
    sh_basis_grad(dir[0], dir[1], dir[2], degree, bgrad);
    const u32 active = (degree + 1) * (degree + 1);
    float raw[3] = {0.0f, 0.0f, 0.0f};
    for (u32 k = 0; k < active; ++k)
#pragma unroll
        for (int ch = 0; ch < 3; ++ch) raw[ch] += basis[k] * co[3 * k + ch];
    float d_raw[3];
#pragma unroll
    for (int ch = 0; ch < 3; ++ch)
        d_raw[ch] = (raw[ch] + 0.5f < 0.0f) ? 0.0f : v_colors[3 * i + ch];
    write_sh_grad(g_sh + (size_t)i * coeffs * 3, coeffs, active, d_raw, basis);
    float d_dir[3] = {0.0f, 0.0f, 0.0f};
    for (u32 k = 0; k < active; ++k) {
        const float w = co[3 * k] * d_raw[0] + co[3 * k + 1] * d_raw[1] + co[3 * k + 2] * d_raw[2];
#pragma unroll
        for (int a = 0; a < 3; ++a) d_dir[a] += bgrad[k][a] * w;
    }
    const float dd = dir[0] * d_dir[0] + dir[1] * d_dir[1] + dir[2] * d_dir[2];
    float d_mean[3];
#pragma unroll
    for (int a = 0; a < 3; ++a) d_mean[a] = (d_dir[a] - dir[a] * dd) / vlen;

    // Conic (a', b', c') → dilated Σ2d: dΣ2 = −K·Gc·K, Gc the symmetric-matrix gradient
    // (b' appears once in σ, so its matrix entries get half each).
    const float ka = conics[3 * i], kb = conics[3 * i + 1], kc = conics[3 * i + 2];
    const float gc0 = v_conics[3 * i], gc1 = 0.5f * v_conics[3 * i + 1], gc2 = v_conics[3 * i + 2];
    const float kg00 = ka * gc0 + kb * gc1, kg01 = ka * gc1 + kb * gc2;
    const float kg10 = kb * gc0 + kc * gc1, kg11 = kb * gc1 + kc * gc2;
    float d2[2][2] = {{-(kg00 * ka + kg01 * kb), -(kg00 * kb + kg01 * kc)},
                      {-(kg10 * ka + kg11 * kb), -(kg10 * kb + kg11 * kc)}};
    // Compensation c = √r: ∂r/∂Σ2d = (1 − r)·K − ε·det K·I (cpu::project's module doc).
    if (antialiased && comp > 0.0f) {
        const float k = v_opacities[i] * o * 0.5f / comp;
        const float keep = 1.0f - ratio;
        const float eps_det = (float)GS_DILATION * (ka * kc - kb * kb);
        d2[0][0] += k * (keep * ka - eps_det);
        d2[0][1] += k * keep * kb;
        d2[1][0] += k * keep * kb;
        d2[1][1] += k * (keep * kc - eps_det);
    }
    // Σ2d = T Σ Tᵀ: dΣ = Tᵀ·dΣ2·T, dT = 2·dΣ2·T·Σ.
    float d2t[2][3];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c) d2t[r][c] = d2[r][0] * g.tmat[0][c] + d2[r][1] * g.tmat[1][c];
    float d_cov3[3][3];
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c) d_cov3[r][c] = g.tmat[0][r] * d2t[0][c] + g.tmat[1][r] * d2t[1][c];
    float d_t[2][3];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c)
            d_t[r][c] = 2.0f * (d2t[r][0] * g.cov3[0][c] + d2t[r][1] * g.cov3[1][c] +
                                d2t[r][2] * g.cov3[2][c]);
    // T = J·W: dJ = dT·Wᵀ.
    float d_j[2][3];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c)
            d_j[r][c] = d_t[r][0] * cam.rot[c][0] + d_t[r][1] * cam.rot[c][1] +
                        d_t[r][2] * cam.rot[c][2];
    const float x = g.t[0], y = g.t[1], z = g.t[2];
    const float rz = 1.0f / z, rz2 = rz * rz;
    float dt[3];
    if (cam.fisheye)
        fisheye_bwd(x, y, z, cam, d_j, gm2, dt);
    else
        pinhole_bwd(x, y, z, cam, g, d_j, gm2, dt);
    // The inverse-depth plane's value 1/z: ∂(1/z)/∂z = −1/z².
    if (with_depth != 0u) dt[2] += -v_inv_depths[i] * rz2;
    // The view direction's share of ∂L/∂μ, for the pose gradient at the end (computed last,
    // when little else is live: fewer registers).
    const float d_view[3] = {d_mean[0], d_mean[1], d_mean[2]};
    // t = W·μ + w: dμ += Wᵀ·dt.
#pragma unroll
    for (int a = 0; a < 3; ++a)
        d_mean[a] += cam.rot[0][a] * dt[0] + cam.rot[1][a] * dt[1] + cam.rot[2][a] * dt[2];
#pragma unroll
    for (int a = 0; a < 3; ++a) g_means[3 * i + a] = d_mean[a];

    // Σ = M Mᵀ, M = R·diag(s): dM = 2·dΣ·M.
    float d_rot[3][3];
    float d_s[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c) {
            const float dm = 2.0f * (d_cov3[r][0] * g.rot[0][c] * g.scale[c] +
                                     d_cov3[r][1] * g.rot[1][c] * g.scale[c] +
                                     d_cov3[r][2] * g.rot[2][c] * g.scale[c]);
            d_rot[r][c] = dm * g.scale[c];
            d_s[c] += dm * g.rot[r][c];
        }
    // Through a 3D filter, s' = √(s² + f²): ∂ln s'/∂ln s = 1 − f²/s'², and the opacity's
    // factor ∏ s/s' adds (∂L/∂opacity drawn)·(opacity drawn)·f²/s'² (cpu::project; the filter
    // read again here, not kept live).
    const float f2 = filter_3d != nullptr ? filter_3d[i] * filter_3d[i] : 0.0f;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
        const float d_ls = d_s[c] * g.scale[c];
        const float share = f2 / (g.scale[c] * g.scale[c]);
        g_log_scales[3 * i + c] =
            filter_3d != nullptr ? d_ls * (1.0f - share) + drawn * share : d_ls;
    }

    // Quaternion through R(q̂) and q̂ = q/|q|.
    const float w = g.qn[0], qx = g.qn[1], qy = g.qn[2], qz = g.qn[3];
    float dq[4];
    dq[0] = 2.0f * (-qz * d_rot[0][1] + qy * d_rot[0][2] + qz * d_rot[1][0] - qx * d_rot[1][2] -
                    qy * d_rot[2][0] + qx * d_rot[2][1]);
    dq[1] = -4.0f * qx * (d_rot[1][1] + d_rot[2][2]) +
            2.0f * (qy * d_rot[0][1] + qz * d_rot[0][2] + qy * d_rot[1][0] - w * d_rot[1][2] +
                    qz * d_rot[2][0] + w * d_rot[2][1]);
    dq[2] = -4.0f * qy * (d_rot[0][0] + d_rot[2][2]) +
            2.0f * (qx * d_rot[0][1] + w * d_rot[0][2] + qx * d_rot[1][0] + qz * d_rot[1][2] -
                    w * d_rot[2][0] + qz * d_rot[2][1]);
    dq[3] = -4.0f * qz * (d_rot[0][0] + d_rot[1][1]) +
            2.0f * (-w * d_rot[0][1] + qx * d_rot[0][2] + w * d_rot[1][0] + qy * d_rot[1][2] +
                    qx * d_rot[2][0] + qy * d_rot[2][1]);
    const float proj = dq[0] * g.qn[0] + dq[1] * g.qn[1] + dq[2] * g.qn[2] + dq[3] * g.qn[3];
#pragma unroll
    for (int a = 0; a < 4; ++a) g_rotations[4 * i + a] = (dq[a] - g.qn[a] * proj) / g.qlen;

    if constexpr (POSE) pose_contribution(g, cam, d2, dt, d_view, pose);
}

// Without the pose gradient: what every training step runs. Held to three blocks per SM
// (80 registers on sm_80 and sm_90, no spills, by ptxas -v): unbounded, ptxas took 85 on sm_90,
// which fits only two.
extern "C" __global__ void __launch_bounds__(GS_ELEMENT_BLOCK, 3)
    project_bwd(u32 n, PROJECT_BWD_PARAMS)
{
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) project_bwd_gaussian<false, false>(i, PROJECT_BWD_ARGS, nullptr);
}

// The same through the equidistant fisheye (the camera buffer's CAM_FISHEYE is 1).
extern "C" __global__ void __launch_bounds__(GS_ELEMENT_BLOCK, 3)
    project_bwd_fisheye(u32 n, PROJECT_BWD_PARAMS)
{
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) project_bwd_gaussian<false, true>(i, PROJECT_BWD_ARGS, nullptr);
}

// The per-block pose sums of project_bwd_pose / project_bwd_pose_fisheye.
template <bool FISHEYE>
__device__ __forceinline__ void project_bwd_pose_body(u32 n, PROJECT_BWD_PARAMS,
                                                      double* __restrict__ pose_part) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    double pose[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    if (i < n) project_bwd_gaussian<true, FISHEYE>(i, PROJECT_BWD_ARGS, pose);
#pragma unroll
    for (int k = 0; k < 6; ++k) {
        const double s = block_sum<GS_ELEMENT_BLOCK>(pose[k]);
        if (threadIdx.x == 0) pose_part[(u64)k * gridDim.x + blockIdx.x] = s;
        __syncthreads();  // block_sum's shared buffer is reused by the next sum
    }
}

// The same, and each block's sums of its Gaussians' pose-gradient shares (k = 0..5: ρ, φ) into
// pose_part[k·gridDim.x + blockIdx.x], for pose_finish. Blocks of GS_ELEMENT_BLOCK threads (the
// size block_sum assumes); every thread, past n or not, reaches the reductions.
extern "C" __global__ void project_bwd_pose(u32 n, PROJECT_BWD_PARAMS,
                                            double* __restrict__ pose_part)  // [6, blocks] out
{
    project_bwd_pose_body<false>(n, PROJECT_BWD_ARGS, pose_part);
}

// The same through the equidistant fisheye.
extern "C" __global__ void project_bwd_pose_fisheye(u32 n, PROJECT_BWD_PARAMS,
                                                    double* __restrict__ pose_part)  // [6, blocks]
{
    project_bwd_pose_body<true>(n, PROJECT_BWD_ARGS, pose_part);
}

// One block of GS_ELEMENT_BLOCK threads: out[offset + k] = Σ_b part[k·blocks + b] for the six
// pose components, in a fixed order (deterministic). `blocks` = 0 (no Gaussians) writes zeros.
// The device engine puts the sums after its loss scalars, so one read per step brings both.
extern "C" __global__ void pose_finish(
    u32 blocks,
    const double* __restrict__ part,  // [6, blocks] from project_bwd_pose
    u64 offset,
    double* __restrict__ out)         // [offset + 6] out
{
    for (int k = 0; k < 6; ++k) {
        double s = 0.0;
        for (u32 b = threadIdx.x; b < blocks; b += blockDim.x) s += part[(u64)k * blocks + b];
        const double t = block_sum<GS_ELEMENT_BLOCK>(s);
        if (threadIdx.x == 0) out[offset + k] = t;
        __syncthreads();  // block_sum's shared buffer is reused by the next sum
    }
}
