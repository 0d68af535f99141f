// projection.cuh: per-Gaussian geometry shared by project_fwd.cu and project_bwd.cu, the twin
// of `geometry` / `view_dir` in src/render/cpu/project.rs (same operations in the same order,
// so f32 results differ from the CPU only by FMA contraction and libm ulps).
#ifndef GS_PROJECTION_CUH
#define GS_PROJECTION_CUH

struct Geometry {
    float t[3];        // camera-space mean
    bool clamped[2];   // x/z, y/z clamped by the Jacobian limits
    float qn[4];       // normalised quaternion (w, x, y, z)
    float qlen;        // its length before normalisation
    float rot[3][3];   // R(qn)
    float scale[3];    // exp(log_scale), or √(exp(log_scale)² + f²) through a 3D filter
    float filter_coef;     // through a 3D filter: ∏ s/s', the opacity's factor; else 1
    float cov3[3][3];  // Σ = R S Sᵀ Rᵀ
    float tmat[2][3];  // T = J·W
    float cov2[3];     // dilated Σ2d as (a, b, c)
    float cov2_raw[3]; // Σ2d before the dilation (antialiasing compensation)
    float j[2][3];     // EWA Jacobian
    float m2[2];       // where the mean lands in the image (pixels), by the projection
};

__device__ __forceinline__ void quat_to_rot(const float q[4], float r[3][3]) {
    const float w = q[0], x = q[1], y = q[2], z = q[3];
    r[0][0] = 1.0f - 2.0f * (y * y + z * z);
    r[0][1] = 2.0f * (x * y - w * z);
    r[0][2] = 2.0f * (x * z + w * y);
    r[1][0] = 2.0f * (x * y + w * z);
    r[1][1] = 1.0f - 2.0f * (x * x + z * z);
    r[1][2] = 2.0f * (y * z - w * x);
    r[2][0] = 2.0f * (x * z - w * y);
    r[2][1] = 2.0f * (y * z + w * x);
    r[2][2] = 1.0f - 2.0f * (x * x + y * y);
}

// The equidistant fisheye's radial terms at camera point (x, y, z), z > 0 (twin of
// cpu::project::equidistant): s = θ/r with θ = atan2(r, z), a = (∂s/∂r)/r, b = (∂a/∂r)/r,
// ρ² = r² + z²; below w = r²/z² = GS_EQUIDISTANT_SERIES_BELOW the series of atan (six terms),
// which neither cancels nor divides by r = 0 on the axis.
struct Equidistant {
    float s, a, b, rho2;
};

__device__ __forceinline__ Equidistant equidistant(float x, float y, float z) {
    Equidistant e;
    const float r2 = x * x + y * y;
    const float z2 = z * z;
    e.rho2 = r2 + z2;
    const float w = r2 / z2;
    if (w < (float)GS_EQUIDISTANT_SERIES_BELOW) {
        const float rz = 1.0f / z;
        const float rz3 = rz * rz * rz;
        const float rz5 = rz3 * rz * rz;
        e.s = rz * (1.0f + w * ((float)(-1.0 / 3.0) +
                                w * ((float)(1.0 / 5.0) +
                                     w * ((float)(-1.0 / 7.0) +
                                          w * ((float)(1.0 / 9.0) + w * (float)(-1.0 / 11.0))))));
        e.a = rz3 * ((float)(-2.0 / 3.0) +
                     w * ((float)(4.0 / 5.0) +
                          w * ((float)(-6.0 / 7.0) +
                               w * ((float)(8.0 / 9.0) +
                                    w * ((float)(-10.0 / 11.0) + w * (float)(12.0 / 13.0))))));
        e.b = rz5 * ((float)(8.0 / 5.0) +
                     w * ((float)(-24.0 / 7.0) +
                          w * ((float)(16.0 / 3.0) +
                               w * ((float)(-80.0 / 11.0) +
                                    w * ((float)(120.0 / 13.0) + w * (float)(-56.0 / 5.0))))));
        return e;
    }
    const float r = sqrtf(r2);
    e.s = atan2f(r, z) / r;
    e.a = (z / e.rho2 - e.s) / r2;
    e.b = (-2.0f * z / (e.rho2 * e.rho2) - 3.0f * e.a) / r2;
    return e;
}

// Returns false when the Gaussian is culled (behind the near plane, non-finite position, zero
// or non-finite quaternion), exactly as the CPU `geometry` returns None. `filter` is the
// Gaussian's 3D filter (Mip-Splatting's, a standard deviation), or negative for none.
__device__ __forceinline__ bool geometry(const float mean[3], const float log_scale[3],
                                         const float quat[4], float filter, const Cam& cam,
                                         Geometry& g) {
#pragma unroll
    for (int r = 0; r < 3; ++r)
        g.t[r] = cam.rot[r][0] * mean[0] + cam.rot[r][1] * mean[1] + cam.rot[r][2] * mean[2] +
                 cam.trans[r];
    // `!(z > near)` also rejects NaN.
    const bool in_front = g.t[2] > (float)GS_NEAR_PLANE && isfinite(g.t[0]) && isfinite(g.t[1]);
    if (!in_front) return false;
    const float qlen2 =
        quat[0] * quat[0] + quat[1] * quat[1] + quat[2] * quat[2] + quat[3] * quat[3];
    if (!(qlen2 > 0.0f && isfinite(qlen2))) return false;
    g.qlen = sqrtf(qlen2);
#pragma unroll
    for (int a = 0; a < 4; ++a) g.qn[a] = quat[a] / g.qlen;
    quat_to_rot(g.qn, g.rot);
#pragma unroll
    for (int a = 0; a < 3; ++a) g.scale[a] = expf(log_scale[a]);
    g.filter_coef = 1.0f;
    if (filter >= 0.0f) {
        // Σ + f²·I keeps Σ's axes: s' = √(s² + f²) on each; the opacity × ∏ s/s'.
        const float f2 = filter * filter;
#pragma unroll
        for (int a = 0; a < 3; ++a) {
            const float s2 = g.scale[a] * g.scale[a] + f2;
            g.filter_coef *= g.scale[a] / sqrtf(s2);
            g.scale[a] = sqrtf(s2);
        }
    }
    float m[3][3];
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c) m[r][c] = g.rot[r][c] * g.scale[c];
#pragma unroll
    for (int i = 0; i < 3; ++i)
