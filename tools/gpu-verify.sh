#!/usr/bin/env bash
# gpu-verify.sh BUNDLE OUTDIR: the one-command check of ramsplat's CUDA path on a machine with
# an NVIDIA GPU, CUDA 13 and no Rust toolchain. Runs, in order of importance, each step under
# its own time limit, and keeps going when one fails:
#
#   env        nvidia-smi, driver, nvcc, compute-sanitizer, where NVRTC was found
#   lib        the library's CUDA unit tests (probe, PTX cache) with GS_REQUIRE_GPU=1
#   parity     tests/cuda_parity.rs with GS_REQUIRE_GPU=1: every kernel against the CPU oracle,
#              stage by stage; prints the MEASURED error maxima per scene
#   bench      benches/cuda.rs: forward and forward+backward at 1080p, 100k and 1M Gaussians,
#              CUDA against the CPU backend
#   render     gs-render --backend cuda against --backend cpu on real packs (the fox photos at
#              full resolution, a model trained briefly on the CPU), image by image, then the
#              two backends' --mesh of that model from the 1/8 pack (area within 1 %)
#   trainer    the device engine against the CPU engine: a synthetic pack (64 views at 96x72,
#              8 held out), 800 iterations with --eval and densification, seeds 3-5 on each:
#              mean train PSNR within 0.3 dB, mean Gaussian count within 10 %
#   trainer-demo  gs-train --demo (3,000 iterations, 8 held-out views) on both engines: test
#              PSNR within 1 dB (the CPU's own seed range: 0.64 dB), Gaussians within 10 %
#   trainer-mcmc  the same with --strategy mcmc --max-gaussians 600 (relocation and growth at
#              600 and 700): the same Gaussian count, test PSNR within 0.3 dB
#   memcheck, racecheck, synccheck
#              compute-sanitizer over the parity tests (GS_PARITY_SCENES=small: the sanitizers
#              slow kernels down 10-100x)
#   memcheck-lib  compute-sanitizer memcheck over the library's device tests (the device
#              layer's, and the device engine's kernels against their host twins)
#   memcheck-train, racecheck-train
#              compute-sanitizer over three short gs-train --backend cuda runs that launch
#              every kernel of the training step (see sanitize_train)
#   train      gs-train --backend cuda (the device engine) on the fox photos at full
#              resolution with --eval (GS_VERIFY_FOX_ITERATIONS, default 3000; 30000 for the
#              full benchmark, in a call of its own), and GS_VERIFY_FOX_CPU_ITERATIONS (30; 0
#              skips) of --backend cpu: iterations/s, test PSNR, Gaussians, peak RSS of each
#
# Prepare on a machine with Rust, from the repository root:   tools/gpu-bundle.sh .gpu
# and, optionally, the CPU halves of the three trainer steps:  tools/gpu-verify.sh --make-cpu-reference .gpu
# (the GPU machine then reuses their reports instead of spending device time on them; see
# engine_run)
# Run on the GPU machine, from the repository root:           tools/gpu-verify.sh .gpu OUT
# Every step's full log is OUT/<step>.log; OUT/summary.txt has one line per step (PASS, FAIL
# with the exit code, or TIMEOUT) and is printed last. Finishes within 10 minutes on an H100.
# Exit status: 0 when every step passed, 1 otherwise.
set -uo pipefail

