//! Compiles every CUDA kernel with NVRTC for the CI architectures (compute_80, compute_90),
//! through exactly the code path the runtime uses (`Kernel::module_source` and
//! `device::cuda::compile_ptx`: same header splicing, same `-D` constants, same options). Needs no GPU, only libnvrtc (13.0.x, see
//! `tools/nvrtc-setup.sh`). Without the library the test prints a skip line and passes, unless
//! `GS_REQUIRE_NVRTC=1` is set (CI sets it after running the setup script), which makes a
//! missing library a failure.

use ramsplat::device::cuda::{compile_ptx, nvrtc_available, CI_ARCHES};
use ramsplat::device::{DeviceError, ModuleSource};
use ramsplat::render::cuda::kernels::Kernel;

fn required() -> bool {
    std::env::var("GS_REQUIRE_NVRTC").is_ok_and(|v| v == "1")
}

#[test]
fn every_kernel_compiles_for_ci_arches() {
    if let Err(e) = nvrtc_available() {
        assert!(
            !required(),
            "GS_REQUIRE_NVRTC=1 but NVRTC cannot be loaded: {e}"
        );
        eprintln!("SKIP nvrtc_compile: {e}");
        return;
    }
    // Every module of the project: the rasterizer's table, the training loss, Adam, the
    // densification statistics and row edits, and MCMC's regulariser and noise.
    let mut modules: Vec<ModuleSource> = Kernel::ALL
        .iter()
        .map(|k| k.module_source().unwrap())
        .collect();
    modules.push(ramsplat::train::device_loss::module_source());
    modules.push(ramsplat::train::device_adam::module_source());
    modules.push(ramsplat::train::device_engine::module_source());
    modules.push(ramsplat::train::device_mcmc::module_source());
    let mut failures = Vec::new();
    for arch in CI_ARCHES {
        for m in &modules {
            match compile_ptx(m, arch) {
                Ok(ptx) => {
                    // The PTX targets the requested arch and exports every entry point.
                    let target = format!(".target sm_{}", arch.trim_start_matches("compute_"));
                    assert!(ptx.contains(&target), "{} PTX lacks `{target}`", m.name);
                    for e in &m.entry_points {
                        assert!(
                            ptx.contains(&format!(".entry {e}(")),
                            "{} for {arch}: PTX lacks entry point {e}",
                            m.name
                        );
                    }
                    eprintln!("ok {} {arch} ({} bytes of PTX)", m.name, ptx.len());
                }
                // Printed verbatim (the Display of Compile includes the full NVRTC log).
                Err(e) => failures.push(format!("{e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn compile_errors_carry_the_nvrtc_log() {
    if nvrtc_available().is_err() {
        assert!(!required(), "GS_REQUIRE_NVRTC=1 but NVRTC cannot be loaded");
        eprintln!("SKIP compile_errors_carry_the_nvrtc_log: NVRTC not found");
        return;
    }
    // A deliberately broken module through the same path the runtime uses: the error must
    // carry NVRTC's log, which names the offending identifier and the module.
    let src = ModuleSource {
        name: "broken.cu".into(),
        source: "extern \"C\" __global__ void k(float* p) { p[0] = undefined_name; }".into(),
        entry_points: vec!["k"],
        defines: vec![],
    };
    let err = compile_ptx(&src, "compute_80").unwrap_err();
    assert!(matches!(err, DeviceError::Compile { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("undefined_name") && msg.contains("broken.cu"),
        "{msg}"
    );
}
