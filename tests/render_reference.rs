//! End-to-end rendering checks: the CPU rasterizer against the independent numpy reference
//! (`tools/reference_render.py`), and the `gs-render` binary in both modes.
//!
//! The reference test needs `python3` with numpy. Without it the test prints a skip line and
//! passes, unless `GS_REQUIRE_REFERENCE=1` is set (CI sets it after installing numpy), in which
//! case it fails: a silently skipped oracle is not a check.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use ramsplat::dataset::Split;
use ramsplat::export::ply::{self as gply, LoadOptions, PlyEncoding};
use ramsplat::render::{CpuRasterizer, Rasterizer, RenderOptions, RenderOutput};
use ramsplat::rng::Rng;
use ramsplat::scene::camera::{Camera, Intrinsics, Pose, Projection};
use ramsplat::scene::gaussians::{sh_coeffs, Gaussians};
use ramsplat::shard::writer::{PackWriter, WriterOptions};
use ramsplat::shard::SourceInfo;

fn tool() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/reference_render.py")
}

fn gs_render() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gs-render"))
}

fn run_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Reads a little-endian float64 C-order .npy (what `np.save` writes for the reference image).
fn read_npy_f64(path: &Path) -> (Vec<usize>, Vec<f64>) {
    read_npy(path, "<f8", 8)
}

