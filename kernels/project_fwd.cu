// project_fwd.cu: one thread per Gaussian; camera projection, EWA 2D covariance, conic,
// screen radius, SH colour, and how many tiles it is binned into; in antialiased mode the
// opacity is multiplied by the compensation √(det Σ2d_raw / det Σ2d), through a 3D filter by
// the filter's ∏ s/s' (projection.cuh). The camera buffer's CAM_FISHEYE picks the pinhole or
// the equidistant fisheye projection (projection.cuh: geometry). Twin of
// cpu::project::project_fwd (and of cpu::binning::Reach for the tiles).
//
// Every output element is written for every Gaussian (culled ones get zeros and radius 0), so
// a poisoned output buffer never leaks through.
#include "common.cuh"
#include "sh.cuh"
#include "projection.cuh"

extern "C" __global__ void project_fwd(
    u32 n,
    const float* __restrict__ means,            // [N, 3]
    const float* __restrict__ log_scales,       // [N, 3]
    const float* __restrict__ rotations,        // [N, 4] (w, x, y, z), unnormalised
    const float* __restrict__ logit_opacities,  // [N]
    const float* __restrict__ sh,               // [N, K, 3], K = (stored degree + 1)²
    u32 coeffs,                                 // K
    u32 degree,                                 // active SH degree, ≤ stored
    const float* __restrict__ cam_buf,          // [GS_CAM_LEN]
    u32 tiles_x, u32 tiles_y,
    u32 antialiased,                            // 0: classic, 1: × compensation
    const float* __restrict__ filter_3d,        // [N] 3D filter std, or null: none
    float* __restrict__ means2d,                // [N, 2] out
    float* __restrict__ conics,                 // [N, 3] out
    float* __restrict__ opacities,              // [N] out
    float* __restrict__ colors,                 // [N, 3] out
    float* __restrict__ depths,                 // [N] out
    u32* __restrict__ radii,                    // [N] out
    u64* __restrict__ tiles_touched)            // [N + 1] out (entry N is zeroed by thread 0)
{
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) tiles_touched[n] = 0;  // the scan turns entry N into the total
    if (i >= n) return;
    const Cam cam = load_cam(cam_buf);

    // Defaults for a culled Gaussian.
    means2d[2 * i] = 0.0f; means2d[2 * i + 1] = 0.0f;
    conics[3 * i] = 0.0f; conics[3 * i + 1] = 0.0f; conics[3 * i + 2] = 0.0f;
    opacities[i] = 0.0f;
    colors[3 * i] = 0.0f; colors[3 * i + 1] = 0.0f; colors[3 * i + 2] = 0.0f;
    depths[i] = 0.0f;
    radii[i] = 0;
    tiles_touched[i] = 0;

    const float mean[3] = {means[3 * i], means[3 * i + 1], means[3 * i + 2]};
    const float ls[3] = {log_scales[3 * i], log_scales[3 * i + 1], log_scales[3 * i + 2]};
    const float q[4] = {rotations[4 * i], rotations[4 * i + 1], rotations[4 * i + 2],
                        rotations[4 * i + 3]};
    Geometry g;
    const float filter = filter_3d != nullptr ? filter_3d[i] : -1.0f;
    if (!geometry(mean, ls, q, filter, cam, g)) return;
    // Σ2d inverted at an exact even power-of-two scale when its entries pass 2^40, so a huge
    // splat (a·c beyond FLT_MAX) is drawn, not culled; bit-identical to the unscaled formulas
    // wherever those are finite (the CPU reference's `cov2_scale`).
    float down, up;
    cov2_scale(g.cov2, down, up);
    const float a = g.cov2[0] * down, b = g.cov2[1] * down, c = g.cov2[2] * down;
    const float det = a * c - b * b;
    if (!(det > 0.0f && isfinite(det))) return;
    const float conic[3] = {c / det * down, -b / det * down, a / det * down};
    const float mid = 0.5f * (a + c);
    // 0.1 floor on the discriminant: 3DGS's, kept identical to the CPU reference.
    const float lambda = (mid + sqrtf(fmaxf(mid * mid - det, 0.1f * down * down))) * up;
    const float radius = ceilf(3.0f * sqrtf(lambda));
    const float z = g.t[2];
    const float m2x = g.m2[0], m2y = g.m2[1];
    if (!(isfinite(radius) && isfinite(m2x) && isfinite(m2y)) || !isfinite(conic[0]) ||
        !isfinite(conic[1]) || !isfinite(conic[2]))
        return;
    u32 x0, x1, y0, y1;
    tile_rect(m2x, m2y, radius, radius, tiles_x, tiles_y, x0, x1, y0, y1);
    if (x0 >= x1 || y0 >= y1) return;
    float opacity = 1.0f / (1.0f + expf(-logit_opacities[i]));
    if (!isfinite(opacity)) return;
    if (antialiased) {
        float ratio;
        opacity *= aa_compensation(g, down, ratio);
    }
    if (filter >= 0.0f) opacity *= g.filter_coef;
    float dir[3];
    view_dir(mean, cam, dir);
    float basis[SH_MAX_BASIS];
    sh_basis(dir[0], dir[1], dir[2], degree, basis);
    const u32 active = (degree + 1) * (degree + 1);
    const float* co = sh + (size_t)i * coeffs * 3;
    float raw[3] = {0.0f, 0.0f, 0.0f};
    for (u32 k = 0; k < active; ++k) {
#pragma unroll
        for (int ch = 0; ch < 3; ++ch) raw[ch] += basis[k] * co[3 * k + ch];
    }
    if (!isfinite(raw[0]) || !isfinite(raw[1]) || !isfinite(raw[2])) return;

    means2d[2 * i] = m2x;
    means2d[2 * i + 1] = m2y;
    conics[3 * i] = conic[0];
    conics[3 * i + 1] = conic[1];
    conics[3 * i + 2] = conic[2];
    opacities[i] = opacity;
#pragma unroll
    for (int ch = 0; ch < 3; ++ch) colors[3 * i + ch] = fmaxf(raw[ch] + 0.5f, 0.0f);
    depths[i] = z;
    // Saturate like the CPU's `min(u32::MAX)`: a huge splat (conic inverted at a scale) can
    // have a radius past 2^32. 4294967295.0f rounds to 2^32, and converting 2^32 to u32 is
    // undefined in C++ (x86 gives 0), so compare against the largest float below 2^32.
    radii[i] = radius > 4294967040.0f ? 0xFFFFFFFFu : (u32)radius;
    // Binned into the tiles its α-support ellipse reaches (Reach): the radius keeps its
    // meaning (visibility, screen size), and a faint splat may reach no tile at all. emit_keys
    // redoes this from the stored values, the same floats, so it writes exactly the tiles
    // counted here; the CPU bins by its stored radius, the same value as (float)radii[i].
    Reach r;
    if (!reach_of(m2x, m2y, conic, opacity, (float)radii[i], tiles_x, tiles_y, r)) return;
    u64 count = 0;
    for (u32 ty = r.y0; ty < r.y1; ++ty) {
        u32 lo, hi;
        reach_row(r, ty, lo, hi);
        count += hi - lo;
    }
    tiles_touched[i] = count;
}
