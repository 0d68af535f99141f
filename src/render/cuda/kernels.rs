//! The rasterizer's kernel table: embedded CUDA sources (`kernels/*.cu` + `*.cuh`), header
//! splicing and the `-D` constants shared with the CPU reference, packaged as
//! [`ModuleSource`]s for the device layer ([`crate::device`]), whose two drivers (NVRTC on a
//! GPU, the C++ compiler for the host emulation) compile exactly that text.
//!
//! Owns: which `.cu` holds which entry points and the exact source text both drivers see.
//! The runtime ([`super::CudaRasterizer`]) and `tests/nvrtc_compile.rs` both go through
//! [`Kernel::module_source`], so the compile test checks precisely what runs.
//!
//! Invariants: every header a `.cu` includes is in [`HEADERS`] and is spliced in place of its
//! `#include "…"` line (cudarc has no in-memory header API for NVRTC; each header has an
//! include guard, so splicing one twice is harmless); every numeric constant a kernel shares
//! with Rust comes from the Rust constant itself through [`defines`], never retyped in CUDA.
//! Nothing here touches a driver, so it works on machines without a GPU.

use crate::render::cpu::project::{DILATION, EQUIDISTANT_SERIES_BELOW, NEAR_PLANE, TILE_SIZE};
use crate::render::cpu::rasterize::{
    ALPHA_MAX, ALPHA_MIN, SIGMA_CUT_SLACK, SIGMA_ROUNDING, SIGMA_ROUNDING_MAX, SUPPORT_PAD_PX,
    SUPPORT_PAD_REL, T_MIN,
};
use crate::scene::sh::{SH_C0, SH_C1, SH_C2, SH_C3};

use super::CudaError;
use crate::device::ModuleSource;

/// Threads per block of the scan kernels, and elements each thread scans: one block covers
/// 1024 elements, so three levels cover 2³⁰ — more than any intersection count we accept.
pub const SCAN_BLOCK: u32 = 256;
pub const SCAN_ITEMS: u32 = 4;
/// Threads per block of the radix sort.
pub const SORT_BLOCK: u32 = 256;
/// Elements per thread of the radix sort: a block sorts a tile of `SORT_BLOCK · SORT_ITEMS`
/// (2048) keys, reordered in 16 KiB of shared memory (35 KiB in all, under the 48 KiB a block
/// may declare statically). Larger tiles give longer runs per digit on the way out and a
/// smaller histogram.
pub const SORT_ITEMS: u32 = 8;
/// Keys per block of the radix sort.
pub const SORT_TILE: u32 = SORT_BLOCK * SORT_ITEMS;
/// Bits per radix-sort digit: 256 buckets fit the 256-thread block's one-bucket-per-thread
/// prefix step; a 1080p render's 13-bit tile ids take 2 passes, depths 4.
pub const RADIX_BITS: u32 = 8;
/// Threads per block of the one-thread-per-element kernels (projection, key emission), and of
/// `pose_finish`: `project_bwd` sums the pose gradient over blocks of this size.
pub const ELEMENT_BLOCK: u32 = 256;
/// Values of the pose gradient `∂L/∂(ρ, φ)` ([`crate::render::GaussianGrads::pose`]).
pub const POSE_LEN: usize = 6;
/// Floats in the camera buffer (layout in `kernels/common.cuh`).
pub const CAM_LEN: usize = 24;

/// Embedded headers, by the name `.cu` files include them with.
pub const HEADERS: [(&str, &str); 4] = [
    ("common.cuh", include_str!("../../../kernels/common.cuh")),
    ("sh.cuh", include_str!("../../../kernels/sh.cuh")),
    (
        "projection.cuh",
        include_str!("../../../kernels/projection.cuh"),
    ),
    ("raster.cuh", include_str!("../../../kernels/raster.cuh")),
];

/// One compiled module per pipeline stage (one `.cu` file each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    ProjectFwd,
    ProjectBwd,
    TileBinning,
    Scan,
    Sort,
    RasterizeFwd,
    RasterizeBwd,
}

impl Kernel {
    pub const ALL: [Kernel; 7] = [
        Kernel::ProjectFwd,
        Kernel::ProjectBwd,
        Kernel::TileBinning,
        Kernel::Scan,
        Kernel::Sort,
        Kernel::RasterizeFwd,
        Kernel::RasterizeBwd,
    ];