#pragma unroll
        for (int k = 0; k < 3; ++k)
            g.cov3[i][k] = m[i][0] * m[k][0] + m[i][1] * m[k][1] + m[i][2] * m[k][2];
    const float x = g.t[0], y = g.t[1], z = g.t[2];
    if (cam.fisheye) {
        // The equidistant projection's Jacobian, never clamped.
        const Equidistant e = equidistant(x, y, z);
        const float axy = e.a * x * y;
        g.clamped[0] = false;
        g.clamped[1] = false;
        g.j[0][0] = cam.fx * (e.s + e.a * x * x); g.j[0][1] = cam.fx * axy;
        g.j[0][2] = -cam.fx * x / e.rho2;
        g.j[1][0] = cam.fy * axy; g.j[1][1] = cam.fy * (e.s + e.a * y * y);
        g.j[1][2] = -cam.fy * y / e.rho2;
        g.m2[0] = cam.fx * e.s * x + cam.cx;
        g.m2[1] = cam.fy * e.s * y + cam.cy;
    } else {
        const float txtz = x / z, tytz = y / z;
        const float cxz = fminf(fmaxf(txtz, -cam.lim_x_neg), cam.lim_x_pos);
        const float cyz = fminf(fmaxf(tytz, -cam.lim_y_neg), cam.lim_y_pos);
        g.clamped[0] = cxz != txtz;
        g.clamped[1] = cyz != tytz;
        const float tx = cxz * z, ty = cyz * z;
        const float rz = 1.0f / z;
        const float rz2 = rz * rz;
        g.j[0][0] = cam.fx * rz; g.j[0][1] = 0.0f; g.j[0][2] = -cam.fx * tx * rz2;
        g.j[1][0] = 0.0f; g.j[1][1] = cam.fy * rz; g.j[1][2] = -cam.fy * ty * rz2;
        g.m2[0] = cam.fx * x / z + cam.cx;
        g.m2[1] = cam.fy * y / z + cam.cy;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c)
            g.tmat[r][c] = g.j[r][0] * cam.rot[0][c] + g.j[r][1] * cam.rot[1][c] +
                           g.j[r][2] * cam.rot[2][c];
    float ts[2][3];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c)
            ts[r][c] = g.tmat[r][0] * g.cov3[0][c] + g.tmat[r][1] * g.cov3[1][c] +
                       g.tmat[r][2] * g.cov3[2][c];
    const float dil = (float)GS_DILATION;
    g.cov2_raw[0] = ts[0][0] * g.tmat[0][0] + ts[0][1] * g.tmat[0][1] + ts[0][2] * g.tmat[0][2];
    g.cov2_raw[1] = ts[0][0] * g.tmat[1][0] + ts[0][1] * g.tmat[1][1] + ts[0][2] * g.tmat[1][2];
    g.cov2_raw[2] = ts[1][0] * g.tmat[1][0] + ts[1][1] * g.tmat[1][1] + ts[1][2] * g.tmat[1][2];
    g.cov2[0] = g.cov2_raw[0] + dil;
    g.cov2[1] = g.cov2_raw[1];
    g.cov2[2] = g.cov2_raw[2] + dil;
    return true;
}

// The scale of Σ2d's inversion: an even power of two `down` (and `up = 1/down`) bringing
// max(a, c) into [1, 4) when it passes 2^40, else 1 (the CPU reference's `cov2_scale`).
__device__ __forceinline__ void cov2_scale(const float cov2[3], float& down, float& up) {
    down = 1.0f;
    up = 1.0f;
    const float m = fmaxf(cov2[0], cov2[2]);
    if (m > 1099511627776.0f && isfinite(m)) {
        const int k = ilogbf(m) & ~1;
        down = ldexpf(1.0f, -k);
        up = ldexpf(1.0f, k);
    }
}

// Antialiasing compensation √r with r = max(0, det Σ2d_raw / det Σ2d) at the `down` scale
// (the CPU reference's `aa_compensation`); r is returned through `ratio`. NaN maps to 0.
__device__ __forceinline__ float aa_compensation(const Geometry& g, float down, float& ratio) {
    const float a = g.cov2[0] * down, b = g.cov2[1] * down, c = g.cov2[2] * down;
    const float ar = g.cov2_raw[0] * down, br = g.cov2_raw[1] * down,
                cr = g.cov2_raw[2] * down;
    const float q = (ar * cr - br * br) / (a * c - b * b);
    ratio = q > 0.0f ? q : 0.0f;
    return sqrtf(ratio);
}

// Unit view direction from the camera centre to the mean; returns |mean − centre|.
__device__ __forceinline__ float view_dir(const float mean[3], const Cam& cam, float dir[3]) {
    const float v0 = mean[0] - cam.centre[0], v1 = mean[1] - cam.centre[1],
                v2 = mean[2] - cam.centre[2];
    const float n = sqrtf(v0 * v0 + v1 * v1 + v2 * v2);
    dir[0] = v0 / n;
    dir[1] = v1 / n;
    dir[2] = v2 / n;
    return n;
}

#endif // GS_PROJECTION_CUH
