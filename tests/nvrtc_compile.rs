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

/// Every module of the project: the rasterizer's table, the training loss, Adam, the
/// densification statistics and row edits, and MCMC's regulariser and noise.
fn all_modules() -> Vec<ModuleSource> {
    let mut modules: Vec<ModuleSource> = Kernel::ALL
        .iter()
        .map(|k| k.module_source().unwrap())
        .collect();
    modules.push(ramsplat::train::device_loss::module_source());
    modules.push(ramsplat::train::device_adam::module_source());
    modules.push(ramsplat::train::device_engine::module_source());
    modules.push(ramsplat::train::device_mcmc::module_source());
    modules
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
    let modules = all_modules();
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

/// Threads per block of every launch in the project: the 16×16 pixel tiles of the rasterizer
/// and the 256-thread blocks of every element-wise, scan, sort, loss, Adam, densification and
/// MCMC kernel (each module's `BLOCK` constant).
const LAUNCH_THREADS: u64 = 256;
/// Registers per block (and per SM) on compute capability 8.0 and 9.0.
const REGISTERS_PER_BLOCK: u64 = 65_536;
/// Static shared memory a kernel may declare without the opt-in attribute.
const STATIC_SHARED_BYTES: u64 = 48 << 10;

/// One entry point's resources as `ptxas -v` reports them.
#[derive(Debug, Default)]
struct Resources {
    registers: u64,
    shared: u64,
    stack: u64,
    spill_stores: u64,
}

/// Reads `ptxas -v`'s report: per entry point, "Compiling entry function 'NAME'", then
/// "N bytes stack frame, S bytes spill stores, …" and "Used R registers, … B bytes smem, …".
fn parse_ptxas_report(report: &str) -> Vec<(String, Resources)> {
    let number_before = |line: &str, unit: &str| -> Option<u64> {
        let at = line.find(unit)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    let mut out: Vec<(String, Resources)> = Vec::new();
    for line in report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            out.push((name, Resources::default()));
        } else if let Some((_, r)) = out.last_mut() {
            if line.contains("bytes stack frame") {
                r.stack = number_before(line, "bytes stack frame").unwrap_or(0);
                r.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
            } else if line.contains("Used ") && line.contains("registers") {
                r.registers = number_before(line, "registers").unwrap_or(0);
                r.shared = number_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    out
}

/// The GPU's driver assembles our PTX into machine code when it loads a module (a JIT step no
/// NVRTC compile exercises): `ptxas`, the same assembler, must accept every module for sm_80 and
/// sm_90, and each entry point must fit the launch shape the project uses: registers × 256
/// threads within a block's register file and static shared memory within 48 KiB (beyond
/// either, the launch or the load fails on a GPU and nowhere else), with no register spilled
/// (`rasterize_bwd` and `project_bwd` hold their register counts by `__launch_bounds__`, and
/// a spill there would cost every launch). The report (registers,
/// shared memory, stack, spills per kernel) is printed for performance work. `GS_PTXAS` names
/// the assembler (`tools/nvrtc-setup.sh` unpacks it), else `ptxas` on the PATH; without one the
/// test skips, unless `GS_REQUIRE_NVRTC=1`.
#[test]
fn every_kernel_assembles_within_the_launch_limits() {
    if let Err(e) = nvrtc_available() {
        assert!(
            !required(),
            "GS_REQUIRE_NVRTC=1 but NVRTC cannot be loaded: {e}"
        );
        eprintln!("SKIP ptxas: {e}");
        return;
    }
    let ptxas = std::env::var("GS_PTXAS").unwrap_or_else(|_| "ptxas".to_string());
    if let Err(e) = std::process::Command::new(&ptxas).arg("--version").output() {
        assert!(
            !required(),
            "GS_REQUIRE_NVRTC=1 but the PTX assembler {ptxas:?} cannot run ({e}): run \
             tools/nvrtc-setup.sh DIR and set GS_PTXAS=DIR/bin/ptxas"
        );
        eprintln!("SKIP ptxas: {ptxas:?} cannot run ({e})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for arch in CI_ARCHES {
        let sm = arch.replace("compute_", "sm_");
        for m in all_modules() {
            let ptx = compile_ptx(&m, arch).unwrap();
            let file = dir.path().join(format!("{}-{sm}.ptx", m.name));
            std::fs::write(&file, ptx).unwrap();
            let o = std::process::Command::new(&ptxas)
                .args([&format!("-arch={sm}"), "-v", "-o"])
                .arg(dir.path().join("out.cubin"))
                .arg(&file)
                .output()
                .unwrap();
            let report = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            if !o.status.success() {
                failures.push(format!("{} for {sm}: ptxas failed:\n{report}", m.name));
                continue;
            }
            let entries = parse_ptxas_report(&report);
            for e in &m.entry_points {
                let Some((_, r)) = entries.iter().find(|(n, _)| n == e) else {
                    failures.push(format!("{} for {sm}: no report for {e}:\n{report}", m.name));
                    continue;
                };
                eprintln!(
                    "{sm} {:<22} {:<26} {:>3} registers {:>6} B smem {:>4} B stack {:>4} B spilled",
                    m.name, e, r.registers, r.shared, r.stack, r.spill_stores
                );
                if r.registers == 0 || r.registers * LAUNCH_THREADS > REGISTERS_PER_BLOCK {
                    failures.push(format!(
                        "{} {e} for {sm}: {} registers × {LAUNCH_THREADS} threads exceed a \
                         block's {REGISTERS_PER_BLOCK}",
                        m.name, r.registers
                    ));
                }
                // A spill moves registers to local memory on every launch; a kernel that
                // needs more than its `__launch_bounds__` allow should say so by changing them.
                if r.spill_stores > 0 {
                    failures.push(format!(
                        "{} {e} for {sm}: {} B of spill stores (raise its __launch_bounds__ \
                         register limit, or lower what it keeps live)",
                        m.name, r.spill_stores
                    ));
                }
                if r.shared > STATIC_SHARED_BYTES {
                    failures.push(format!(
                        "{} {e} for {sm}: {} B of static shared memory exceed {STATIC_SHARED_BYTES}",
                        m.name, r.shared
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn ptxas_reports_parse() {
    let report = "ptxas info    : 0 bytes gmem\n\
        ptxas info    : Compiling entry function 'rasterize_fwd' for 'sm_90'\n\
        ptxas info    : Function properties for rasterize_fwd\n\
        \x20   16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n\
        ptxas info    : Used 62 registers, used 1 barriers, 12288 bytes smem, 400 bytes cmem[0]\n\
        ptxas info    : Compiling entry function 'k2' for 'sm_90'\n\
        ptxas info    : Used 8 registers, used 0 barriers, 380 bytes cmem[0]\n";
    let r = parse_ptxas_report(report);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].0, "rasterize_fwd");
    assert_eq!(
        (
            r[0].1.registers,
            r[0].1.shared,
            r[0].1.stack,
            r[0].1.spill_stores
        ),
        (62, 12288, 16, 8)
    );
    assert_eq!(
        (r[1].0.as_str(), r[1].1.registers, r[1].1.shared),
        ("k2", 8, 0)
    );
}