    /// The `.cu` file under `kernels/`.
    pub fn file_name(self) -> &'static str {
        match self {
            Kernel::ProjectFwd => "project_fwd.cu",
            Kernel::ProjectBwd => "project_bwd.cu",
            Kernel::TileBinning => "tile_binning.cu",
            Kernel::Scan => "scan.cu",
            Kernel::Sort => "sort.cu",
            Kernel::RasterizeFwd => "rasterize_fwd.cu",
            Kernel::RasterizeBwd => "rasterize_bwd.cu",
        }
    }

    /// The `extern "C" __global__` functions the module must export.
    pub fn entry_points(self) -> &'static [&'static str] {
        match self {
            Kernel::ProjectFwd => &["project_fwd"],
            Kernel::ProjectBwd => &[
                "project_bwd",
                "project_bwd_fisheye",
                "project_bwd_pose",
                "project_bwd_pose_fisheye",
                "pose_finish",
            ],
            Kernel::TileBinning => &["depth_keys", "gather_counts", "emit_keys", "tile_ranges"],
            Kernel::Scan => &[
                "scan_block_u64",
                "scan_add_u64",
                "scan_block_u32",
                "scan_add_u32",
            ],
            Kernel::Sort => &["radix_histogram", "radix_scatter"],
            Kernel::RasterizeFwd => &["rasterize_fwd"],
            Kernel::RasterizeBwd => &["rasterize_bwd"],
        }
    }

    fn raw_source(self) -> &'static str {
        match self {
            Kernel::ProjectFwd => include_str!("../../../kernels/project_fwd.cu"),
            Kernel::ProjectBwd => include_str!("../../../kernels/project_bwd.cu"),
            Kernel::TileBinning => include_str!("../../../kernels/tile_binning.cu"),
            Kernel::Scan => include_str!("../../../kernels/scan.cu"),
            Kernel::Sort => include_str!("../../../kernels/sort.cu"),
            Kernel::RasterizeFwd => include_str!("../../../kernels/rasterize_fwd.cu"),
            Kernel::RasterizeBwd => include_str!("../../../kernels/rasterize_bwd.cu"),
        }
    }

    /// The source NVRTC compiles: the `.cu` with every `#include "x.cuh"` line replaced by the
    /// embedded header (recursively). An include of anything not in [`HEADERS`] is an error,
    /// so a new header cannot be forgotten silently.
    pub fn source(self) -> Result<String, CudaError> {
        spliced(self.file_name(), self.raw_source())
    }

    /// What the device layer compiles: the spliced source, the entry points, the constants.
    pub fn module_source(self) -> Result<ModuleSource, CudaError> {
        Ok(ModuleSource {
            name: self.file_name().to_string(),
            source: self.source()?,
            entry_points: self.entry_points().to_vec(),
            defines: defines(),
        })
    }
}

/// `text`, the `.cu` file `file`, with its headers spliced in as [`Kernel::source`] does: also
/// for the training modules outside the rasterizer's table that include `common.cuh`
/// (`kernels/loss.cu` shares its block reduction).
pub fn spliced(file: &str, text: &str) -> Result<String, CudaError> {
    let mut out = String::new();
    splice(file, text, &mut out, 0)?;
    Ok(out)
}

