#!/usr/bin/env bash
# gpu-bench.sh BUNDLE OUT STEP...: the long GPU benchmarks, on a machine with an NVIDIA GPU,
# CUDA 13, PyTorch and no Rust (BUNDLE from tools/gpu-bundle.sh). Steps run in the order given;
# each logs to OUT/<step>.log, appends one line to OUT/summary.txt and copies its report(s)
# to OUT/. A step that fails does not stop the next one.
#
#   fox-ours      gs-pack convert the bundle's fox photos at full resolution (1080x1920,
#                 cropped to the 1067x1902 its lens fills; 43 train / 7 test views, no SfM
#                 points: 100,000 random initial Gaussians), then
#                 gs-train --backend cuda --iterations $GS_BENCH_ITERATIONS (30000) --eval
#                 --seed $GS_BENCH_SEED (1) --checkpoint-every 0 (no periodic checkpoint
#                 writes inside the timed loop; SIGINT still writes one) --profile-steps 200
#                 --profile-at $GS_BENCH_PROFILE_AT (the parts of 200 steps by CUDA events
#                 from each of those iterations, as gsplat's harness times its own; default
#                 101, 2801 and 3101 around the opacity reset at 3,000, 6801 before 7,000,
#                 and the last 200 of a longer run): report.json (it/s, wall, peak RSS, stall
#                 fraction, test PSNR/SSIM, Gaussians, peak_device_bytes: the peak of its own
#                 buffers, phase_ms: a window each, with its Gaussians and intersections)
#                 + the process's whole peak device memory sampled by nvidia-smi.
#   gsplat-build  installs BUNDLE/wheels/gsplat-1.5.3 (no deps: torch numpy ninja jaxtyping
#                 rich come with the machine) into WORK/site and JIT-compiles its CUDA
#                 extension into WORK/torch_extensions (nothing is timed); builds
#                 BUNDLE/src/fused-ssim into WORK/site when the bundle has it (else, or if
#                 that build fails, gsplat_train.py's SSIM loss runs in torch, and says so).
#                 CPU-bound: MAX_JOBS = all cores.
#   fox-gsplat    gs-pack export of the same pack with --random-points SEED (the same 100k
#                 points ours starts from), then tools/gsplat_train.py (gsplat's simple_trainer
#                 defaults) on it with the same iterations, --eval, seed, profile windows;
#                 compiles first if
#                 gsplat-build did not run on this machine (compile time is reported apart and
#                 never timed as training).
#   synth-budget  gs-pack synth 600 views of 1600x1066 with 1,000,000 points (seed 1), packed
#                 (2.87 GiB decoded, 305 MiB zstd), then gs-train --backend cuda --ram-budget 2G
#                 --iterations 30000, time-boxed to what is left of the call (interrupted
#                 cleanly by SIGINT: report.json is written with "interrupted": true): stall
#                 fraction (goal < 1 %), peak RSS against the budget, it/s, cache hit rate.
#   synth-pack    only the pack of synth-budget (CPU only, so it can run beside a GPU step).
#   table         one markdown table from the reports in OUT: ours vs gsplat on fox, and the
#                 synthetic budget run, with the exact commands.
#
# Time: the whole invocation stays inside one 10-minute device call (GS_BENCH_SECONDS, default
# 570): each step gets what is left. Training runs that cannot finish in time stop cleanly
# (ours: SIGINT -> checkpoint, exit 130; gsplat_train.py: --stop-after -> WORK/.../resume.pt,
# exit 75) and CONTINUE when the same step is run again by the next call on the same, still
# warm machine: WORK (default .gpu-work in the repository, git-ignored, so the device tool keeps
# it between calls while the machine stays warm; do not name it in `carry`) holds packs,
# checkpoints, the gsplat install and its compiled extension. A fresh machine starts over.
# Reports of a run that took several calls add the segments up (table does it for ours). To
# measure again from scratch, delete WORK (or the step's folder in it). Use the same OUT in
# every call: table reads the reports there.
#
# Measured (NVIDIA H100 80GB HBM3, 16 cores, 2026-11-26; commands in docs/gpu.md):
#   - gsplat-build: 84 s with MAX_JOBS=12, run beside tools/gpu-verify.sh (which took 236 s);
#   - fox pack + export: 2 s; fox-ours, 7,000 iterations: 58 s wall (131.6 it/s);
#   - fox-gsplat, 7,000 iterations: 243 s wall over two calls, 202 s of it training (34.7
#     it/s; the rest: two process starts, loading the photos, scoring); 30,000 would need ~15
#     minutes, a session's whole device time;
#   - synth-budget: generation 17 s + pack 2 s, then 76 it/s (10,781 iterations in 147 s).
# So one 10-minute call holds the verification, the gsplat build and both 7k fox runs except
# gsplat's last ~1,000 iterations; issue the continuing call back to back (the machine is
# released after ~30 s idle, and WORK with it: a resumed step then starts over). A full
# 30,000-iteration synth-budget fits one call alone.
# Measured (NVIDIA H200, 16 cores, 2026-11-28; tools/gpu-session.sh verify, then next):
#   - fused-ssim build 90 s, gsplat-build 77 s (MAX_JOBS=16, alone);
#   - fox-ours, 7,000 iterations: 61 s (127.1 it/s); fox-gsplat with fused-ssim, 7,000
#     iterations: 87 s wall, 55 s of it training (127.9 it/s): gsplat's 34.7 it/s above was the
#     torch SSIM's; at these rates both 30,000-iteration runs fit one session (~4.5 minutes
#     each; tools/gpu-session.sh 30k);
#   - synth-pack 24 s (beside the verification); synth-budget time-boxed to 75 s: 91.9 it/s.
#
# Environment: GS_BENCH_ITERATIONS (30000), GS_BENCH_TEST_ITERATIONS (fox-ours' evaluations,
# default the last iteration; "7000 30000" adds the 3DGS paper's 7k evaluation), GS_BENCH_SEED
# (1), GS_BENCH_PROFILE_AT (both fox runs' profiled windows, 200 steps from each; default
# above), GS_BENCH_SECONDS (570),
# GS_BENCH_WORK (REPO/.gpu-work), GS_BENCH_SYNTH_ITERATIONS (30000), GS_BENCH_SYNTH_SECONDS
# (synth-budget's time box; default what is left of the call), PYTHON (python3).
# Exit status: 0 when every step passed (a run stopped to be continued counts as passed and
# says so), 1 otherwise.
# The step functions run through `bash -c` (exported), which shellcheck cannot follow.
# shellcheck disable=SC2317
set -uo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 BUNDLE OUT STEP... (steps: fox-ours gsplat-build fox-gsplat synth-pack synth-budget table)" >&2
    exit 2
