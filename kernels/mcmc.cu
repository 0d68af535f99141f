// mcmc.cu: the per-step work of the 3DGS-MCMC strategy on device-resident models, twin of
// src/train/mcmc.rs (McmcStrategy::regularize and McmcStrategy::add_noise). One thread per
// Gaussian, the CPU's operations in the CPU's order (no contraction, IEEE division and sqrt);
// only the libm calls (expf, logf, cosf) may differ from the host's by an ulp or two on a GPU.
typedef unsigned int u32;
typedef unsigned long long u64;

#define GS_MCMC_BLOCK 256

__device__ __forceinline__ float mcmc_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Block-wide double sum of `v` (GS_MCMC_BLOCK threads, a power of two); thread 0 gets it.
__device__ __forceinline__ double mcmc_block_sum(double v) {
    __shared__ double part[GS_MCMC_BLOCK];
    part[threadIdx.x] = v;
    __syncthreads();
    for (u32 off = GS_MCMC_BLOCK / 2; off > 0; off >>= 1) {
        if (threadIdx.x < off) part[threadIdx.x] += part[threadIdx.x + off];
        __syncthreads();
    }
    return part[0];
}

// The L1 regularisers: ∂/∂logit_o of d_o·σ(logit_o) and ∂/∂log_s of d_s·exp(log_s) join the
// render's gradients; each block writes its sums of σ(logit_o) and exp(log_s) to the partials
// (the host adds them in block order and forms the loss term). Launch with GS_MCMC_BLOCK
// threads per block; every thread reaches the barriers (rows past n contribute zero).
extern "C" __global__ void __launch_bounds__(GS_MCMC_BLOCK) mcmc_regularize(
    u64 n,                                  // Gaussians
    float d_o,                              // opacity_reg / n
    float d_s,                              // scale_reg / (3n)
    const float* __restrict__ logit_o,      // [n]
    const float* __restrict__ log_s,        // [n, 3]
    float* __restrict__ grad_o,             // [n] updated
    float* __restrict__ grad_s,             // [n, 3] updated
    double* __restrict__ partial_o,         // [blocks] out
    double* __restrict__ partial_s)         // [blocks] out
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    double sum_o = 0.0, sum_s = 0.0;
    if (i < n) {
        const float o = mcmc_sigmoid(logit_o[i]);
        sum_o = (double)o;
        grad_o[i] += d_o * o * (1.0f - o);
        for (u32 a = 0; a < 3; ++a) {
            const float s = expf(log_s[3 * i + a]);
            sum_s += (double)s;
            grad_s[3 * i + a] += d_s * s;
        }
    }
    const double bo = mcmc_block_sum(sum_o);
    __syncthreads();  // the shared buffer is reused by the second sum
    const double bs = mcmc_block_sum(sum_s);
    if (threadIdx.x == 0) {
        partial_o[blockIdx.x] = bo;
        partial_s[blockIdx.x] = bs;
    }
}

// splitmix64's finaliser (twin of mcmc::mix64).
__device__ __forceinline__ u64 mcmc_mix64(u64 x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The standard normal of (seed, row, axis): twin of mcmc::counter_normal.
__device__ __forceinline__ float mcmc_normal(u64 seed, u64 row, u32 axis) {
    const u64 h = mcmc_mix64(seed ^ mcmc_mix64(row * 3ull + (u64)axis));
    const float u1 = (float)((h >> 40) + 1ull) * (1.0f / 16777216.0f);  // (0, 1]
    const float u2 = (float)(h & 0xFFFFFFull) * (1.0f / 16777216.0f);  // [0, 1)
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}

// mean += scale · σ(−k·(o − t)) · Σz with Σ = R·diag(exp(2·log_s))·Rᵀ and z the counter
// normals of the row: twin of McmcStrategy::add_noise.
extern "C" __global__ void mcmc_noise(
    u64 n,                                  // Gaussians
    u64 first,                              // model row of row 0 (a shard's first row)
    u64 seed,                               // this step's noise seed
    float scale,                            // noise_lr · lr_means
    float k,                                // gate steepness
    float t,                                // gate threshold
    float* __restrict__ means,              // [n, 3] updated
    const float* __restrict__ log_s,        // [n, 3]
    const float* __restrict__ rot,          // [n, 4] (w, x, y, z), not necessarily unit
    const float* __restrict__ logit_o)      // [n]
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float o = mcmc_sigmoid(logit_o[i]);
    const float w = mcmc_sigmoid(-k * (o - t));
    float z[3];
    for (u32 a = 0; a < 3; ++a) z[a] = mcmc_normal(seed, first + i, a);
    // rotation_matrix: the normalised quaternion's matrix, identity for a zero or non-finite one.
    float q[4] = {rot[4 * i], rot[4 * i + 1], rot[4 * i + 2], rot[4 * i + 3]};
    const float qn = sqrtf(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    float r[3][3] = {{1.0f, 0.0f, 0.0f}, {0.0f, 1.0f, 0.0f}, {0.0f, 0.0f, 1.0f}};
    if (qn > 0.0f && isfinite(qn)) {
        const float qw = q[0] / qn, x = q[1] / qn, y = q[2] / qn, zq = q[3] / qn;
        r[0][0] = 1.0f - 2.0f * (y * y + zq * zq);
        r[0][1] = 2.0f * (x * y - qw * zq);
        r[0][2] = 2.0f * (x * zq + qw * y);
        r[1][0] = 2.0f * (x * y + qw * zq);
        r[1][1] = 1.0f - 2.0f * (x * x + zq * zq);
        r[1][2] = 2.0f * (y * zq - qw * x);
        r[2][0] = 2.0f * (x * zq - qw * y);
        r[2][1] = 2.0f * (y * zq + qw * x);
        r[2][2] = 1.0f - 2.0f * (x * x + y * y);
    }
    float local[3];
    for (u32 a = 0; a < 3; ++a) {
        const float s2 = expf(2.0f * log_s[3 * i + a]);
        local[a] = s2 * (r[0][a] * z[0] + r[1][a] * z[1] + r[2][a] * z[2]);
    }
    for (u32 c = 0; c < 3; ++c) {
        const float d = r[c][0] * local[0] + r[c][1] * local[1] + r[c][2] * local[2];
        means[3 * i + c] += scale * w * d;
    }
}