# --make-cpu-reference BUNDLE: on the build machine, runs only the CPU halves of the trainer
# steps and keeps their reports in BUNDLE/cpu-reference (see engine_run).
engines="cpu cuda"
save_reference=
if [ $# -eq 2 ] && [ "$1" = --make-cpu-reference ]; then
    engines=cpu
    save_reference=$(cd "$2" && pwd)/cpu-reference
    rm -rf "$save_reference"
    mkdir -p "$save_reference"
    echo "made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nproc) cores of $(uname -n), bundle $(head -n 1 "$2/BUILD")" \
        >"$save_reference/MADE"
    set -- "$2" "$(mktemp -d /tmp/gs-cpu-reference.XXXXXX)"
    GS_VERIFY_SKIP="env lib parity bench render memcheck racecheck synccheck memcheck-lib"
    export GS_VERIFY_SKIP="$GS_VERIFY_SKIP memcheck-train racecheck-train train"
    unset GS_VERIFY_CPU_LIVE
    # The step limits are device-time budgets sized for the GPU machine's 16 cores; the build
    # machine may have a few (the CPU demo alone takes about 4 minutes on 2 cores).
    limit_scale=${GS_VERIFY_LIMIT_SCALE:-4}
    GS_VERIFY_SECONDS=${GS_VERIFY_SECONDS:-2400}
fi
if [ $# -ne 2 ]; then
    echo "usage: $0 BUNDLE OUTDIR, or $0 --make-cpu-reference BUNDLE" >&2
    exit 2
fi
bundle=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
summary="$out/summary.txt"
: >"$summary"
work=$(mktemp -d /tmp/gs-verify.XXXXXX)
export GS_KERNEL_CACHE="$work/ptx"
export GS_REQUIRE_GPU=1
export RUST_BACKTRACE=1

# NVRTC: the toolkit's, else the pip wheel's (PyTorch images carry nvidia-cuda-nvrtc).
for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13/lib") for p in nvidia.__path__))' 2>/dev/null); do
    if [ -e "$d/libnvrtc.so.13" ]; then
        export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        nvrtc_dir=$d
        break
    fi
done
[ -d /usr/local/nvidia/lib64 ] && export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)

# The whole run stays inside one 10-minute device call: each step gets at most what is left.
deadline=$((SECONDS + ${GS_VERIFY_SECONDS:-570}))

# step NAME LIMIT_S CMD...: runs CMD with its output in OUT/NAME.log, records the verdict.
# GS_VERIFY_SKIP="train render" skips the named steps (to save device time on a re-run).
step() {
    local name=$1 limit=$2
    shift 2
    if [[ " ${GS_VERIFY_SKIP:-} " == *" $name "* ]]; then
        printf '%-13s %-14s\n' "$name" "SKIPPED (GS_VERIFY_SKIP)" | tee -a "$summary"
        return 0
    fi
    local left=$((deadline - SECONDS))
    if [ "$left" -lt 15 ]; then
        printf '%-13s %-14s\n' "$name" "SKIPPED (out of time)" | tee -a "$summary"
        return 0
    fi
    limit=$((limit * ${limit_scale:-1}))
    [ "$limit" -gt "$left" ] && limit=$left
    local t0=$SECONDS
    echo "== $name (limit ${limit}s): $*" | tee "$out/$name.log"
    # bash -c so that shell functions (exported below) run under timeout too.
    timeout --kill-after=10 "$limit" bash -c '"$@"' _ "$@" >>"$out/$name.log" 2>&1
    local rc=$?
    local verdict=PASS
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        verdict=TIMEOUT
    elif [ $rc -ne 0 ]; then
        verdict="FAIL (exit $rc)"
    fi
    printf '%-13s %-14s %4ds\n' "$name" "$verdict" $((SECONDS - t0)) | tee -a "$summary"
    tail -n 5 "$out/$name.log"
    return 0
}

env_report() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nvcc --version | tail -n 2
    echo "NVRTC: ${nvrtc_dir:-not found}"
    echo "compute-sanitizer: ${sanitizer:-not found}"
    uname -a
    ldd --version | head -n 1
    cat "$bundle/BUILD"
}

