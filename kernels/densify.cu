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
