#!/usr/bin/env bash
# gpu-session.sh OUT verify|30k|next: a GPU session's device time (15 minutes, calls of at
# most 10) spent in two back-to-back calls of the device tool, from the repository root, with
# the bundle of tools/gpu-bundle.sh in .gpu (carried) and, optionally, its CPU reference runs
# (tools/gpu-verify.sh --make-cpu-reference .gpu). One session holds one of the two plans:
#
#   verify  (after a kernel change) the kernel and trainer verification (tools/gpu-verify.sh
#           without its bench, render and train steps) on the GPU, while the CPUs build
#           gsplat's extension and fused-ssim and write the 600-view synthetic pack beside it;
#           then, on the quiet machine, the tools/gpu-bench.sh steps GS_SESSION_BENCH names
#           (default: fox-ours, synth-budget time-boxed to GS_BENCH_SYNTH_SECONDS (75) and
#           fox-gsplat, at GS_BENCH_ITERATIONS (7000); gsplat stops at the call's limit; "" for
#           none). Ran on 2026-11-28 (H200): 316 s, then `next` 272 s (fused-ssim and gsplat's
#           extension were built there, 90 + 77 s: the background build had failed). The
#           verification steps added since (memcheck-train, racecheck-train) have not run.
#   30k     the side by side at 3DGS's full 30,000 iterations: fox-ours (evaluated at 7,000 and
#           30,000) while the CPUs build gsplat's extension and fused-ssim, then fox-gsplat
#           until the call's limit. Both ran ~128 it/s on an H200 at 7,000 iterations, so
#           ours takes ~4.5 minutes and gsplat ~4.5 more: `next` finishes it.
#   next    the same machine, still warm (call within ~30 s): fox-gsplat continues, then table.
#
# Logs: OUT/verify.tgz (every verification log), OUT/bench.tgz (every benchmark log and
# report), OUT/session.log. The work folder .gpu-work stays on the machine between the calls.
# Time: `first` ends within GS_SESSION_SECONDS (560) of its start.
set -uo pipefail

if [ $# -ne 2 ] || { [ "$2" != verify ] && [ "$2" != 30k ] && [ "$2" != next ]; }; then
    echo "usage: $0 OUT verify|30k|next" >&2
    exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p .gpu-work
if [ "$2" = 30k ]; then
    export GS_BENCH_ITERATIONS=${GS_BENCH_ITERATIONS:-30000}
    export GS_BENCH_TEST_ITERATIONS=${GS_BENCH_TEST_ITERATIONS:-7000 30000}
else
    export GS_BENCH_ITERATIONS=${GS_BENCH_ITERATIONS:-7000}
fi
export GS_BENCH_SYNTH_SECONDS=${GS_BENCH_SYNTH_SECONDS:-75}
budget=${GS_SESSION_SECONDS:-560}

pack_results() {
    tar czf "$out/verify.tgz" -C .gpu-work verify 2>/dev/null
    tar czf "$out/bench.tgz" -C .gpu-work out out-bg 2>/dev/null
}

if [ "$2" != next ]; then
    {
        date -u +%Y-%m-%dT%H:%M:%SZ
        nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,utilization.gpu \
            --format=csv
    } | tee "$out/session.log"
fi
if [ "$2" = verify ]; then
    # shellcheck disable=SC2206 # a list of steps, split on purpose
    benches=(${GS_SESSION_BENCH-fox-ours synth-budget fox-gsplat})
    # CPU work beside the GPU checks, for the benchmarks that follow: fewer build jobs than
    # cores leave some to the sanitizers.
    prep=()
    [[ " ${benches[*]} " == *" fox-gsplat "* ]] && prep+=(gsplat-build)
    [[ " ${benches[*]} " == *" synth-budget "* ]] && prep+=(synth-pack)
    cpu_side=
    if [ ${#prep[@]} -gt 0 ]; then
        MAX_JOBS=10 GS_BENCH_SECONDS=$((budget - 60)) \
            tools/gpu-bench.sh .gpu .gpu-work/out-bg "${prep[@]}" >/dev/null 2>&1 &
        cpu_side=$!
    fi
    # The benchmarks after it get 230 s (fox-ours and synth-budget at 7,000 iterations).
    verify_s=$((budget - 230))
    [ ${#benches[@]} -gt 0 ] || verify_s=$((budget - 10))
    GS_VERIFY_SECONDS=$verify_s GS_VERIFY_SKIP="bench render train" \
        tools/gpu-verify.sh .gpu .gpu-work/verify 2>&1 | tee -a "$out/session.log" |
        grep -E '^[a-z-]+ +(PASS|FAIL|TIMEOUT|SKIPPED)'
    echo "verification done at ${SECONDS} s" | tee -a "$out/session.log"
    if [ -n "$cpu_side" ]; then
        wait "$cpu_side"
        tee -a "$out/session.log" <.gpu-work/out-bg/summary.txt
    fi
    if [ ${#benches[@]} -gt 0 ]; then
        GS_BENCH_SECONDS=$((budget - SECONDS)) \
            tools/gpu-bench.sh .gpu .gpu-work/out "${benches[@]}" 2>&1 |
            tee -a "$out/session.log" | tail -n 30
    fi
elif [ "$2" = 30k ]; then
    # The build leaves 4 cores to ours' host side (its loader, the launching thread).
    MAX_JOBS=12 GS_BENCH_SECONDS=$((budget - 60)) \
        tools/gpu-bench.sh .gpu .gpu-work/out-bg gsplat-build >/dev/null 2>&1 &
    cpu_side=$!
    GS_BENCH_SECONDS=$((budget - SECONDS)) tools/gpu-bench.sh .gpu .gpu-work/out fox-ours 2>&1 |
        tee -a "$out/session.log" | tail -n 14
    wait "$cpu_side"
    tee -a "$out/session.log" <.gpu-work/out-bg/summary.txt
    GS_BENCH_SECONDS=$((budget - SECONDS)) tools/gpu-bench.sh .gpu .gpu-work/out fox-gsplat 2>&1 |
        tee -a "$out/session.log" | tail -n 14
else
    GS_BENCH_SECONDS=${GS_SESSION_NEXT_SECONDS:-200} \
        tools/gpu-bench.sh .gpu .gpu-work/out fox-gsplat table 2>&1 | tee -a "$out/session.log"
fi
pack_results
ls -la "$out"