fn splice(file: &str, text: &str, out: &mut String, depth: u32) -> Result<(), CudaError> {
    // Headers include at most one level deep today; 8 leaves room while catching cycles.
    const MAX_DEPTH: u32 = 8;
    for (lineno, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("#include") {
            let name = rest.trim().trim_matches('"');
            let quoted = rest.trim().starts_with('"');
            if !quoted {
                return Err(CudaError::Source {
                    file: file.to_string(),
                    line: lineno + 1,
                    message: format!(
                        "system include {:?}: kernels must not depend on headers NVRTC \
                         would have to find on disk",
                        rest.trim()
                    ),
                });
            }
            let Some((_, body)) = HEADERS.iter().find(|(n, _)| *n == name) else {
                return Err(CudaError::Source {
                    file: file.to_string(),
                    line: lineno + 1,
                    message: format!("unknown header {name:?}; add it to kernels::HEADERS"),
                });
            };
            if depth >= MAX_DEPTH {
                return Err(CudaError::Source {
                    file: file.to_string(),
                    line: lineno + 1,
                    message: format!("include nesting deeper than {MAX_DEPTH} (a cycle?)"),
                });
            }
            out.push_str(&format!("// ---- begin {name} (spliced) ----\n"));
            splice(name, body, out, depth + 1)?;
            out.push_str(&format!("// ---- end {name} ----\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(())
}

/// Formats an f64 so that C parses back the identical double (Rust's `{:?}` is shortest
/// round-trip; force a decimal point or exponent so it is a floating literal).
fn c_double(v: f64) -> String {
    let s = format!("{v:?}");
    if s.contains('.') || s.contains('e') || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

/// The `-D` constants every kernel is compiled with, as (name, value).
pub fn defines() -> Vec<(&'static str, String)> {
    let mut d = vec![
        ("GS_TILE_SIZE", TILE_SIZE.to_string()),
        ("GS_NEAR_PLANE", c_double(NEAR_PLANE)),
        ("GS_DILATION", c_double(DILATION)),
        (
            "GS_EQUIDISTANT_SERIES_BELOW",
            c_double(EQUIDISTANT_SERIES_BELOW),
        ),
        ("GS_ALPHA_MAX", c_double(ALPHA_MAX)),
        ("GS_ALPHA_MIN", c_double(ALPHA_MIN)),
        ("GS_T_MIN", c_double(T_MIN)),
        ("GS_SIGMA_CUT_SLACK", c_double(SIGMA_CUT_SLACK)),
        ("GS_SUPPORT_PAD_REL", c_double(SUPPORT_PAD_REL)),
        ("GS_SUPPORT_PAD_PX", c_double(SUPPORT_PAD_PX)),
        ("GS_SIGMA_ROUNDING", c_double(SIGMA_ROUNDING)),
        ("GS_SIGMA_ROUNDING_MAX", c_double(SIGMA_ROUNDING_MAX)),
        ("GS_SCAN_BLOCK", SCAN_BLOCK.to_string()),
        ("GS_SCAN_ITEMS", SCAN_ITEMS.to_string()),
        ("GS_SORT_BLOCK", SORT_BLOCK.to_string()),
        ("GS_SORT_ITEMS", SORT_ITEMS.to_string()),
        ("GS_RADIX_BITS", RADIX_BITS.to_string()),
        ("GS_CAM_LEN", CAM_LEN.to_string()),
        ("GS_ELEMENT_BLOCK", ELEMENT_BLOCK.to_string()),
        ("GS_SH_C0", c_double(SH_C0)),
        ("GS_SH_C1", c_double(SH_C1)),
    ];
    const C2: [&str; 5] = [
        "GS_SH_C2_0",
        "GS_SH_C2_1",
        "GS_SH_C2_2",
        "GS_SH_C2_3",
        "GS_SH_C2_4",
    ];
    const C3: [&str; 7] = [
        "GS_SH_C3_0",
        "GS_SH_C3_1",
        "GS_SH_C3_2",
        "GS_SH_C3_3",
        "GS_SH_C3_4",
        "GS_SH_C3_5",
        "GS_SH_C3_6",
    ];
    for (n, v) in C2.iter().zip(SH_C2) {
        d.push((n, c_double(v)));
    }
    for (n, v) in C3.iter().zip(SH_C3) {
        d.push((n, c_double(v)));
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_splices_without_leftover_includes() {
        for k in Kernel::ALL {
            let s = k.source().unwrap();
            assert!(
                !s.lines().any(|l| l.trim_start().starts_with("#include")),
                "{} kept an #include",
                k.file_name()
            );
            assert!(
                s.contains("GS_COMMON_CUH"),
                "{} lacks common.cuh",
                k.file_name()
            );
            // Each entry point is declared here (`__global__ void name(`, or its name after a
            // `__launch_bounds__(…)`, possibly on the next line); the compile tests load each.
            for e in k.entry_points() {
                assert!(
                    s.contains(&format!(" {e}(")),
                    "{} lacks entry point {e}",
                    k.file_name()
                );
            }
        }
    }

    #[test]
    fn unknown_header_is_a_typed_error() {
        let mut out = String::new();
        let err = splice("x.cu", "int a;\n#include \"nope.cuh\"\n", &mut out, 0).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("x.cu") && msg.contains("line 2") && msg.contains("nope.cuh"));
        let err = splice("y.cu", "#include <cuda.h>\n", &mut out, 0).unwrap_err();
        assert!(err.to_string().contains("system include"));
    }

    #[test]
    fn defines_round_trip_the_rust_constants() {
        let d = defines();
        let get = |n: &str| d.iter().find(|(k, _)| *k == n).unwrap().1.clone();
        assert_eq!(get("GS_TILE_SIZE"), "16");
        assert_eq!(get("GS_ALPHA_MIN").parse::<f64>().unwrap(), ALPHA_MIN);
        assert_eq!(get("GS_SH_C3_6").parse::<f64>().unwrap(), SH_C3[6]);
        assert_eq!(c_double(1.0), "1.0");
        assert_eq!(c_double(1e-4), "0.0001");
        // Every define a kernel tests for is provided.
        let all: String = Kernel::ALL.iter().map(|k| k.source().unwrap()).collect();
        for (n, _) in &d {
            assert!(all.contains(n), "define {n} is not used by any kernel");
        }
    }

    #[test]
    fn ptx_cache_key_covers_arch_and_nvrtc_version() {
        use crate::device::cuda::source_hash;
        let src = Kernel::Sort.module_source().unwrap();
        let a = source_hash(&src, "compute_80", (13, 0));
        let b = source_hash(&src, "compute_90", (13, 0));
        let c = source_hash(&src, "compute_90", (13, 1));
        assert_ne!(a, b);
        assert_ne!(b, c, "the NVRTC version is part of the cache key");
    }
}