render_parity() {
    set -e
    local b=$bundle/bin
    # A real pack at full resolution, and the same photos at 1/8 for a quick CPU model.
    "$b/gs-pack" convert "$bundle/data/fox" -o "$work/fox.pack"
    "$b/gs-pack" convert "$bundle/data/fox" -o "$work/fox8.pack" --downscale 8
    "$b/gs-train" "$work/fox8.pack" -o "$work/fox-model" --iterations 500 --backend cpu --seed 1
    local ply
    ply=$(ls "$work"/fox-model/point_cloud/iteration_*/point_cloud.ply | tail -n 1)
    for backend in cpu cuda; do
        local t0=$SECONDS
        "$b/gs-render" --ply "$ply" --pack "$work/fox.pack" --split test \
            -o "$work/render-$backend" --backend "$backend" | tail -n 3
        echo "gs-render --backend $backend: $((SECONDS - t0)) s wall"
    done
    python3 - "$work/render-cpu" "$work/render-cuda" <<'PY'
import json, pathlib, sys
import numpy as np
from PIL import Image
a, b = map(pathlib.Path, sys.argv[1:3])
ma, mb = (json.load(open(d / "metrics.json")) for d in (a, b))
print(f"mean PSNR cpu {ma['mean_psnr']:.4f} dB, cuda {mb['mean_psnr']:.4f} dB; "
      f"mean SSIM cpu {ma['mean_ssim']:.5f}, cuda {mb['mean_ssim']:.5f}")
worst, over1, total = 0, 0, 0
for pa in sorted(a.glob("*.png")):
    x = np.asarray(Image.open(pa), dtype=np.int16)
    y = np.asarray(Image.open(b / pa.name), dtype=np.int16)
    d = np.abs(x - y)
    worst = max(worst, int(d.max()))
    over1 += int((d > 1).sum())
    total += d.size
print(f"8-bit side-by-side PNGs: max |cpu - cuda| = {worst} levels, "
      f"{over1} of {total} channel values differ by more than 1 level")
ok = abs(ma["mean_psnr"] - mb["mean_psnr"]) < 0.05 and over1 <= 1e-3 * total
sys.exit(0 if ok else 1)
PY
    # The mesh of the same model from the 1/8 pack's training views: the plane depths
    # (three colour channels of an SH-0 copy of the model) rendered by each backend, fused on
    # the host. On the emulated device the two meshes' areas agree to 1e-3 (tests/mesh.rs).
    for backend in cpu cuda; do
        "$b/gs-render" --ply "$ply" --pack "$work/fox8.pack" --mesh \
            -o "$work/mesh-$backend.ply" --backend "$backend" | tail -n 1
    done
    python3 - "$work/mesh-cpu.ply" "$work/mesh-cuda.ply" <<'PY'
import sys
import numpy as np
def mesh(path):
    data = open(path, "rb").read()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    count = {l.split()[1]: int(l.split()[2])
             for l in data[:end].decode().splitlines() if l.startswith("element ")}
    nv, nf = count["vertex"], count["face"]
    v = np.frombuffer(data, np.dtype([("p", "<f4", 3), ("c", "u1", 3)]), nv, end)["p"]
    f = np.frombuffer(data, np.dtype([("n", "u1"), ("i", "<i4", 3)]), nf, end + 15 * nv)["i"]
    p = v.astype(np.float64)
    a, b, c = p[f[:, 0]], p[f[:, 1]], p[f[:, 2]]
    return nf, 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1).sum()
(fa, aa), (fb, ab) = mesh(sys.argv[1]), mesh(sys.argv[2])
print(f"mesh: cpu {fa} triangles, area {aa:.6g}; cuda {fb} triangles, area {ab:.6g} "
      f"(relative area difference {abs(aa - ab) / aa:.2e})")
sys.exit(0 if abs(aa - ab) <= 0.01 * aa and abs(fa - fb) <= 0.02 * fa else 1)
PY
}

# engine_run BACKEND NAME GS_TRAIN_ARGS...: one gs-train run of the trainer steps, into WORK/NAME.
# A CPU run is taken from BUNDLE/cpu-reference/NAME when the bundle carries it (made by
# `gpu-verify.sh --make-cpu-reference BUNDLE` on the build machine, with the same binaries):
# the CPU engine's result does not depend on the machine or its core count (the demo gave
# 44.55 dB / 0.9939 / 26,466 Gaussians on the 2-core development machine and on a 16-core GPU
# machine), and the CPU halves cost about two minutes of device time. GS_VERIFY_CPU_LIVE=1
# runs them here instead.
engine_run() {
    local backend=$1 name=$2
    shift 2
    local ref=$bundle/cpu-reference/$name
    if [ "$backend" = cpu ] && [ -z "${GS_VERIFY_CPU_LIVE:-}" ] && [ -f "$ref/report.json" ]; then
        mkdir -p "$work/$name"
        cp "$ref/report.json" "$work/$name/report.json"
        echo "$name: the bundle's reference run ($(head -n 1 "$bundle/cpu-reference/MADE"))"
        return 0
    fi
    "$bundle/bin/gs-train" "$@" -o "$work/$name" --backend "$backend" 2>&1 | tail -n 2
    if [ "$backend" = cpu ] && [ -n "${save_reference:-}" ]; then
        mkdir -p "$save_reference/$name"
        cp "$work/$name/report.json" "$save_reference/$name/report.json"
    fi
}