fi
bundle=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
work=${GS_BENCH_WORK:-$root/.gpu-work}
mkdir -p "$work"
work=$(cd "$work" && pwd)
iters=${GS_BENCH_ITERATIONS:-30000}
seed=${GS_BENCH_SEED:-1}
synth_iters=${GS_BENCH_SYNTH_ITERATIONS:-30000}
# The fox runs' profiled windows (200 steps each): warm, either side of the opacity reset at
# 3,000, before 7,000 and at the end of a longer run; only windows that end by $iters.
profile_at=${GS_BENCH_PROFILE_AT:-$(for a in 101 2801 3101 6801 $((iters - 199)); do
    [ "$a" -ge 1 ] && [ $((a + 199)) -le "$iters" ] && echo "$a"; done | sort -un | tr '\n' ' ')}
py=${PYTHON:-python3}
summary="$out/summary.txt"
# An absolute time: the steps run in child shells, where $SECONDS starts again at 0.
deadline=$(($(date +%s) + ${GS_BENCH_SECONDS:-570}))
export GS_KERNEL_CACHE="$work/ptx"
export RUST_BACKTRACE=1 PYTHONUNBUFFERED=1

# NVRTC for ours: the toolkit's, else the pip wheel's (as tools/gpu-verify.sh finds it).
for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $("$py" -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13/lib") for p in nvidia.__path__))' 2>/dev/null); do
    if [ -e "$d/libnvrtc.so.13" ]; then
        export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        break
    fi
done
[ -d /usr/local/nvidia/lib64 ] && export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
# gsplat's JIT build: nvcc from CUDA_HOME, every core, the cache kept in WORK.
if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
    export CUDA_HOME=/usr/local/cuda
fi
export TORCH_EXTENSIONS_DIR="$work/torch_extensions"
# MAX_JOBS from the caller wins (fewer jobs leave cores to a GPU check run beside the build).
MAX_JOBS=${MAX_JOBS:-$(nproc)}
export MAX_JOBS

b=$bundle/bin
fox_pack=$work/fox.pack

# vram_watch FILE CMD...: runs CMD while nvidia-smi samples the per-process device memory every
# 200 ms; writes the largest value seen (MiB, any compute process) to FILE. Returns CMD's status.
vram_watch() {
    local file=$1
    shift
    local log="$file.samples"
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 200 \
        >"$log" 2>/dev/null &
    local smi=$!
    "$@"
    local rc=$?
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
    awk -F', *' '$2 + 0 > m { m = $2 + 0 } END { print m + 0 }' "$log" >"$file"
    rm -f "$log"
    return "$rc"
}

# profile_args: the fox runs' profile options, one per line (both trainers take the same).
profile_args() {
    echo --profile-steps
    echo 200
    if [ -n "${profile_at// /}" ]; then
        echo --profile-at
        # shellcheck disable=SC2086 # a list of iterations, split on purpose
        printf '%s\n' $profile_at
    fi
}

# left: seconds left in this call.
left() { echo $((deadline - $(date +%s))); }

fox_pack_ready() {
    [ -f "$fox_pack/manifest.json" ] && return 0
    [ -d "$bundle/data/fox" ] || { echo "no $bundle/data/fox in the bundle"; return 1; }
    rm -rf "$fox_pack"
    "$b/gs-pack" convert "$bundle/data/fox" -o "$fox_pack" | tail -n 2
}

fox_ours() {
    set -e
    fox_pack_ready
    local run=$work/fox-ours seg
    if [ -f "$run/report.json" ] && grep -q '"interrupted": false' "$run/report.json"; then
        echo "fox-ours: already finished in an earlier call"
        return 0
    fi
    local resume=()
    if [ -d "$run/checkpoints" ]; then
        resume=(--resume)
        echo "fox-ours: continuing from the newest checkpoint in $run/checkpoints"
    else
        rm -rf "$run"
    fi
    mkdir -p "$work/fox-ours.segments"
    seg=$(find "$work/fox-ours.segments" -name '*.json' | wc -l)
    local limit=$(($(left) - 75))
    [ "$limit" -gt 60 ] || { echo "fox-ours: too little time left ($limit s)"; return 1; }
    # shellcheck disable=SC2206 # a list of iterations, split on purpose
    local tests=(${GS_BENCH_TEST_ITERATIONS:-$iters}) profile
    mapfile -t profile < <(profile_args)
    local cmd=("$b/gs-train" "$fox_pack" -o "$run" --backend cuda --iterations "$iters" --eval
               --test-iterations "${tests[@]}" --save-iterations "$iters" --seed "$seed"
               --checkpoint-every 0 "${profile[@]}" "${resume[@]}")
    echo "${cmd[*]}" | sed "s|$work|WORK|g; s|$b/||" >"$out/fox-ours.command"
    set +e
    vram_watch "$work/fox-ours.segments/$seg.vram" \
        timeout --preserve-status -s INT --kill-after=60 "$limit" "${cmd[@]}" 2>&1 | grep -v -E '^training: ' | tail -n 12
    local rc=${PIPESTATUS[0]}
    set -e
    cp "$run/report.json" "$work/fox-ours.segments/$seg.json"
    rm -rf "$out/fox-ours.segments"
    cp -r "$work/fox-ours.segments" "$out/fox-ours.segments"
    cp "$run/metrics.jsonl" "$out/fox-ours.metrics.jsonl" 2>/dev/null || true
    # Per-view test scores of the last evaluation (gsplat's are fox-gsplat.test-metrics.json).
    local last_eval
    last_eval=$(find "$run/test" -name metrics.json 2>/dev/null | sort -V | tail -n 1)
    [ -n "$last_eval" ] && cp "$last_eval" "$out/fox-ours.test-metrics.json"
    if [ "$rc" -eq 130 ]; then
        echo "fox-ours: STOPPED at the call's time limit after a checkpoint; run fox-ours again" \
            "in the next call (same machine) to continue"
        return 0
    fi
    return "$rc"
}

gsplat_setup() {
    set -e
    if ! "$py" -c 'import torch, numpy, PIL, jaxtyping, rich, ninja' 2>/dev/null; then
        echo "gsplat needs torch numpy pillow jaxtyping rich ninja on this machine:"
        "$py" -c 'import torch, numpy, PIL, jaxtyping, rich, ninja'
    fi
    if [ ! -f "$work/site/gsplat/version.py" ]; then
        local wheel
        wheel=$(find "$bundle/wheels" -name 'gsplat-1.5.3-*.whl' | head -n 1)
        [ -n "$wheel" ] || { echo "no gsplat wheel in $bundle/wheels (see $bundle/BUILD)"; return 1; }
        # A pure-Python wheel: unpacking it is installing it (no pip needed, no dependencies).
        "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
            "$wheel" "$work/site"
    fi
    export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
    # torch's JIT build runs the `ninja` executable: the pip package's, when not on PATH.
    local ninja_bin
    ninja_bin=$("$py" -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null || true)
    [ -n "$ninja_bin" ] && export PATH="$PATH:$ninja_bin"
    fused_ssim_setup
    "$py" -c 'import gsplat, torch; print("gsplat", gsplat.__version__, "torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else "NO CUDA DEVICE")'
}

# fused-ssim (the SSIM simple_trainer.py trains with) from the bundle's source, compiled once
# per machine into WORK/site by pip with the machine's torch and nvcc (no index, no isolation:
# the GPU machine has no internet). A failed build is reported and is not fatal:
# gsplat_train.py then uses the same formula in torch and its report says which ran.
fused_ssim_setup() {
    local src=$bundle/src/fused-ssim log=$work/fused-ssim-build.log
    if "$py" -c 'import fused_ssim' 2>/dev/null; then
        return 0
    fi
    if [ ! -f "$src/setup.py" ]; then
        echo "fused-ssim: not in the bundle (see $bundle/BUILD); gsplat's SSIM loss runs in torch"
        return 0
    fi
    local t0=$SECONDS
    rm -rf "$work/fused-ssim-src"
    cp -r "$src" "$work/fused-ssim-src"
    if (cd "$work/fused-ssim-src" &&
        "$py" -m pip install --no-index --no-build-isolation --no-deps --target "$work/site" .) \
        >"$log" 2>&1 && "$py" -c 'import fused_ssim' 2>>"$log"; then
        echo "fused-ssim: built in $((SECONDS - t0)) s"
    else
        echo "fused-ssim: build FAILED in $((SECONDS - t0)) s (last lines of $log below);" \
            "gsplat's SSIM loss runs in torch"
        tail -n 15 "$log"
    fi
}

gsplat_build() {
    set -e
    gsplat_setup
    echo "CUDA_HOME=${CUDA_HOME:-unset} MAX_JOBS=$MAX_JOBS TORCH_EXTENSIONS_DIR=$TORCH_EXTENSIONS_DIR"
    local t0=$SECONDS
    "$py" "$root/tools/gsplat_train.py" --compile-only
    echo "gsplat-build: $((SECONDS - t0)) s"
}

fox_gsplat() {
    set -e
    gsplat_setup
    fox_pack_ready
    local data=$work/fox-export run=$work/fox-gsplat
    if [ -f "$run/report.json" ]; then
        echo "fox-gsplat: already finished in an earlier call"
        cp "$run/report.json" "$out/fox-gsplat.json"
        return 0
    fi
    if [ ! -f "$data/transforms.json" ]; then
        rm -rf "$data"
        # The 100k random points gs-train --seed $seed starts from (fox has no SfM points).
        "$b/gs-pack" export "$fox_pack" -o "$data" --random-points "$seed" 2>&1 | tail -n 3
    fi
    # The compile is never timed as training: do it first (seconds when cached).
    "$py" "$root/tools/gsplat_train.py" --compile-only
    local resume=()
    [ -f "$run/resume.pt" ] && resume=(--resume)
    local limit=$(($(left) - 75))
    [ "$limit" -gt 60 ] || { echo "fox-gsplat: too little time left ($limit s)"; return 1; }
    local profile
    mapfile -t profile < <(profile_args)
    local cmd=("$py" tools/gsplat_train.py "$data" "$run" --iterations "$iters" --eval
               --seed "$seed" "${profile[@]}")
    local shown="${cmd[*]}"
    echo "${shown//$work/WORK}" >"$out/fox-gsplat.command"
    set +e
    (cd "$root" && vram_watch "$out/fox-gsplat.vram" timeout -s KILL $((limit + 60)) \
        "${cmd[@]}" --stop-after "$limit" "${resume[@]}")
    local rc=$?
    set -e
    if [ "$rc" -eq 75 ]; then
        echo "fox-gsplat: STOPPED at the call's time limit; run fox-gsplat again in the next" \
            "call (same machine) to continue"
        return 0
    fi
    [ "$rc" -eq 0 ] || return "$rc"
    cp "$run/report.json" "$out/fox-gsplat.json"
    cp "$run/test/metrics.json" "$out/fox-gsplat.test-metrics.json"
}

# synth_pack_ready: the 600-view pack of synth-budget (CPU only: step synth-pack runs it beside
# a GPU step).
synth_pack_ready() {
    set -e
    local pack=$work/synth600.pack
    if [ ! -f "$pack/manifest.json" ]; then
        local t0=$SECONDS
        rm -rf "$work/synth600" "$pack"
        "$b/gs-pack" synth -o "$work/synth600" --views 600 --width 1600 --height 1066 \
            --points 1000000 --seed 1 | tail -n 1
        echo "synth: $((SECONDS - t0)) s"
        t0=$SECONDS
        "$b/gs-pack" convert "$work/synth600" -o "$pack" | tail -n 1
        echo "convert: $((SECONDS - t0)) s"
        rm -rf "$work/synth600"
    fi
    "$b/gs-pack" info "$pack" | head -n 9
}

synth_budget() {
    set -e
    local pack=$work/synth600.pack run=$work/synth-budget
    synth_pack_ready
    rm -rf "$run"
    local limit=$(($(left) - 45))
    # GS_BENCH_SYNTH_SECONDS caps the time box (the interruption's checkpoint, which downloads
    # the model, is what tests the budget; its speed settles within a minute).
    if [ -n "${GS_BENCH_SYNTH_SECONDS:-}" ] && [ "$GS_BENCH_SYNTH_SECONDS" -lt "$limit" ]; then
        limit=$GS_BENCH_SYNTH_SECONDS
    fi
    [ "$limit" -ge 60 ] || { echo "synth-budget: too little time left ($limit s); the pack is kept for the next call"; return 1; }
    local cmd=("$b/gs-train" "$pack" -o "$run" --backend cuda --ram-budget 2G
               --iterations "$synth_iters" --seed "$seed" --save-iterations "$synth_iters"
               --checkpoint-every 0)
    echo "${cmd[*]}" | sed "s|$work|WORK|g; s|$b/||" >"$out/synth-budget.command"
    set +e
    vram_watch "$out/synth-budget.vram" \
        timeout --preserve-status -s INT --kill-after=40 "$limit" "${cmd[@]}" 2>&1 | grep -v -E '^training: ' | tail -n 12
    local rc=${PIPESTATUS[0]}
    set -e
    if [ ! -f "$run/report.json" ]; then
        echo "synth-budget: gs-train exited $rc without a report.json (killed before its first" \
            "step ended, or failed: see above)"
        return 1
    fi
    cp "$run/report.json" "$out/synth-budget.json"
    cp "$run/metrics.jsonl" "$out/synth-budget.metrics.jsonl" 2>/dev/null || true
    [ "$rc" -eq 0 ] || [ "$rc" -eq 130 ] || return "$rc"
    "$py" - "$out/synth-budget.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"synth-budget: {r['iterations']} iterations ({'time-boxed' if r['interrupted'] else 'complete'}), "
      f"{r['iterations_per_s']:.2f} it/s, stall {100 * r['stall_fraction']:.3f} % (goal < 1 %), "
      f"peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB of {r['ram_budget_bytes'] / 2**20:.0f} MiB "
      f"(within budget: {r['within_budget']}), cache hit rate {r['cache_hit_rate']:.3f}, "
      f"{r['num_gaussians']} Gaussians, backend {r['backend']}")
PY
}

