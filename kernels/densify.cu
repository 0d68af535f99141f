// densify.cu: the densification statistics of one view, twin of
// DefaultStrategy::accumulate in src/train/densify.rs. For every Gaussian drawn in the view
// (radius > 0): grad_accum += |∂L/∂mean2d · (W/2, H/2)|, denom += 1, max_radii = max(...).
// One thread per Gaussian, no reductions, the CPU's operations in the CPU's order (no
// contraction, IEEE sqrtf): bit-identical to the CPU for the same inputs.
typedef unsigned int u32;
typedef unsigned long long u64;

extern "C" __global__ void densify_accumulate(
    u64 n,                                  // Gaussians
    float half_w,                           // W / 2
    float half_h,                           // H / 2
    const u32* __restrict__ radii,          // [n] screen radii of the last forward (0 = culled)
    const float* __restrict__ means2d_grad, // [n, 2] ∂L/∂mean2d in pixels
    float* __restrict__ grad_accum,         // [n] updated
    u32* __restrict__ denom,                // [n] updated
    u32* __restrict__ max_radii)            // [n] updated
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const u32 r = radii[i];
    if (r == 0u) return;
    const float x = means2d_grad[2 * i] * half_w;
    const float y = means2d_grad[2 * i + 1] * half_h;
    grad_accum[i] += sqrtf(x * x + y * y);
    denom[i] += 1u;
    if (r > max_radii[i]) max_radii[i] = r;
}

// Output row r of a densified model copies old row src[r] (`width` floats per row); rows with
// fresh[r] != 0 are zero instead when zero_fresh (new Gaussians' Adam moments). Twin of
// Model::apply_rows. A row whose src is GS_SKIP_ROW (~0u) is left as it is: a model split
// over devices fills it from another device's rows (scatter_rows).
extern "C" __global__ void gather_rows(
    u64 rows,                              // output rows
    u32 width,                             // floats per row
    const u32* __restrict__ src,           // [rows] old row of each output row
    const unsigned char* __restrict__ fresh,  // [rows] 1 = a new row
    u32 zero_fresh,                        // 1: new rows are zero (moments), 0: copied
    const float* __restrict__ in,          // [old rows, width]
    float* __restrict__ out)               // [rows, width]
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * width) return;
    const u64 r = i / width, c = i % width;
    if (src[r] == 0xFFFFFFFFu) return;
    out[i] = (zero_fresh != 0u && fresh[r] != 0) ? 0.0f : in[(u64)src[r] * width + c];
}

// out[dst[k], :] = in[k, :] (`width` floats per row): rows gathered on another device, put in
// their places of a sharded model's new rows.
extern "C" __global__ void scatter_rows(
    u64 count,
    u32 width,
    const u32* __restrict__ dst,   // [count] output row of each input row
    const float* __restrict__ in,  // [count, width]
    float* __restrict__ out)       // [*, width]
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count * width) return;
    out[(u64)dst[i / width] * width + i % width] = in[i];
}

// out[rows[k], :] = values[k, :] (3 floats per row): the split children's means and scales.
extern "C" __global__ void set_rows3(
    u64 count,
    const u32* __restrict__ rows,     // [count]
    const float* __restrict__ values, // [count, 3]
    float* __restrict__ out)          // [*, 3]
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count * 3) return;
    out[(u64)rows[i / 3] * 3 + i % 3] = values[i];
}

// Opacity ← min(opacity, max) in logit space with the opacity moments zeroed: twin of
// Model::reset_opacity (the same sigmoid test, then the same capped logit from the host).
extern "C" __global__ void reset_opacity(
    u64 n,
    float max_opacity,
    float cap_logit,
    float* __restrict__ o,   // [n] logit opacities
    float* __restrict__ m,   // [n] first moments of the opacities
    float* __restrict__ v)   // [n] second moments
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float sig = 1.0f / (1.0f + expf(-o[i]));
    if (sig > max_opacity) o[i] = cap_logit;
    m[i] = 0.0f;
    v[i] = 0.0f;
}

// out[rows[k]] = values[k] (1 float per row): MCMC's corrected opacities.
extern "C" __global__ void set_rows1(
    u64 count,
    const u32* __restrict__ rows,     // [count]
    const float* __restrict__ values, // [count]
    float* __restrict__ out)          // [*]
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    out[rows[i]] = values[i];
}