# The device engine against the CPU engine on a sparse synthetic scene, over three seeds: the
# optimisation must agree (mean train PSNR within 0.3 dB, Gaussian counts within 10 %). The
# held-out PSNR is printed, not compared: on this scene it spreads by more than 0.7 dB over
# seeds on one engine (CPU, seeds 3-5: 15.89 / 16.63 / 16.21 dB). trainer-demo compares it.
# synth_pack: the 64-view 96x72 synthetic pack of trainer and trainer-mcmc, made once.
synth_pack() {
    [ -d "$work/synth.pack" ] && return 0
    "$bundle/bin/gs-pack" synth -o "$work/synth" --views 64 --width 96 --height 72 --points 400 \
        --seed 7
    "$bundle/bin/gs-pack" convert "$work/synth" -o "$work/synth.pack" --test-every 8
}

trainer_parity() {
    set -e
    local b=$bundle/bin
    synth_pack
    for seed in 3 4 5; do
        for backend in $engines; do
            engine_run "$backend" "parity-$backend-$seed" "$work/synth.pack" \
                --iterations 800 --eval --sh-degree 1 --seed "$seed" --metrics-every 100
        done
    done
    [ "$engines" = "cpu cuda" ] || return 0
    python3 - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
runs = {be: [json.load(open(f"{work}/parity-{be}-{s}/report.json")) for s in (3, 4, 5)]
        for be in ("cpu", "cuda")}
for be, rs in runs.items():
    print(f"{be}: train PSNR {[round(r['train_psnr'], 3) for r in rs]}, test PSNR "
          f"{[round(r['test_psnr'], 3) for r in rs]}, Gaussians {[r['num_gaussians'] for r in rs]}"
          f", it/s {[round(r['iterations_per_s'], 1) for r in rs]}; backend {rs[0]['backend']}")
mean = lambda be, k: statistics.mean(r[k] for r in runs[be])
print(f"means: train PSNR cpu {mean('cpu', 'train_psnr'):.4f}, cuda {mean('cuda', 'train_psnr'):.4f}; "
      f"test PSNR cpu {mean('cpu', 'test_psnr'):.4f}, cuda {mean('cuda', 'test_psnr'):.4f}; "
      f"Gaussians {mean('cpu', 'num_gaussians'):.0f} vs {mean('cuda', 'num_gaussians'):.0f}")
ok = (abs(mean("cpu", "train_psnr") - mean("cuda", "train_psnr")) <= 0.3
      and abs(mean("cpu", "num_gaussians") - mean("cuda", "num_gaussians"))
          <= 0.1 * mean("cpu", "num_gaussians")
      and all(r["backend"].startswith("device") for r in runs["cuda"]))
sys.exit(0 if ok else 1)
PY
}

# The README's demo (64 views of 240x180, 3,000 iterations with densification, 8 held out) on
# both engines: test PSNR within 1 dB, Gaussian count within 10 %. The demo has one seed (7);
# the CPU engine with training seeds 7/1/2/3 gives 44.56 / 44.57 / 45.19 / 44.80 dB (a
# 0.64 dB range), so a tighter bound at one seed would test the seed, not the engine (the
# step-by-step agreement is `train::trainer::tests`' job).
trainer_demo() {
    set -e
    local b=$bundle/bin
    for backend in $engines; do
        engine_run "$backend" "demo-$backend" --demo
    done
    [ "$engines" = "cpu cuda" ] || return 0
    python3 - "$work/demo-cpu/report.json" "$work/demo-cuda/report.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print(f"demo: test PSNR cpu {a['test_psnr']:.4f} dB, cuda {b['test_psnr']:.4f} dB; SSIM "
      f"{a['test_ssim']:.4f} vs {b['test_ssim']:.4f}; Gaussians {a['num_gaussians']} vs "
      f"{b['num_gaussians']}; it/s {a['iterations_per_s']:.1f} vs {b['iterations_per_s']:.1f}; "
      f"backend {b['backend']}")