/// Reads a little-endian C-order .npy of `descr` (`<f8` or `<f4`, `size` bytes per value) as
/// f64 values.
fn read_npy(path: &Path, descr: &str, size: usize) -> (Vec<usize>, Vec<f64>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY", "{}: not a .npy", path.display());
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        _ => (
            u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize,
            12,
        ),
    };
    let header = std::str::from_utf8(&b[start..start + hlen]).unwrap();
    assert!(header.contains(&format!("'descr': '{descr}'")), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    let shape_txt = header
        .split("'shape': (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap();
    let shape: Vec<usize> = shape_txt
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let data: Vec<f64> = b[start + hlen..]
        .chunks_exact(size)
        .map(|c| match size {
            4 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
            _ => f64::from_le_bytes(c.try_into().unwrap()),
        })
        .collect();
    assert_eq!(data.len(), shape.iter().product::<usize>());
    (shape, data)
}

fn read_camera_json(path: &Path) -> Camera {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut m = [[0.0f64; 4]; 4];
    for (r, row) in m.iter_mut().enumerate() {
        for (c, x) in row.iter_mut().enumerate() {
            *x = v["world_to_camera"][r][c].as_f64().unwrap();
        }
    }
    let camera = Camera {
        width: v["width"].as_u64().unwrap() as u32,
        height: v["height"].as_u64().unwrap() as u32,
        intrinsics: Intrinsics {
            fx: v["fx"].as_f64().unwrap(),
            fy: v["fy"].as_f64().unwrap(),
            cx: v["cx"].as_f64().unwrap(),
            cy: v["cy"].as_f64().unwrap(),
        },
        world_to_camera: Pose::from_matrix4(m).unwrap(),
        projection: match v["camera_model"].as_str() {
            None | Some("pinhole") => Projection::Pinhole,
            Some("fisheye") => Projection::Fisheye,
            Some(other) => panic!("camera_model {other}"),
        },
    };
    camera.validate().unwrap();
    // The library's own reader agrees.
    let text = std::fs::read_to_string(path).unwrap();
    assert_eq!(Camera::from_json(&text).unwrap(), camera);
    camera
}

fn render_cpu(
    g: &Gaussians,
    camera: &Camera,
    sh_degree: u32,
    background: [f32; 3],
    antialiased: bool,
) -> Vec<f32> {
    let mut raster = CpuRasterizer::new();
    let mut out = RenderOutput::default();
    let options = RenderOptions {
        sh_degree,
        background,
        antialiased,
        ..RenderOptions::default()
    };
    raster.forward(g, camera, &options, &mut out).unwrap();
    out.image
}

/// The acceptance criterion: a pixel matches when every channel is within one 8-bit step
/// (1/255) of the reference, i.e. the two renders quantise to the same or adjacent 8-bit
/// values; at least 99.9% of pixels must match. f32 vs f64 arithmetic moves values by ~1e-6,
/// far inside a step; the allowance is for the thresholded decisions (α ≥ 1/255, the T < 1e-4
/// stop), where rounding can flip a contribution of at most α·T ≈ 1/255.
const PIXEL_TOLERANCE: f64 = 1.0 / 255.0;
const MIN_MATCHING_FRACTION: f64 = 0.999;
/// No pixel may be further off than this: one flipped threshold decision changes a pixel by
/// about α·T·(colour − what lies behind) with α ≈ 1/255 and colours ≤ ~1.5 here, so ≤ ~2/255;
/// 4/255 leaves a factor 2. A genuine convention mismatch (e.g. an α clamp at 0.99 instead of
/// 0.999) exceeds it on the pixels it touches even when they are fewer than 0.1%.
const MAX_PIXEL_ERROR: f64 = 4.0 / 255.0;

#[test]
fn cpu_render_matches_numpy_reference() {
    if !common::python_with("cpu_render_matches_numpy_reference", "numpy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run_ok(Command::new("python3").arg(tool()).args([
        "make-scene",
        "--out",
        d.to_str().unwrap(),
        "--seed",
        "20261121",
        "--n",
        "2000",
        "--width",
        "128",
        "--height",
        "96",
    ]));
    // The model was written by the Python tool (with an extra leading property): our loader
    // reads it by name.
    let model = gply::load(&d.join("model.ply"), &LoadOptions::default()).unwrap();
    assert_eq!(model.len(), 2000);
    assert_eq!(model.sh_degree, 3);
    let cases: &[(&str, u32, [f32; 3], bool)] = &[
        ("outside", 3, [0.0, 0.0, 0.0], false),
        ("inside", 3, [0.0, 0.0, 0.0], false),
        ("oblique", 3, [0.2, 0.5, 0.9], false),
        ("wide", 1, [1.0, 1.0, 1.0], false),
        ("outside", 0, [0.0, 0.0, 0.0], false),
        ("outside", 3, [0.0, 0.0, 0.0], true),
        ("wide", 2, [0.3, 0.3, 0.3], true),
        ("fisheye_inside", 3, [0.0, 0.0, 0.0], false),
        ("fisheye_outside", 2, [0.1, 0.2, 0.3], false),
        ("fisheye_inside", 3, [0.0, 0.0, 0.0], true),
    ];
    let mut classic_outside = None;
    for &(name, degree, bg, antialiased) in cases {
        let cam_path = d.join(format!("cam_{name}.json"));
        let npy = d.join(format!("{name}-{degree}-{antialiased}.npy"));
        let mut python = Command::new("python3");
        if antialiased {
            python.arg(tool()).args(["render", "--antialiased"]);
        } else {
            python.arg(tool()).arg("render");
        }
        run_ok(python.args([
            "--ply",
            d.join("model.ply").to_str().unwrap(),
            "--camera",
            cam_path.to_str().unwrap(),
            "--out",
            npy.to_str().unwrap(),
            "--sh-degree",
            &degree.to_string(),
            "--bg",
            &format!("{},{},{}", bg[0], bg[1], bg[2]),
        ]));
        let (shape, reference) = read_npy_f64(&npy);
        let camera = read_camera_json(&cam_path);
        assert_eq!(shape, [camera.height as usize, camera.width as usize, 3]);
        let ours = render_cpu(&model, &camera, degree, bg, antialiased);
        assert_eq!(ours.len(), reference.len());
        let pixels = reference.len() / 3;
        let mut matching = 0;
        let mut max_err: f64 = 0.0;
        let mut sum_err = 0.0;
        for p in 0..pixels {
            let err = (0..3)
                .map(|c| (ours[p * 3 + c] as f64 - reference[p * 3 + c]).abs())
                .fold(0.0, f64::max);
            max_err = max_err.max(err);
            sum_err += err;
            if err <= PIXEL_TOLERANCE {
                matching += 1;
            }
        }
        // The render must not be trivially empty (a camera that sees nothing checks nothing).
        let lit = (0..pixels)
            .filter(|&p| (0..3).any(|c| (reference[p * 3 + c] - bg[c] as f64).abs() > 0.05))
            .count();
        let fraction = matching as f64 / pixels as f64;
        let mode = if antialiased { ", antialiased" } else { "" };
        eprintln!(
            "{name} (SH {degree}{mode}): {matching}/{pixels} pixels within 1/255 ({:.4}%), max \
             error {max_err:.2e}, mean {:.2e}, {lit} pixels differ from the background",
            fraction * 100.0,
            sum_err / pixels as f64
        );
        // The antialiased reference must differ visibly from the classic one, or its case
        // checks nothing the classic ones do not.
        if (name, degree) == ("outside", 3) {
            match (&classic_outside, antialiased) {
                (None, false) => classic_outside = Some(reference.clone()),
                (Some(classic), true) => {
                    let moved = classic
                        .iter()
                        .zip(&reference)
                        .filter(|(a, b)| (*a - *b).abs() > 2.0 * PIXEL_TOLERANCE)
                        .count();
                    eprintln!("{name}: antialiasing moves {moved} channels by > 2/255");
                    assert!(
                        moved > pixels / 20,
                        "antialiasing changed only {moved} channels"
                    );
                }
                _ => unreachable!("the classic case comes first"),
            }
        }
        assert!(lit > pixels / 10, "{name}: camera sees almost nothing");
        assert!(
            max_err <= MAX_PIXEL_ERROR,
            "{name} (SH {degree}{mode}): a pixel is {max_err} off the reference"
        );
        assert!(
            fraction >= MIN_MATCHING_FRACTION,
            "{name} (SH {degree}{mode}): only {matching}/{pixels} pixels match the reference within \
             1/255 (max error {max_err})"
        );
    }
}

