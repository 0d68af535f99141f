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