ok = (abs(a["test_psnr"] - b["test_psnr"]) <= 1.0
      and abs(a["num_gaussians"] - b["num_gaussians"]) <= 0.1 * a["num_gaussians"]
      and b["backend"].startswith("device"))
sys.exit(0 if ok else 1)
PY
}

# MCMC on the device engine against the CPU engine, on the trainer step's synthetic pack (the
# pack is made here when that step did not run).
trainer_mcmc() {
    set -e
    local b=$bundle/bin
    synth_pack
    for backend in $engines; do
        engine_run "$backend" "mcmc-$backend" "$work/synth.pack" \
            --iterations 800 --eval --sh-degree 1 --seed 3 --metrics-every 100 \
            --strategy mcmc --max-gaussians 600
    done
    [ "$engines" = "cpu cuda" ] || return 0
    python3 - "$work/mcmc-cpu/report.json" "$work/mcmc-cuda/report.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print(f"mcmc: test PSNR cpu {a['test_psnr']:.4f} dB, cuda {b['test_psnr']:.4f} dB; Gaussians "
      f"{a['num_gaussians']} vs {b['num_gaussians']}; it/s {a['iterations_per_s']:.1f} vs "
      f"{b['iterations_per_s']:.1f}; backend {b['backend']}")
ok = (abs(a["test_psnr"] - b["test_psnr"]) <= 0.3
      and a["num_gaussians"] == b["num_gaussians"]
      and b["backend"].startswith("device"))
sys.exit(0 if ok else 1)
PY
}

train_speed() {
    set -e
    local b=$bundle/bin
    local iters=${GS_VERIFY_FOX_ITERATIONS:-3000}
    [ -d "$work/fox.pack" ] || "$b/gs-pack" convert "$bundle/data/fox" -o "$work/fox.pack"
    "$b/gs-train" "$work/fox.pack" -o "$work/train-cuda" --backend cuda --iterations "$iters" \
        --eval --test-iterations "$iters" --save-iterations "$iters" --seed 1 2>&1 | tail -n 6
    # The CPU engine's speed on the same pack, for scale (GS_VERIFY_FOX_CPU_ITERATIONS=0 skips
    # it: at full resolution 30 CPU iterations cost about a minute of device time).
    local cpu_iters=${GS_VERIFY_FOX_CPU_ITERATIONS:-30}
    local reports=("$work"/train-cuda/report.json)
    if [ "$cpu_iters" -gt 0 ]; then
        "$b/gs-train" "$work/fox.pack" -o "$work/train-cpu" --backend cpu \
            --iterations "$cpu_iters" --seed 1 2>&1 | tail -n 3
        reports+=("$work"/train-cpu/report.json)
    fi
    python3 - "${reports[@]}" <<'PY'
import json, sys
for p in sys.argv[1:]:
    r = json.load(open(p))
    dev = r.get("peak_device_bytes")
    print(f"{r['backend']}: {r['iterations']} iterations, {r['iterations_per_s']:.2f} it/s, "
          f"test PSNR {r['test_psnr']}, SSIM {r['test_ssim']}, {r['num_gaussians']} Gaussians, "
          f"peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB of {r['ram_budget_bytes'] / 2**20:.0f}, "
          f"stall {100 * r['stall_fraction']:.2f} %"
          + (f", peak device memory {dev / 2**20:.0f} MiB" if dev else ""))
PY
}

sanitize() {
    local tool=$1
    shift
    [ -n "$sanitizer" ] || { echo "compute-sanitizer not found"; return 1; }
    GS_PARITY_SCENES=small "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 20 \
        "$bundle/tests/cuda_parity" --test-threads=1 "$@"
}

# The library's device tests under memcheck: the device layer's own (copies, collectives,
# async uploads) and the device engine's kernels against their host twins (loss, exposure,
# bilateral grids, depth, Adam and sparse Adam, statistics, densification gathers, MCMC).
# Skipped: the one test that asks for more memory than the device has on purpose (memcheck
# reports the refused cuMemAlloc as an error although the test expects it).
sanitize_lib() {
    [ -n "$sanitizer" ] || { echo "compute-sanitizer not found"; return 1; }
    "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 \
        "$bundle/tests/ramsplat_lib" device:: render::cuda train::device --test-threads=1 \
        --skip device::tests::usage_counts_live_buffers_and_their_peak
}