/// A small random model written by our own code (no numpy needed for the CLI tests).
fn small_model(seed: u64, n: usize) -> Gaussians {
    let mut rng = Rng::new(seed);
    let mut g = Gaussians::zeros(n, 1);
    for i in 0..n {
        let mut u = |lo: f64, hi: f64| rng.uniform(lo, hi) as f32;
        g.means[i] = [u(-1.0, 1.0), u(-1.0, 1.0), u(-1.0, 1.0)];
        g.log_scales[i] = [u(-4.0, -2.0), u(-4.0, -2.0), u(-4.0, -2.0)];
        g.rotations[i] = [u(-1.0, 1.0), u(-1.0, 1.0), u(-1.0, 1.0), u(0.1, 1.0)];
        g.logit_opacities[i] = u(-2.0, 3.0);
        for c in 0..sh_coeffs(1) {
            g.sh[i * sh_coeffs(1) + c] = [u(-1.0, 1.0), u(-1.0, 1.0), u(-1.0, 1.0)];
        }
    }
    g
}

fn test_camera(width: u32, height: u32, z: f64) -> Camera {
    Camera {
        width,
        height,
        intrinsics: Intrinsics {
            fx: 60.0,
            fy: 60.0,
            cx: width as f64 / 2.0,
            cy: height as f64 / 2.0,
        },
        world_to_camera: Pose {
            rotation: Pose::IDENTITY.rotation,
            translation: [0.0, 0.0, z],
        },
        projection: Projection::Pinhole,
    }
}

/// `camera` in gs-render's camera JSON.
fn camera_json(camera: &Camera) -> serde_json::Value {
    serde_json::json!({
        "width": camera.width, "height": camera.height,
        "fx": camera.intrinsics.fx, "fy": camera.intrinsics.fy,
        "cx": camera.intrinsics.cx, "cy": camera.intrinsics.cy,
        "world_to_camera": camera.world_to_camera.to_matrix4(),
    })
}

fn quantise(image: &[f32]) -> Vec<u8> {
    image
        .iter()
        .map(|&v| (v * 255.0 + 0.5).clamp(0.0, 255.0) as u8)
        .collect()
}