// Mip-Splatting's 3D filter, step 1 (twin of train::filter3d::sampling_rate, the same f32
// operations in the same order): each Gaussian's highest sampling rate `focal/z` over the
// cameras whose view, widened by `margin` of its size on each side, holds its centre past the
// near plane; 0 when none does. The lowest positive rate is folded into `lowest_bits` (the
// bits of a positive float order as the float does, so an integer atomicMin is exact and
// independent of the order of the threads).
extern "C" __global__ void filter3d_rates(
    u64 n,
    const float* __restrict__ means, // [n, 3]
    const float* __restrict__ cams,  // [ncams, 19]: rotation (row-major), translation,
                                     // fx fy cx cy, width, height, 1: fisheye
    u32 ncams,
    float near_plane,
    float margin,
    float* __restrict__ rates,       // [n] out
    u32* __restrict__ lowest_bits)   // [1] atomicMin of the positive rates' bits
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float m0 = means[3 * i], m1 = means[3 * i + 1], m2 = means[3 * i + 2];
    float best = 0.0f;
    for (u32 k = 0; k < ncams; ++k) {
        const float* c = cams + 19 * (u64)k;
        const float z = c[6] * m0 + c[7] * m1 + c[8] * m2 + c[11];
        // `!(z > near)` also skips a NaN.
        if (!(z > near_plane)) continue;
        const float tx = c[0] * m0 + c[1] * m1 + c[2] * m2 + c[9];
        const float ty = c[3] * m0 + c[4] * m1 + c[5] * m2 + c[10];
        const float fx = c[12], fy = c[13], w = c[16], h = c[17];
        // The centre's pixel and the camera's pixels per scene unit there.
        float x, y, rate;
        if (c[18] != 0.0f) {
            // Fisheye: θ/r per unit of the normalised image plane (1/z on the axis).
            const float r = sqrtf(tx * tx + ty * ty);
            const float s = r > 0.0f ? atan2f(r, z) / r : 1.0f / z;
            x = fx * tx * s + c[14];
            y = fy * ty * s + c[15];
            rate = fmaxf(fx, fy) * s;
        } else {
            x = fx * tx / z + c[14];
            y = fy * ty / z + c[15];
            rate = fmaxf(fx, fy) / z;
        }
        const bool inside = x >= -margin * w && x <= (1.0f + margin) * w && y >= -margin * h &&
                            y <= (1.0f + margin) * h;
        if (inside) best = fmaxf(best, rate);
    }
    rates[i] = best;
    if (best > 0.0f) atomicMin(lowest_bits, __float_as_uint(best));
}

// Step 2 (twin of train::filter3d::finish): rate → filter `numerator / rate` in place, a rate
// of 0 (seen by no camera) taking the lowest rate seen, read from the device (step 1's, or the
// lowest over every shard of a model split over devices; ∞ when none was seen: filter 0), so
// one device sets its filter without waiting for the host.
extern "C" __global__ void filter3d_finish(
    u64 n,
    float numerator,
    const u32* __restrict__ lowest_bits, // [1]
    float* __restrict__ rates)           // [n] in: rates; out: filters
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float r = rates[i];
    rates[i] = numerator / (r > 0.0f ? r : __uint_as_float(lowest_bits[0]));
}

// Opacity reset through the 3D filter (twin of Model::reset_opacity_through, in double as it
// is): the drawn opacity σ(x)·c, c = ∏ s/√(s² + f²), becomes min(σ(x)·c, cap); the opacity
// moments are zeroed.
extern "C" __global__ void reset_opacity_filtered(
    u64 n,
    float max_opacity,
    const float* __restrict__ log_scales, // [n, 3]
    const float* __restrict__ filter,     // [n]
    float* __restrict__ o,                // [n] logit opacities
    float* __restrict__ m,                // [n] first moments of the opacities
    float* __restrict__ v)                // [n] second moments
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double cap = (double)max_opacity;
    const double f2 = (double)filter[i] * (double)filter[i];
    double c = 1.0;
    for (int a = 0; a < 3; ++a) {
        const double s2 = exp(2.0 * (double)log_scales[3 * i + a]);
        c *= sqrt(s2 / (s2 + f2));
    }
    const double drawn = 1.0 / (1.0 + exp(-(double)o[i])) * c;
    if (drawn > cap) {
        const double p = cap / c;
        o[i] = (float)log(p / (1.0 - p));
    }
    m[i] = 0.0f;
    v[i] = 0.0f;
}
