// adam.cu: one Adam step on device-resident parameters, twin of src/train/adam.rs (PyTorch's
// non-fused order of operations, no contraction, IEEE sqrt and division: bit-identical to the
// CPU). The per-group scalars (β1, β2, lr/(1 − β1ᵗ), √(1 − β2ᵗ), ε) come from the host, computed
// by the CPU's own code, so both engines step with the very same f32 values. Sparse Adam (3DGS's
// sparse_adam, gsplat's visible_adam): with `radii`, a Gaussian whose radius in this step's view
// is 0 keeps its parameters and moments; its scalars then come without bias correction (host).
// `radii` may be null: every Gaussian is updated.
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ void adam_update(float& p, float& m, float& v, float g, float b1,
                                            float b2, float step_size, float bias2_sqrt,
                                            float eps) {
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    const float denom = sqrtf(v) / bias2_sqrt + eps;
    p -= step_size * (m / denom);
}

// One parameter group stored contiguously (means, log-scales, rotations, opacities).
extern "C" __global__ void adam_step(
    u64 n,                         // values in the group
    float* __restrict__ p,         // [n] parameters, updated
    float* __restrict__ m,         // [n] first moments, updated
    float* __restrict__ v,         // [n] second moments, updated
    const float* __restrict__ g,   // [n] gradients
    const u32* __restrict__ radii, // [n / per] this step's screen radii, or null (dense)
    u64 per,                       // values per Gaussian
    float b1, float b2, float step_size, float bias2_sqrt, float eps)
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (radii && radii[i / per] == 0) return;
    adam_update(p[i], m[i], v[i], g[i], b1, b2, step_size, bias2_sqrt, eps);
}

// The SH array [N, K, 3]: coefficient 0 is the f_dc group, 1..K the f_rest group, each with
// its own scalars and an on/off flag (a group densification just replaced is skipped).
extern "C" __global__ void adam_step_sh(
    u64 n_values,                  // N·K·3
    u32 k,                         // K coefficients per Gaussian
    float* __restrict__ p,         // [N, K, 3]
    float* __restrict__ m,         // [N, K, 3]
    float* __restrict__ v,         // [N, K, 3]
    const float* __restrict__ g,   // [N, K, 3]
    const u32* __restrict__ radii, // [N] this step's screen radii, or null (dense)
    u32 dc_on, float dc_b1, float dc_b2, float dc_step, float dc_bias2, float dc_eps,
    u32 rest_on, float r_b1, float r_b2, float r_step, float r_bias2, float r_eps)
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_values) return;
    if (radii && radii[i / (3ull * k)] == 0) return;
    const bool dc = (i / 3) % k == 0;
    if (dc ? !dc_on : !rest_on) return;
    if (dc) adam_update(p[i], m[i], v[i], g[i], dc_b1, dc_b2, dc_step, dc_bias2, dc_eps);
    else adam_update(p[i], m[i], v[i], g[i], r_b1, r_b2, r_step, r_bias2, r_eps);
}
