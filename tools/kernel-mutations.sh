#!/usr/bin/env bash
# kernel-mutations.sh: plants small bugs in the CUDA kernels, one at a time, and checks
# that the parity tests (tests/cuda_parity.rs, train::device_loss, train::device_adam,
# train::device_engine) catch
# each on the host emulation driver (no GPU needed). A mutation that survives means a kernel
# path the tests do not really check.
#
#   tools/kernel-mutations.sh            # ~1 min per mutation on 2 cores (one rebuild each)
#   tools/kernel-mutations.sh densify    # only the mutations of files matching 'densify'
#   tools/kernel-mutations.sh loss 'sh\[|sc\['  # ... whose original text matches an ERE
#
# Works in a throw-away git worktree of HEAD (its own target dir), so the checkout is never
# modified. Prints one line per mutation, "caught" or "SURVIVED", and exits 1 if any survived.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wt=$(mktemp -d /tmp/gs-mutations.XXXXXX)
git -C "$root" worktree add -q --detach "$wt" HEAD
trap 'git -C "$root" worktree remove --force "$wt"' EXIT
cd "$wt"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/mutations}

# file|original|mutant: arithmetic, indexing and a removed barrier, across every kernel file.
muts=(
 'kernels/project_fwd.cu|conics[3 * i + 1] = conic[1];|conics[3 * i + 1] = conic[2];'
 'kernels/project_bwd.cu|v_opacities[i] * comp * o * (1.0f - o);|v_opacities[i] * comp * o * (1.0f + o);'
 'kernels/projection.cuh|(ar * cr - br * br) / (a * c - b * b)|(ar * cr - br * br) / (a * c + b * b)'
 'kernels/project_bwd.cu|const float keep = 1.0f - ratio;|const float keep = 1.0f + ratio;'
 'kernels/project_bwd.cu|make_float4(value(e), value(e + 1), value(e + 2), value(e + 3));|make_float4(value(e), value(e + 2), value(e + 1), value(e + 3));'
 'kernels/project_bwd.cu|    write_sh_grad(g_sh + (size_t)i * coeffs * 3, coeffs, 0, none, nullptr);|    (void)none;'
 'kernels/project_bwd.cu|    if ((coeffs & 3u) == 0) {|    if (true) {'
 'kernels/project_bwd.cu|return e / 3 < active ? (ch == 0 ? r0 : ch == 1 ? r1 : r2) * basis[e / 3] : 0.0f;|return (ch == 0 ? r0 : ch == 1 ? r1 : r2) * basis[e / 3];'
 'kernels/project_bwd.cu|acc[3] += 2.0 * (gs[1][2] - gs[2][1]) - tx_dt[0];|acc[3] += (gs[1][2] - gs[2][1]) - tx_dt[0];'
 'kernels/project_bwd.cu|acc[r] -= dt[r] + wd;|acc[r] -= dt[r];'
 'kernels/project_bwd.cu|s += part[(u64)k * blocks + b];|s += part[(u64)k + b];'
 'kernels/projection.cuh|e.s = rz * (1.0f + w * ((float)(-1.0 / 3.0) +|e.s = rz * (1.0f + w * ((float)(-1.0 / 3.1) +'
 'kernels/projection.cuh|e.b = (-2.0f * z / (e.rho2 * e.rho2) - 3.0f * e.a) / r2;|e.b = (-2.0f * z / (e.rho2 * e.rho2) - 2.0f * e.a) / r2;'
 'kernels/project_bwd.cu|dt[2] = p * sz + q * sz2 + r * sz2 * z + sz * m;|dt[2] = p * sz + q * sz2 + sz * m;'
 'kernels/project_bwd.cu|    cam.fisheye = FISHEYE;|    cam.fisheye = false;'
 'kernels/densify.cu|            rate = fmaxf(fx, fy) * s;|            rate = fmaxf(fx, fy) / z;'
 'kernels/tile_binning.cu|keys[off] = ty * tiles_x + tx;|keys[off] = tx * tiles_y + ty;'
 'kernels/tile_binning.cu|ranges[2 * tile + 1] = (u32)(i + 1);|ranges[2 * tile + 1] = (u32)(i);'
 'kernels/tile_binning.cu|counts[k] = tiles_touched[order[k]];|counts[k] = tiles_touched[k];'
 'kernels/tile_binning.cu|    u64 off = offsets[k];|    u64 off = offsets[i];'
 'kernels/common.cuh|const float y1 = fminf(fmaxf(-bq, dy_lo), dy_hi);|const float y1 = fminf(fmaxf(bq, dy_lo), dy_hi);'
 'kernels/common.cuh|    r.q = hx / c;|    r.q = hy / c;'
 'kernels/common.cuh|const float cut = clip ? cut0 / (1.0f - k) : cut0;|const float cut = cut0;'
 'kernels/common.cuh|const bool clip = k >= 0.0f && k < (float)GS_SIGMA_ROUNDING_MAX;|const bool clip = k >= 0.0f;'
 'kernels/scan.cu|(tid > 0) ? s[tid - 1] : (T)0;|(tid > 0) ? s[tid] : (T)0;'
 'kernels/sort.cu|atomicAdd(&h[digit], (u32)__popc(peers));|atomicAdd(&h[digit], 1u);'
 'kernels/sort.cu|const u32 below = __popc(peers & ((1u << lane) - 1u));|const u32 below = __popc(peers & ((1u << lane) + 1u));'
 'kernels/sort.cu|            u32 run = seen[tid];|            u32 run = 0;'
 'kernels/sort.cu|                cnt[w][tid] = 0;|                (void)0;'
 'kernels/sort.cu|        u32 run = incl - sum;|        u32 run = incl;'
 'kernels/sort.cu|(u64)out_base[d] + (j - start[d]);|(u64)out_base[d] + j;'
 'kernels/sort.cu|    __syncthreads();  // the reordered tile is complete|    // (barrier removed)'
 'kernels/rasterize_fwd.cu|last_k = b0 - start + j + 1;|last_k = b0 - start + j;'
 'kernels/rasterize_bwd.cu|v[SLOT_CONIC + 1] = d_sigma * dx * dy;|v[SLOT_CONIC + 1] = d_sigma * dx * dx;'
 'kernels/rasterize_bwd.cu|v[SLOT_ABS + 1] = fabsf(v[SLOT_MEAN + 1]);|v[SLOT_ABS + 1] = v[SLOT_MEAN + 1];'
 'kernels/rasterize_bwd.cu|dst = &v_means2d_abs[2 * g + (slot - SLOT_ABS)];|dst = &v_means2d_abs[2 * g];'
 'kernels/rasterize_bwd.cu|dst = &v_colors[3 * g + (slot - SLOT_COLOR)];|dst = &v_colors[3 * g + (slot - SLOT_CONIC)];'
 'kernels/rasterize_bwd.cu|    reduce_half<2>(v, lane);|    (void)0;'
 'kernels/rasterize_bwd.cu|const bool upper = (lane & (u32)(2 * HALF)) != 0u;|const bool upper = (lane & (u32)HALF) != 0u;'
 'kernels/rasterize_bwd.cu|if ((lane & 1u) == 0u && dst != nullptr)|if (dst != nullptr)'
 'kernels/raster.cuh|dy = s.my - fy;|dy = s.my - fx;'
 'kernels/rasterize_bwd.cu|        __syncthreads();  // the previous batch is no longer read|        // (barrier removed)'
 'kernels/loss.cu|s[4] += w * (x * y);|s[4] += w * (x * x);'
 'kernels/loss.cu|inv_n * (g[0] + two * x * g[1] + y * g[2])|inv_n * (g[0] + two * x * g[1] + x * g[2])'
 'kernels/loss.cu|*y0 = (int)(blockIdx.x / tiles_x) * SSIM_TILE;|*y0 = (int)(blockIdx.x % tiles_x) * SSIM_TILE;'
 'kernels/loss.cu|const int gr = y0 - SSIM_RADIUS + r, gc = x0 - SSIM_RADIUS + col;|const int gr = y0 - SSIM_RADIUS + r, gc = x0 + col;'
 'kernels/loss.cu|    __syncthreads();  // the staged tile is complete|    // (barrier removed)'
 'kernels/loss.cu|const float x = sx[c][r][col + k], y = sy[c][r][col + k]|const float x = sx[c][r][col + k], y = sy[c][r][col]'
 'kernels/loss.cu|for (int m = 0; m < 5; ++m) st[m] += w * sh[m][py + k][px];|for (int m = 0; m < 5; ++m) st[m] += w * sh[m][k][px];'
 'kernels/loss.cu|        __syncthreads();  // the next channel'"'"'s horizontal pass overwrites sh|        // (barrier removed)'
 'kernels/loss.cu|v = coef[(u64)(c * 3 + m) * npix + (u32)gr * width + (u32)gc];|v = coef[(u64)(c * 3 + m) * npix + (u32)gr * width + (u32)gc + 1u];'
 'kernels/loss.cu|acc += ssim_w(k) * sc[m][r][col + k];|acc += ssim_w(k) * sc[m][r][col];'
 'kernels/loss.cu|for (int m = 0; m < 3; ++m) g[m] += w * sh[m][py + k][px];|for (int m = 0; m < 3; ++m) g[m] += w * sh[m][py + k][px ^ 1];'
 'kernels/common.cuh|for (u32 off = BLOCK / 2; off > 0; off >>= 1)|for (u32 off = BLOCK / 4; off > 0; off >>= 1)'
 'kernels/loss.cu|x2 * e[8 + j] + e[4 * j + 3];|x2 * e[8 + j] + e[4 + j];'
 'kernels/loss.cu|            g[4 * j + 3] = dj;|            g[4 * j + 3] = 0.0;'
 'kernels/loss.cu|e[4 * i + 1] * dy[1]|e[4 * i + 1] * dy[0]'
 'kernels/loss.cu|s += part[(u64)k * blocks + b];|s += part[b];'
 'kernels/adam.cu|v = b2 * v + (1.0f - b2) * g * g;|v = b2 * v + (1.0f - b2) * g;'
 'kernels/adam.cu|const bool dc = (i / 3) % k == 0;|const bool dc = i % k == 0;'
 'kernels/adam.cu|if (radii && radii[i / per] == 0) return;|if (radii && radii[i] == 0) return;'
 'kernels/adam.cu|if (radii && radii[i / (3ull * k)] == 0) return;|if (radii && radii[i / 3ull] == 0) return;'
 'kernels/densify.cu|grad_accum[i] += sqrtf(x * x + y * y);|grad_accum[i] += sqrtf(x * x + x * y);'
 'kernels/densify.cu|in[(u64)src[r] * width + c];|in[(u64)src[r] * width];'
 'kernels/densify.cu|out[(u64)rows[i / 3] * 3 + i % 3] = values[i];|out[(u64)rows[i / 3] * 3] = values[i];'
 'kernels/densify.cu|    m[i] = 0.0f;|    m[i] = m[i];'
 'kernels/rasterize_fwd.cu|dep += s.inv_z * w;|dep += s.inv_z * alpha;'
 'kernels/rasterize_fwd.cu|batch[tid].inv_z = 1.0f / depths[g];|batch[tid].inv_z = depths[g];'
 'kernels/rasterize_bwd.cu|d_alpha += (s.inv_z - acc_dep) * ddep;|d_alpha += s.inv_z * ddep;'
 'kernels/rasterize_bwd.cu|v[SLOT_INV_Z] = w * ddep;|v[SLOT_INV_Z] = alpha * ddep;'
 'kernels/project_bwd.cu|dt[2] += -v_inv_depths[i] * rz2;|dt[2] += -v_inv_depths[i] * rz;'
 'kernels/loss.cu|&& frame[mask_offset + p] == 0)|&& frame[p] == 0)'
 'kernels/loss.cu|if (raw == 0u |if (raw == 1u '
 'kernels/loss.cu|((u32)frame[depth_offset + 2 * p + 1] << 8)|((u32)frame[depth_offset + 2 * p] << 8)'
 'kernels/loss.cu|(1.0f / 65536.0f) * scale + offset;|(1.0f / 65536.0f) * scale;'
 'kernels/loss.cu|d_out[p] = diff > 0.0f ? s : (diff < 0.0f ? -s : 0.0f);|d_out[p] = diff > 0.0f ? s : -s;'
 'kernels/loss.cu|const float s = normalized != 0u ? step / a : step;|const float s = step;'
 'kernels/loss.cu|normalized != 0u ? render[p] / a : render[p];|render[p];'
 'kernels/loss.cu|a < min_cover)|a < 0.0f)'
 'kernels/loss.cu|((float)p + 0.5f) / (float)n * (float)(cells - 1u)|((float)p) / (float)n * (float)(cells - 1u)'
 'kernels/loss.cu|0.587f * g + 0.114f * b) * top|0.587f * g + 0.114f * r) * top'
 'kernels/loss.cu|const float dzs[2] = {-1.0f, 1.0f};|const float dzs[2] = {1.0f, 1.0f};'
 'kernels/loss.cu|out[3 * p + j] = a[4 * j] * x0|out[3 * p + j] = a[j] * x0'
 'kernels/loss.cu|acc[k] += (double)(c.w[i] * da[k]);|acc[k] += (double)(da[k]);'
 'kernels/loss.cu|const float lo = ((float)cx - 1.0f) * s - 1.0f|const float lo = ((float)cx) * s - 1.0f'
 'kernels/loss.cu|c.inside ? dgz * (float)(nl - 1u) : 0.0f;|dgz * (float)(nl - 1u);'
 'kernels/loss.cu|d[3 * p + i] = a[i] * dy[0]|d[3 * p + i] = a[4 * i] * dy[0]'
 'kernels/loss.cu|g += 2.0 * w * d;|g += w * d;'
 'kernels/loss.cu|g -= 2.0 * w * d;|g += 2.0 * w * d;'
 'kernels/loss.cu|g += slot_grad[within];|g += 0.5 * slot_grad[within];'
 'kernels/loss.cu|{12u, (u64)nx * 12u, (u64)nx * ny * 12u}|{12u, (u64)ny * 12u, (u64)nx * ny * 12u}'
)
only=${1:-}
text=${2:-}
survived=0
for m in "${muts[@]}"; do
    IFS='|' read -r file from to <<<"$m"
    [[ -z "$only" || "$file" == *"$only"* ]] || continue
    [[ -z "$text" || "$from" =~ $text ]] || continue
    git checkout -q -- kernels
    python3 - "$file" "$from" "$to" <<'PY'
import sys
f, a, b = sys.argv[1:4]
s = open(f).read()
if a not in s:
    sys.exit(f"{f}: the text to mutate is gone; update tools/kernel-mutations.sh: {a!r}")
open(f, "w").write(s.replace(a, b, 1))
PY
    if cargo test -q --test cuda_parity >/dev/null 2>&1 &&
        cargo test -q --lib train::device_ >/dev/null 2>&1; then
        verdict=SURVIVED
        survived=1
    else
        verdict=caught
    fi
    echo "$verdict | $file: '$from' -> '$to'"
done
exit $survived
