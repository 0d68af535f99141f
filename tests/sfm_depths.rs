//! `gs-pack convert --sfm-depths` end to end: a synthetic COLMAP scene (whose images observe
//! the points they see, with consistent tracks) converted with the option, read back with the
//! crate's pack reader. Every pixel of a view's sparse plane that holds a value must decode to
//! the inverse depth of a synthetic point that projects into that pixel through the packed
//! camera (at full size and under `--downscale 2`), the counts must add up (`gs-pack info`, the
//! convert's report line, the observations), and `gs-pack export` must not write the sparse
//! planes as depth maps. The refusals (no COLMAP model, `--depths` too, no tracks, a track
//! naming an unknown image) are in `tests/hostile_inputs.rs`.

#[path = "common/gs_pack.rs"]
mod gs_pack;

use std::path::Path;

use gs_pack::{gs_pack, text};
use ramsplat::import::colmap::{parse_tracks_bytes, read_model, Encoding};
use ramsplat::scene::camera::Camera;
use ramsplat::shard::reader::Pack;

const VIEWS: usize = 8;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A synthetic COLMAP scene: 8 views of 64×48, 3,000 points, seed 5.
fn scene(dir: &Path) -> std::path::PathBuf {
    let scene = dir.join("scene");
    let o = gs_pack(&[
        "synth",
        "-o",
        s(&scene),
        "--views",
        "8",
        "--width",
        "64",
        "--height",
        "48",
        "--points",
        "3000",
        "--format",
        "colmap",
        "--seed",
        "5",
        "--tracks",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    scene
}

/// The model's points (f64, as written) and its number of track elements.
fn model_points(scene: &Path) -> (Vec<[f64; 3]>, u64) {
    let sparse = scene.join("sparse/0");
    let m = read_model(&sparse, Encoding::Text).unwrap();
    let bytes = std::fs::read(sparse.join("points3D.txt")).unwrap();
    let tracks = parse_tracks_bytes(&bytes, Encoding::Text).unwrap();
    let elements = tracks.iter().map(|t| t.1.len() as u64).sum();
    (m.points.iter().map(|p| p.xyz).collect(), elements)
}

/// The pixel a point lands in through `camera`, and its inverse depth.
fn landing(camera: &Camera, p: [f64; 3]) -> Option<((u32, u32), f64)> {
    let [x, y, z] = camera.world_to_camera.transform(p);
    if z <= 0.0 {
        return None;
    }
    let k = camera.intrinsics;
    let (u, v) = (k.fx * x / z + k.cx, k.fy * y / z + k.cy);
    ((0.0..camera.width as f64).contains(&u) && (0.0..camera.height as f64).contains(&v))
        .then(|| ((u.floor() as u32, v.floor() as u32), 1.0 / z))
}

/// Checks every view's plane against `points`; returns the pixels holding a value.
fn check_planes(pack: &Path, points: &[[f64; 3]], width: u32, height: u32) -> u64 {
    let pack = Pack::open(pack).unwrap();
    let m = pack.manifest();
    assert!(m.source.sfm_depths, "the manifest marks sparse SfM depths");
    assert_eq!(m.views.len(), VIEWS);
    let mut total = 0u64;
    let mut targets = Vec::new();
    for (i, v) in m.views.iter().enumerate() {
        assert_eq!((v.width(), v.height()), (width, height));
        let scale = v
            .depth
            .unwrap_or_else(|| panic!("view {i} carries a plane"));
        let mut bytes = vec![0u8; v.decoded_len()];
        pack.read_view_into(i, &mut bytes).unwrap();
        let planes = v.layout().planes(&bytes, width, height).unwrap();
        let plane = planes.depth.unwrap();
        assert_eq!(plane.len(), 2 * width as usize * height as usize);
        scale.targets_into(plane, &mut targets);
        // Inverse depths of the points landing in each pixel, through the packed camera.
        let mut near: std::collections::HashMap<(u32, u32), Vec<f64>> = Default::default();
        for &p in points {
            if let Some((px, inv)) = landing(&v.camera, p) {
                near.entry(px).or_default().push(inv);
            }
        }
        // Half a quantization step, plus f32 rounding.
        let half_step = scale.scale as f64 / 65536.0 / 2.0;
        let mut held = 0u64;
        for (k, &t) in targets.iter().enumerate() {
            if t.is_nan() {
                continue;
            }
            held += 1;
            let px = (k as u32 % width, k as u32 / width);
            let candidates = near.get(&px).map_or(&[][..], Vec::as_slice);
            let tol = half_step + 1e-6 * t.abs() as f64;
            assert!(
                candidates.iter().any(|&inv| (inv - t as f64).abs() <= tol),
                "view {i} pixel {px:?}: target {t} is the inverse depth of no point landing \
                 there ({candidates:?}, tolerance {tol})"
            );
        }
        assert!(held > 0, "view {i}: a plane holds at least one point");
        // The manifest counts them (the divisor of the view's depth mean in training).
        assert_eq!(v.depth_pixels, Some(held), "view {i}");
        total += held;
    }
    total
}

#[test]
fn sparse_planes_hold_the_observed_points_inverse_depths() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = scene(tmp.path());
    let (points, elements) = model_points(&scene);
    assert!(elements > 0, "synth writes tracks");
    let pack = tmp.path().join("p.pack");
    let o = gs_pack(&["convert", s(&scene), "-o", s(&pack), "--sfm-depths"]);
    assert!(o.status.success(), "{}", text(&o));
    let pixels = check_planes(&pack, &points, 64, 48);
    // Some points share a pixel: at most one pixel per observation.
    assert!(
        pixels > 0 && pixels <= elements,
        "{pixels} pixels, {elements} observations"
    );
    // Several points of a view may share a pixel, but not most of them.
    assert!(
        pixels * 4 > elements,
        "{pixels} pixels of {elements} observations"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "sparse SfM depths: 8 of 8 views carry a plane, {pixels} point pixels in all (from \
             {elements} observations)"
        )),
        "{err}"
    );

    // gs-pack info counts the same.
    let o = gs_pack(&["info", s(&pack)]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!(
            "8 with a sparse SfM depth plane (--sfm-depths: the inverse depth of the points \
             each image observes), {pixels} point pixels in all"
        )),
        "{out}"
    );
    let o = gs_pack(&["info", s(&pack), "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["sfm_depth_point_pixels"], pixels, "{j}");
    assert_eq!(j["depth_views"], 8);
    assert_eq!(j["source"]["sfm_depths"], true);

    // Without the option the same scene converts as before: no planes, no flag.
    let plain = tmp.path().join("plain.pack");
    let o = gs_pack(&["convert", s(&scene), "-o", s(&plain)]);
    assert!(o.status.success(), "{}", text(&o));
    let m = Pack::open(&plain).unwrap();
    assert!(!m.manifest().has_depths() && !m.manifest().source.sfm_depths);
    let o = gs_pack(&["info", s(&plain), "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["sfm_depth_point_pixels"].is_null(), "{j}");
}

#[test]
fn downscaled_views_get_planes_of_their_own_size() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = scene(tmp.path());
    let (points, elements) = model_points(&scene);
    let pack = tmp.path().join("half.pack");
    let o = gs_pack(&[
        "convert",
        s(&scene),
        "-o",
        s(&pack),
        "--sfm-depths",
        "--downscale",
        "2",
        "--codec",
        "png",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let pixels = check_planes(&pack, &points, 32, 24);
    assert!(pixels > 0 && pixels <= elements);
    // A quarter of the pixels: more points share one than at full size.
    let full = tmp.path().join("full.pack");
    let o = gs_pack(&["convert", s(&scene), "-o", s(&full), "--sfm-depths"]);
    assert!(o.status.success(), "{}", text(&o));
    let at_full = check_planes(&full, &points, 64, 48);
    assert!(pixels < at_full, "{pixels} at half size, {at_full} at full");
}

#[test]
fn export_leaves_sparse_planes_out() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = scene(tmp.path());
    let pack = tmp.path().join("p.pack");
    let o = gs_pack(&["convert", s(&scene), "-o", s(&pack), "--sfm-depths"]);
    assert!(o.status.success(), "{}", text(&o));
    for format in ["nerfstudio", "colmap"] {
        let out = tmp.path().join(format!("out-{format}"));
        let o = gs_pack(&["export", s(&pack), "-o", s(&out), "--format", format]);
        assert!(o.status.success(), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("0 with depth")
                && err.contains("note: the 8 sparse SfM depth planes (gs-pack convert --sfm-depths) were not exported"),
            "{err}"
        );
        assert!(!out.join("depths").exists(), "{format}: no depth maps");
        assert!(!out.join("depth_params.json").exists());
        assert!(!out.join("sparse/0/depth_params.json").exists());
        // The folder converts back, without depth.
        let back = tmp.path().join(format!("back-{format}.pack"));
        let o = gs_pack(&["convert", s(&out), "-o", s(&back)]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(!Pack::open(&back).unwrap().manifest().has_depths());
    }
}