#[test]
fn gs_render_camera_mode_writes_the_library_render() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = small_model(3, 300);
    let ply = d.join("m.ply");
    gply::save(&ply, &model, PlyEncoding::BinaryLittleEndian).unwrap();
    let camera = test_camera(40, 30, 3.0);
    let mut cam_json = camera_json(&camera);
    // Fields other tools add are ignored.
    cam_json["name"] = "cam_00".into();
    cam_json["lens"] = serde_json::json!({"model": "PINHOLE"});
    let cam_path = d.join("cam.json");
    std::fs::write(&cam_path, cam_json.to_string()).unwrap();
    let png = d.join("out.png");
    run_ok(gs_render().args([
        "--ply",
        ply.to_str().unwrap(),
        "--camera",
        cam_path.to_str().unwrap(),
        "-o",
        png.to_str().unwrap(),
        "--bg",
        "0.25,0.5,1",
    ]));
    let img = image::open(&png).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), (40, 30));
    let want = quantise(&render_cpu(&model, &camera, 1, [0.25, 0.5, 1.0], false));
    assert_eq!(img.as_raw(), &want);

    // "camera_model": "fisheye" renders through the equidistant fisheye (the same pose and
    // intrinsics): the library's fisheye render, which differs from the pinhole one.
    let mut fish_json = cam_json.clone();
    fish_json["camera_model"] = "fisheye".into();
    let fish_path = d.join("fish.json");
    std::fs::write(&fish_path, fish_json.to_string()).unwrap();
    let fish_png = d.join("fish.png");
    run_ok(gs_render().args([
        "--ply",
        ply.to_str().unwrap(),
        "--camera",
        fish_path.to_str().unwrap(),
        "-o",
        fish_png.to_str().unwrap(),
        "--bg",
        "0.25,0.5,1",
    ]));
    let fisheye = Camera {
        projection: Projection::Fisheye,
        ..camera
    };
    let want_fish = quantise(&render_cpu(&model, &fisheye, 1, [0.25, 0.5, 1.0], false));
    assert_eq!(
        image::open(&fish_png).unwrap().to_rgb8().as_raw(),
        &want_fish
    );
    assert_ne!(want_fish, want);

    // --sh-degree 0 differs from the default (stored degree 1) render.
    let png0 = d.join("out0.png");
    run_ok(gs_render().args([
        "--ply",
        ply.to_str().unwrap(),
        "--camera",
        cam_path.to_str().unwrap(),
        "-o",
        png0.to_str().unwrap(),
        "--sh-degree",
        "0",
    ]));
    let img0 = image::open(&png0).unwrap().to_rgb8();
    assert_eq!(
        img0.as_raw(),
        &quantise(&render_cpu(&model, &camera, 0, [0.0; 3], false))
    );

    // --backend cuda: on the host emulation (GS_CUDA_EMULATE=1) on every machine, and on the
    // GPU when there is one, the render equals the CPU one within one 8-bit level. Without a
    // GPU and without the variable it is refused with exit code 3 and a hint, nothing written.
    let want_cuda = quantise(&render_cpu(&model, &camera, 1, [0.0; 3], false));
    let cuda_render = |png: &Path, emulate: bool| {
        let mut cmd = gs_render();
        cmd.args([
            "--ply",
            ply.to_str().unwrap(),
            "--camera",
            cam_path.to_str().unwrap(),
        ])
        .args(["-o", png.to_str().unwrap(), "--backend", "cuda"]);
        if emulate {
            cmd.env("GS_CUDA_EMULATE", "1");
        } else {
            cmd.env_remove("GS_CUDA_EMULATE");
        }
        cmd.output().unwrap()
    };
    let same_within_one_level = |png: &Path| {
        let img = image::open(png).unwrap().to_rgb8();
        let worst = img
            .as_raw()
            .iter()
            .zip(&want_cuda)
            .map(|(&a, &b)| a.abs_diff(b))
            .max()
            .unwrap();
        assert!(
            worst <= 1,
            "{}: differs from the CPU render by {worst} levels",
            png.display()
        );
    };
    let png_emu = d.join("cuda-emulated.png");
    let out = cuda_render(&png_emu, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    same_within_one_level(&png_emu);
    let png_cuda = d.join("cuda.png");
    let out = cuda_render(&png_cuda, false);
    if ramsplat::render::cuda::CudaRasterizer::gpu().is_err() {
        assert_eq!(out.status.code(), Some(3));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cuda backend") && err.contains("--backend cpu"),
            "{err}"
        );
        assert!(!png_cuda.exists());
    } else {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        same_within_one_level(&png_cuda);
    }

    // Bad inputs: exit 1 with the file named; bad usage: exit 2.
    let bad = d.join("bad.json");
    std::fs::write(&bad, r#"{"width": 4}"#).unwrap();
    let out = gs_render()
        .args([
            "--ply",
            ply.to_str().unwrap(),
            "--camera",
            bad.to_str().unwrap(),
            "-o",
        ])
        .arg(d.join("x.png"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.json"));
    let out = gs_render()
        .args(["--ply", ply.to_str().unwrap(), "-o", "x.png"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = gs_render()
        .args([
            "--ply",
            ply.to_str().unwrap(),
            "--camera",
            cam_path.to_str().unwrap(),
        ])
        .args(["-o", "x.png", "--sh-degree", "3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stored SH degree 1"));
}

/// `--depth`: beside each PNG, the expected depth (or with `--depth-kind plane` the plane
/// depth) as a float32 `.npy` that equals the library's [`render_depth`] on the same backend
/// (CPU here) bit for bit and that numpy loads
/// with the right shape and NaNs, plus a preview PNG of the image's size; in every mode.
#[test]
fn gs_render_depth_writes_npy_and_preview() {
    use ramsplat::render::depth::{render_depth, DepthKind, DepthScratch};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = small_model(3, 300);
    let ply = d.join("m.ply");
    gply::save(&ply, &model, PlyEncoding::BinaryLittleEndian).unwrap();
    let camera = test_camera(40, 30, 3.0);
    let cam_path = d.join("cam.json");
    std::fs::write(&cam_path, camera_json(&camera).to_string()).unwrap();
    let png = d.join("out.png");
    run_ok(gs_render().args([
        "--ply",
        ply.to_str().unwrap(),
        "--camera",
        cam_path.to_str().unwrap(),
        "-o",
        png.to_str().unwrap(),
        "--backend",
        "cpu",
        "--depth",
    ]));
    let npy = d.join("out.depth.npy");
    let (shape, depth) = read_npy(&npy, "<f4", 4);
    assert_eq!(shape, [30, 40]);
    // The library's depth of the model in this camera, on the CPU.
    let library_depth = |kind| {
        render_depth(
            &mut CpuRasterizer::<f32>::new(),
            &model,
            &camera,
            &RenderOptions::default(),
            kind,
            &mut DepthScratch::default(),
        )
        .unwrap()
    };
    let want = library_depth(DepthKind::Mean);
    let got: Vec<f32> = depth.iter().map(|&v| v as f32).collect();
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        want.depth.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    let (finite, empty) = (
        got.iter().filter(|v| v.is_finite()).count(),
        got.iter().filter(|v| v.is_nan()).count(),
    );
    assert!(finite > 100 && empty > 0, "{finite} finite, {empty} NaN");
    // The small model sits around z = 0 seen from 3 units: depths near 3.
    assert!(got
        .iter()
        .filter(|v| v.is_finite())
        .all(|&v| (1.5..4.5).contains(&v)));
    let preview = image::open(d.join("out.depth.png")).unwrap().to_rgb8();
    assert_eq!(preview.dimensions(), (40, 30));
    if common::python_with("gs_render_depth_writes_npy_and_preview", "numpy") {
        let out = Command::new("python3")
            .args([
                "-c",
                "import sys, numpy as np; a = np.load(sys.argv[1]); \
                 print(a.shape, a.dtype, int(np.isnan(a).sum()), float(np.nanmax(a)))",
                npy.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let max = got
            .iter()
            .filter(|v| v.is_finite())
            .fold(0f32, |a, &b| a.max(b));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("(30, 40) float32 {empty} {}", max as f64)
        );
    }
    // --depth-kind plane: the library's plane depths, which differ.
    let planes = d.join("planes.png");
    run_ok(gs_render().args([
        "--ply",
        ply.to_str().unwrap(),
        "--camera",
        cam_path.to_str().unwrap(),
        "-o",
        planes.to_str().unwrap(),
        "--backend",
        "cpu",
        "--depth",
        "--depth-kind",
        "plane",
    ]));
    let (_, plane_depth) = read_npy(&d.join("planes.depth.npy"), "<f4", 4);
    let want_planes = library_depth(DepthKind::Plane);
    let plane_bits: Vec<u32> = plane_depth.iter().map(|&v| (v as f32).to_bits()).collect();
    assert_eq!(
        plane_bits,
        want_planes
            .depth
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    );
    assert_ne!(
        plane_bits,
        want.depth.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    // The other modes write the same pair beside each of their images.
    let list = d.join("cameras.json");
    std::fs::write(
        &list,
        serde_json::json!([{
            "id": 0, "img_name": "v0", "width": 40, "height": 30,
            "position": [0.0, 0.0, -3.0],
            "rotation": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
            "fx": camera.intrinsics.fx, "fy": camera.intrinsics.fy,
        }])
        .to_string(),
    )
    .unwrap();
    let many = d.join("many");
    run_ok(gs_render().args([
        "--ply",
        ply.to_str().unwrap(),
        "--cameras",
        list.to_str().unwrap(),
        "-o",
        many.to_str().unwrap(),
        "--backend",
        "cpu",
        "--depth",
    ]));
    let (shape, many_depth) = read_npy(&many.join("v0.depth.npy"), "<f4", 4);
    assert_eq!(shape, [30, 40]);
    assert!(many.join("v0.depth.png").exists());
    // The same camera (centre at z = −3 looking along +z): the same depth map.
    let diff = many_depth
        .iter()
        .zip(&depth)
        .filter(|(a, b)| !(a.is_nan() && b.is_nan()) && (**a - **b).abs() > 1e-4)
        .count();
    assert_eq!(diff, 0);
}

#[test]
fn gs_render_pack_mode_writes_side_by_side_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = small_model(5, 300);
    let ply = d.join("m.ply");
    gply::save(&ply, &model, PlyEncoding::BinaryLittleEndian).unwrap();
    // Three views: two test views with known ground truth, one train view.
    let (w, h) = (36u32, 28u32);
    let cams = [
        test_camera(w, h, 3.0),
        test_camera(w, h, 2.5),
        test_camera(w, h, 4.0),
    ];
    let splits = [Split::Test, Split::Train, Split::Test];
    let mut rng = Rng::new(11);
    let gts: Vec<Vec<u8>> = (0..3)
        .map(|_| (0..w * h * 3).map(|_| rng.below(256) as u8).collect())
        .collect();
    // View 2's ground truth is our own render: PSNR must come out infinite (null).
    let mut gts = gts;
    gts[2] = quantise(&render_cpu(&model, &cams[2], 1, [0.0; 3], false));
    let pack = d.join("pack");
    let mut writer = PackWriter::create(&pack, &WriterOptions::default()).unwrap();
    for i in 0..3 {
        writer
            .add_view(&format!("img/view{i}.png"), &cams[i], splits[i], &gts[i])
            .unwrap();
    }
    writer
        .finish(SourceInfo {
            path: "test".into(),
            format: ramsplat::dataset::Format::Colmap,
            missing_images: vec![],
            max_width: None,
            downscale: None,
            test_every: None,
            images: None,
            depths: None,
            sfm_depths: false,
            points: None,
            points_transform: None,
        })
        .unwrap();
    let out_dir = d.join("eval");
    run_ok(gs_render().args([
        "--ply",
        ply.to_str().unwrap(),
        "--pack",
        pack.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
    ]));
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("metrics.json")).unwrap())
            .unwrap();
    assert_eq!(metrics["count"], 2);
    assert_eq!(metrics["split"], "test");
    assert_eq!(metrics["identical_views"], 1);
    let views = metrics["views"].as_array().unwrap();
    assert_eq!(views.len(), 2);
    assert_eq!(views[0]["index"], 0);
    assert_eq!(views[1]["index"], 2);
    assert!(views[1]["psnr"].is_null());
    assert!((views[1]["ssim"].as_f64().unwrap() - 1.0).abs() < 1e-6);
    for (v, i) in views.iter().zip([0usize, 2]) {
        let file = out_dir.join(v["file"].as_str().unwrap());
        let img = image::open(&file).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (2 * w, h));
        let (mut left, mut right) = (Vec::new(), Vec::new());
        for row in img.as_raw().chunks_exact((6 * w) as usize) {
            left.extend_from_slice(&row[..(3 * w) as usize]);
            right.extend_from_slice(&row[(3 * w) as usize..]);
        }
        assert_eq!(left, gts[i], "view {i}: left half is the ground truth");
        let render = quantise(&render_cpu(&model, &cams[i], 1, [0.0; 3], false));
        assert_eq!(right, render, "view {i}: right half is the render");
        let psnr = ramsplat::metrics::psnr_u8(&right, &left).unwrap();
        let ssim = ramsplat::metrics::ssim_u8(&right, &left, w as usize, h as usize).unwrap();
        if psnr.is_finite() {
            assert!((v["psnr"].as_f64().unwrap() - psnr).abs() < 1e-9);
        }
        assert!((v["ssim"].as_f64().unwrap() - ssim).abs() < 1e-9);
    }
    // Only one finite PSNR: the mean is that view's.
    assert_eq!(metrics["mean_psnr"], views[0]["psnr"]);

    // --split all renders every view.
    let all_dir = d.join("all");
    run_ok(
        gs_render()
            .args([
                "--ply",
                ply.to_str().unwrap(),
                "--pack",
                pack.to_str().unwrap(),
            ])
            .args(["-o", all_dir.to_str().unwrap(), "--split", "all"]),
    );
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(all_dir.join("metrics.json")).unwrap())
            .unwrap();
    assert_eq!(m["count"], 3);

    // --trajectory: 9 frames from the first test view (z = 3) to the last (z = 4); the end
    // frames are those views' renders (to the last bit of the pose, so within one 8-bit step).
    let fly = d.join("fly");
    run_ok(gs_render().args([
        "--ply",
        ply.to_str().unwrap(),
        "--pack",
        pack.to_str().unwrap(),
        "--trajectory",
        "9",
        "-o",
        fly.to_str().unwrap(),
    ]));
    let mut names: Vec<String> = std::fs::read_dir(&fly)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let expected: Vec<String> = (0..9).map(|n| format!("frame_{n:05}.png")).collect();
    assert_eq!(names, expected);
    let frame = |n: usize| image::open(fly.join(&expected[n])).unwrap().to_rgb8();
    for (n, cam) in [(0usize, &cams[0]), (8, &cams[2])] {
        let img = frame(n);
        assert_eq!(img.dimensions(), (w, h));
        let want = quantise(&render_cpu(&model, cam, 1, [0.0; 3], false));
        let off = img
            .as_raw()
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.abs_diff(**b) > 1)
            .count();
        assert_eq!(off, 0, "frame {n} is not its key view's render");
    }
    // The middle frame is neither end: the camera moved.
    assert_ne!(frame(4).as_raw(), frame(0).as_raw());
    assert_ne!(frame(4).as_raw(), frame(8).as_raw());
    // A shorter trajectory into the same folder would leave frames 5-8 behind for the encoder
    // to play: refused, naming the first, with nothing written; as many frames re-render.
    let again = |frames: &str| {
        gs_render()
            .args(["--ply", ply.to_str().unwrap()])
            .args(["--pack", pack.to_str().unwrap()])
            .args(["--trajectory", frames, "-o", fly.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let first = std::fs::read(fly.join(&expected[0])).unwrap();
    std::fs::write(fly.join(&expected[0]), b"stale").unwrap();
    let out = again("5");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("holds 4 files of a longer earlier trajectory (from frame_00005.png)"),
        "{err}"
    );
    assert_eq!(std::fs::read(fly.join(&expected[0])).unwrap(), b"stale");
    let out = again("9");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(fly.join(&expected[0])).unwrap(), first);
    // One key camera cannot make a path: a clear refusal, not a panic.
    let out = gs_render()
        .args(["--ply", ply.to_str().unwrap()])
        .args(["--pack", pack.to_str().unwrap(), "--split", "train"])
        .args(["--trajectory", "5", "-o", d.join("one").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at least 2 key cameras"), "{err}");
    // The two test views look along one axis: no centre to orbit, said so.
    let out = gs_render()
        .args(["--ply", ply.to_str().unwrap()])
        .args(["--pack", pack.to_str().unwrap()])
        .args(["--trajectory", "5", "--trajectory-shape", "ellipse"])
        .args(["-o", d.join("orbit").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("do not surround a centre"), "{err}");
}

#[test]
fn gs_render_refuses_an_impossible_image_size_without_a_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ply = d.join("m.ply");
    gply::save(&ply, &small_model(3, 10), PlyEncoding::BinaryLittleEndian).unwrap();
    let camera = test_camera(40, 30, 3.0);
    let cam_json = serde_json::json!({
        "width": 100000, "height": 100000,
        "fx": 50000.0, "fy": 50000.0, "cx": 50000.0, "cy": 50000.0,
        "world_to_camera": camera.world_to_camera.to_matrix4(),
    });
    let cam_path = d.join("cam.json");
    std::fs::write(&cam_path, cam_json.to_string()).unwrap();
    let png = d.join("out.png");
    let o = gs_render()
        .args([
            "--ply",
            ply.to_str().unwrap(),
            "--camera",
            cam_path.to_str().unwrap(),
            "-o",
            png.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("100000x100000") && err.contains("lower width/height"),
        "{err}"
    );
    assert!(!err.contains("backtrace") && !png.exists(), "{err}");
}
