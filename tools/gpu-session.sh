#!/usr/bin/env bash
# gpu-session.sh OUT first|next: a GPU session's device time (15 minutes, calls of at most 10)
# spent in two back-to-back calls of the device tool, from the repository root, with the
# bundle of tools/gpu-bundle.sh in .gpu (carried) and, optionally, its CPU reference runs
# (tools/gpu-verify.sh --make-cpu-reference .gpu).
#
#   first  the kernel and trainer verification (tools/gpu-verify.sh without its bench, render
#          and train steps) on the GPU, while the CPUs build gsplat's extension and fused-ssim
#          and write the 600-view synthetic pack beside it; then, on the quiet machine,
#          tools/gpu-bench.sh fox-ours, synth-budget (time-boxed to GS_BENCH_SYNTH_SECONDS, 75)
#          and fox-gsplat at GS_BENCH_ITERATIONS (7000), gsplat stopping at the call's limit.
#   next   the same machine, still warm (call within ~30 s): fox-gsplat continues, then table.
#
# Logs: OUT/verify.tgz (every verification log), OUT/bench.tgz (every benchmark log and
# report), OUT/session.log. The work folder .gpu-work stays on the machine between the calls.
# Time: `first` ends within GS_SESSION_SECONDS (560) of its start.
set -uo pipefail

if [ $# -ne 2 ] || { [ "$2" != first ] && [ "$2" != next ]; }; then
    echo "usage: $0 OUT first|next" >&2
    exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p .gpu-work
export GS_BENCH_ITERATIONS=${GS_BENCH_ITERATIONS:-7000}
export GS_BENCH_SYNTH_SECONDS=${GS_BENCH_SYNTH_SECONDS:-75}
budget=${GS_SESSION_SECONDS:-560}

pack_results() {
    tar czf "$out/verify.tgz" -C .gpu-work verify 2>/dev/null
    tar czf "$out/bench.tgz" -C .gpu-work out out-bg 2>/dev/null
}

if [ "$2" = first ]; then
    {
        date -u +%Y-%m-%dT%H:%M:%SZ
        nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,utilization.gpu \
            --format=csv
    } | tee "$out/session.log"
    # CPU work beside the GPU checks: fewer build jobs than cores leave some to the sanitizers.
    MAX_JOBS=10 GS_BENCH_SECONDS=$((budget - 60)) \
        tools/gpu-bench.sh .gpu .gpu-work/out-bg gsplat-build synth-pack >/dev/null 2>&1 &
    cpu_side=$!
    GS_VERIFY_SECONDS=$((budget - 230)) GS_VERIFY_SKIP="bench render train" \
        tools/gpu-verify.sh .gpu .gpu-work/verify 2>&1 | tee -a "$out/session.log" |
        grep -E '^[a-z-]+ +(PASS|FAIL|TIMEOUT|SKIPPED)'
    echo "verification done at ${SECONDS} s; waiting for the CPU side" | tee -a "$out/session.log"
    wait "$cpu_side"
    cat .gpu-work/out-bg/summary.txt | tee -a "$out/session.log"
    GS_BENCH_SECONDS=$((budget - SECONDS)) \
        tools/gpu-bench.sh .gpu .gpu-work/out fox-ours synth-budget fox-gsplat 2>&1 |
        tee -a "$out/session.log" | tail -n 30
else
    GS_BENCH_SECONDS=${GS_SESSION_NEXT_SECONDS:-200} \
        tools/gpu-bench.sh .gpu .gpu-work/out fox-gsplat table 2>&1 | tee -a "$out/session.log"
fi
pack_results
ls -la "$out"