table() {
    "$py" "$root/tools/gpu_bench_table.py" "$out" | tee "$out/table.md"
}

export bundle out work iters seed synth_iters py deadline b fox_pack root profile_at
export -f vram_watch profile_args left fox_pack_ready fox_ours gsplat_setup fused_ssim_setup gsplat_build fox_gsplat \
    synth_pack_ready synth_budget table

status=0
for name in "$@"; do
    case $name in
        fox-ours) fn=fox_ours ;;
        gsplat-build) fn=gsplat_build ;;
        fox-gsplat) fn=fox_gsplat ;;
        synth-pack) fn=synth_pack_ready ;;
        synth-budget) fn=synth_budget ;;
        table) fn=table ;;
        *) echo "unknown step $name" >&2; exit 2 ;;
    esac
    if [ "$(left)" -lt 20 ]; then
        printf '%-13s %s\n' "$name" "SKIPPED (out of time)" | tee -a "$summary"
        status=1
        continue
    fi
    t0=$SECONDS
    touch "$out/$name.log"
    before=$(wc -l <"$out/$name.log")
    echo "== $name ($(left) s left in this call)" | tee -a "$out/$name.log"
    bash -c "$fn" >>"$out/$name.log" 2>&1
    rc=$?
    verdict=PASS
    tail -n +$((before + 1)) "$out/$name.log" | grep -q 'STOPPED at the call' && [ $rc -eq 0 ] &&
        verdict="PASS (stopped; continue next call)"
    [ $rc -ne 0 ] && verdict="FAIL (exit $rc)" && status=1
    printf '%-13s %-36s %4ds\n' "$name" "$verdict" $((SECONDS - t0)) | tee -a "$summary"
    tail -n 6 "$out/$name.log"
done
exit $status