# Training itself under compute-sanitizer TOOL: three short device-engine runs (700
# iterations, two densifications or MCMC relocations) on 64x48 synthetic packs that between
# them launch every kernel of the step: monocular depths with exposure compensation, pose
# optimisation, sparse Adam, antialiasing and absgrad; SfM depths with bilateral grids and the
# 3D filter (its opacity reset at 600 too); MCMC.
sanitize_train() {
    set -e
    local tool=$1 b=$bundle/bin
    [ -n "$sanitizer" ] || { echo "compute-sanitizer not found"; return 1; }
    if [ ! -d "$work/san-mono.pack" ]; then
        "$b/gs-pack" synth -o "$work/san-mono" --views 16 --width 64 --height 48 --points 300 \
            --seed 5 --depths | tail -n 1
        "$b/gs-pack" convert "$work/san-mono" -o "$work/san-mono.pack" --depths depths \
            --test-every 8 | tail -n 1
        "$b/gs-pack" synth -o "$work/san-sfm" --views 16 --width 64 --height 48 --points 300 \
            --seed 5 --format colmap --tracks | tail -n 1
        "$b/gs-pack" convert "$work/san-sfm" -o "$work/san-sfm.pack" --sfm-depths \
            --test-every 8 | tail -n 1
    fi
    local common=(--backend cuda --iterations 700 --sh-degree 1 --seed 3 --checkpoint-every 0)
    local runs=(
        "san-mono.pack --eval --exposure --pose-opt --optimizer-type sparse_adam --antialiased --absgrad"
        "san-sfm.pack --eval --bilateral-grid --filter-3d --opacity-reset-interval 600"
        "san-sfm.pack --strategy mcmc --max-gaussians 400"
    )
    local k=0 run
    for run in "${runs[@]}"; do
        k=$((k + 1))
        # shellcheck disable=SC2086 # the run's words, split on purpose
        set -- $run
        local pack=$1
        shift
        echo "-- $tool: gs-train $pack ${common[*]} $*"
        rm -rf "$work/san-$tool-$k"
        "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 20 \
            "$b/gs-train" "$work/$pack" -o "$work/san-$tool-$k" "${common[@]}" "$@" 2>&1 |
            grep -v -E '^training: ' | tail -n 4
        [ "${PIPESTATUS[0]}" -eq 0 ] || return 1
    done
}

export bundle work out nvrtc_dir sanitizer engines save_reference
export -f engine_run env_report synth_pack render_parity trainer_parity trainer_demo trainer_mcmc train_speed sanitize sanitize_lib sanitize_train
step env 30 env_report
step lib 90 "$bundle/tests/ramsplat_lib" render::cuda device:: train::device --test-threads=1 \
    --nocapture
step parity 120 "$bundle/tests/cuda_parity" --test-threads=1 --nocapture
step bench 150 "$bundle/benches/cuda"
if [ -d "$bundle/data/fox" ]; then
    step render 150 render_parity
else
    printf '%-13s %-14s\n' render "SKIPPED (no data/fox in the bundle)" | tee -a "$summary"
fi
step trainer 120 trainer_parity
step trainer-demo 150 trainer_demo
step trainer-mcmc 120 trainer_mcmc
step memcheck 120 sanitize memcheck
step racecheck 120 sanitize racecheck
step synccheck 60 sanitize synccheck
step memcheck-lib 90 sanitize_lib
# Not yet run on a GPU, so their limits are estimates: on the H200 (2026-11-28) the parity
# tests' small scenes took 16 s under memcheck and 66 s under racecheck, and each training
# here also compiles its modules again under the sanitizer.
step memcheck-train 150 sanitize_train memcheck
step racecheck-train 180 sanitize_train racecheck
# Last: the speed run is the only step whose verdict is not a correctness check.
step train 240 train_speed
rm -rf "$work"

echo "== summary"
cat "$summary"
grep -q -v -E '^[a-z-]+ +(PASS|SKIPPED)' "$summary" && exit 1
exit 0
