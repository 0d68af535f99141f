//! `gs-pack convert --points-transform FILE`: a cloud registered in another frame (a
//! georeferenced scan) is moved into the cameras' frame in `f64`, by every cloud reader, before
//! its positions are rounded to the pack's `f32`.

use std::path::Path;

use ramsplat::dataset::PointSource;
use ramsplat::import::transform::PointsTransform;
use ramsplat::import::{las, pcd, ply, ImportError, ImportOptions};
use ramsplat::shard::reader::Pack;
use ramsplat::synth::las::{las_bytes, LasPoint, LasSpec, LazChunks};

#[path = "common/gs_pack.rs"]
mod gs_pack;
use gs_pack::{gs_pack, packed, scene_and_surface, text};

/// A rotation of 90° about z that takes a UTM-like frame (easting 500 km, northing 4,000 km,
/// 100 m up) to a local one: `x' = −(y − 4,000,000)`, `y' = x − 500,000`, `z' = z − 100`.
const TO_LOCAL: &str = "0 -1 0 4000000\n1 0 0 -500000\n0 0 1 -100\n0 0 0 1\n";

/// Two points in the georeferenced frame, their normals, and where they belong locally.
const FAR: [[f64; 3]; 2] = [
    [500_012.345_6, 4_000_007.891_2, 101.25],
    [500_000.5, 4_000_000.25, 100.0],
];
const NEAR: [[f64; 3]; 2] = [[-7.8912, 12.3456, 1.25], [-0.25, 0.5, 0.0]];
const NORMALS: [[f32; 3]; 2] = [[0.0, 0.6, 0.8], [1.0, 0.0, 0.0]];
const NEAR_NORMALS: [[f32; 3]; 2] = [[-0.6, 0.0, 0.8], [0.0, 1.0, 0.0]];

fn moved() -> ImportOptions {
    ImportOptions {
        points_transform: Some(PointsTransform::parse(TO_LOCAL).unwrap()),
        ..Default::default()
    }
}

/// Every point of a source: positions and normals.
fn stream(src: &mut dyn PointSource<Error = ImportError>) -> Vec<([f32; 3], Option<[f32; 3]>)> {
    let mut out = Vec::new();
    while let Some(c) = src.next_chunk(5).unwrap() {
        for (i, xyz) in c.xyz.iter().enumerate() {
            out.push((*xyz, c.normals.as_ref().map(|n| n[i])));
        }
    }
    out
}

/// Within the rounding of the local position to f32 (and f64's of the map): the 25 cm
/// spacing of f32 at the far northing never enters.
fn assert_near(got: [f32; 3], want: [f64; 3], tol: f64, what: &str) {
    for a in 0..3 {
        assert!(
            (f64::from(got[a]) - want[a]).abs() <= tol,
            "{what}: {got:?}, want {want:?}"
        );
    }
}

#[test]
fn ply_and_pcd_move_positions_in_f64_and_turn_normals() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<String> = FAR
        .iter()
        .zip(NORMALS)
        .map(|(p, n)| format!("{} {} {} {} {} {}", p[0], p[1], p[2], n[0], n[1], n[2]))
        .collect();
    let ply_path = dir.path().join("scan.ply");
    std::fs::write(
        &ply_path,
        format!(
            "ply\nformat ascii 1.0\nelement vertex 2\nproperty double x\nproperty double y\n\
             property double z\nproperty float nx\nproperty float ny\nproperty float nz\n\
             end_header\n{}\n",
            rows.join("\n")
        ),
    )
    .unwrap();
    let pcd_path = dir.path().join("scan.pcd");
    std::fs::write(
        &pcd_path,
        format!(
            "VERSION 0.7\nFIELDS x y z normal_x normal_y normal_z\nSIZE 8 8 8 4 4 4\n\
             TYPE F F F F F F\nCOUNT 1 1 1 1 1 1\nWIDTH 2\nHEIGHT 1\nPOINTS 2\nDATA ascii\n{}\n",
            rows.join("\n")
        ),
    )
    .unwrap();
    let ply = ply::import(&ply_path, &moved()).unwrap();
    let pcd = pcd::import(&pcd_path, &moved()).unwrap();
    for (name, mut scene) in [("ply", ply), ("pcd", pcd)] {
        let got = stream(scene.clouds[0].as_mut());
        assert_eq!(got.len(), 2, "{name}");
        for (k, (xyz, n)) in got.into_iter().enumerate() {
            assert_near(xyz, NEAR[k], 1e-6, name);
            let n = n.expect("normals");
            for a in 0..3 {
                assert!((n[a] - NEAR_NORMALS[k][a]).abs() < 1e-6, "{name}: {n:?}");
            }
        }
        // Without the transform the same file is only good to f32's spacing out there.
    }
    let mut raw = ply::import(&ply_path, &ImportOptions::default()).unwrap();
    let far = stream(raw.clouds[0].as_mut());
    assert_eq!(f64::from(far[0].0[1]), 4_000_008.0);

    // A map that sends a point beyond f32 is an error naming the point.
    let huge = ImportOptions {
        points_transform: Some(PointsTransform::parse("1e40 0 0 0 0 1 0 0 0 0 1 0").unwrap()),
        ..Default::default()
    };
    let Err(e) = pcd::import(&pcd_path, &huge) else {
        panic!("a point beyond f32 was accepted");
    };
    let e = e.to_string();
    assert!(
        e.contains("point 0") && e.contains("--points-transform"),
        "{e}"
    );
    let mut scene = ply::import(&ply_path, &huge).unwrap();
    let e = scene.clouds[0].next_chunk(5).unwrap_err().to_string();
    assert!(
        e.contains("vertex 0") && e.contains("after --points-transform"),
        "{e}"
    );
}

/// `pts` (local positions) as a LAS/LAZ scan in the UTM-like frame of [`TO_LOCAL`], at a
/// 0.1 mm quantum around a georeferenced offset.
fn utm_scan(pts: &[([f32; 3], [u8; 3])], laz: bool) -> Vec<u8> {
    let to_utm = PointsTransform::parse(TO_LOCAL).unwrap().inverse();
    let mut spec = LasSpec::new(4, 7);
    if laz {
        spec = spec.laz(LazChunks::Fixed(1000));
    }
    spec.scale = [1e-4; 3];
    spec.offset = [500_000.0, 4_000_000.0, 0.0];
    let pts: Vec<LasPoint> = pts
        .iter()
        .map(|(xyz, rgb)| {
            let w = to_utm.point(xyz.map(f64::from));
            LasPoint {
                xyz: std::array::from_fn(|a| ((w[a] - spec.offset[a]) / 1e-4).round() as i32),
                rgb: rgb.map(|c| u16::from(c) * 257),
                class: 2,
                withheld: false,
            }
        })
        .collect();
    las_bytes(&spec, &pts)
}

#[test]
fn las_and_laz_move_positions_in_f64() {
    let local: Vec<([f32; 3], [u8; 3])> = NEAR
        .iter()
        .map(|p| (p.map(|v| v as f32), [10, 20, 30]))
        .collect();
    for laz in [false, true] {
        let bytes = utm_scan(&local, laz);
        let path = Path::new("scan.las");
        let mut warnings = Vec::new();
        let mut raw = las::cloud_from_bytes(
            bytes.clone(),
            path,
            "scan",
            &Default::default(),
            &mut warnings,
        )
        .unwrap();
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("--points-transform FILE")),
            "the precision warning points to the option: {warnings:?}"
        );
        assert!(stream(raw.as_mut()).iter().all(|(p, _)| p[1] > 3_999_000.0));
        let mut warnings = Vec::new();
        let mut c = las::cloud_from_bytes(bytes, path, "scan", &moved(), &mut warnings).unwrap();
        assert!(
            !warnings.iter().any(|w| w.contains("32-bit floats")),
            "moved home, the points lose nothing: {warnings:?}"
        );
        for (k, (xyz, _)) in stream(c.as_mut()).into_iter().enumerate() {
            // The scan's own 0.1 mm quantum, halved by rounding.
            assert_near(xyz, NEAR[k], 0.51e-4, "las");
        }
    }
}

#[test]
fn e57_scans_are_posed_then_moved_in_f64() {
    use ramsplat::synth::e57::{e57_bytes, E57Coords, E57Point, E57Scan};
    // The scan's pose takes it to the UTM-like frame (a translation); the transform brings it
    // back: the pose and the map compose in f64, so nothing of f32's 25 cm spacing remains.
    let local: Vec<E57Point> = NEAR
        .iter()
        .map(|p| {
            // Where TO_LOCAL's inverse puts the point, less the pose's translation.
            let w = PointsTransform::parse(TO_LOCAL)
                .unwrap()
                .inverse()
                .point(*p);
            E57Point {
                xyz: [w[0] - 500_000.0, w[1] - 4_000_000.0, w[2] - 100.0],
                rgb: [1, 2, 3],
                invalid: 0,
                colour_invalid: false,
            }
        })
        .collect();
    let scan = E57Scan {
        name: "station".into(),
        coords: E57Coords::CartesianF64,
        points: local,
        colour: true,
        invalid_states: false,
        pose: Some(([1.0, 0.0, 0.0, 0.0], [500_000.0, 4_000_000.0, 100.0])),
    };
    let mut warnings = Vec::new();
    let path = Path::new("scan.e57");
    let mut c = ramsplat::import::e57::cloud_from_bytes(
        e57_bytes(&[scan]),
        path,
        "scan",
        &moved(),
        &mut warnings,
    )
    .unwrap();
    let got = stream(c.as_mut());
    assert_eq!(got.len(), 2);
    for (k, (xyz, _)) in got.into_iter().enumerate() {
        assert_near(xyz, NEAR[k], 1e-6, "e57");
    }
}

/// Every position of `pack`'s first cloud.
fn positions(pack: &Path) -> Vec<[f32; 3]> {
    packed(pack, 0).into_iter().map(|p| p.0).collect()
}

#[test]
fn a_georeferenced_scan_seeds_a_dataset_through_colmaps_aligner_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (scene, dense) = scene_and_surface(tmp.path());
    // The scene's surfaces, scanned in the UTM-like frame.
    std::fs::write(scene.join("scan.laz"), utm_scan(&dense, true)).unwrap();
    // What `colmap model_aligner --transform_path` writes when it georegisters the model: the
    // map from the model to the reference frame (scale qw qx qy qz tx ty tz), here the inverse
    // of TO_LOCAL: a rotation of −90° about z.
    let h = std::f64::consts::FRAC_1_SQRT_2;
    let sim3 = tmp.path().join("model_to_utm.txt");
    std::fs::write(&sim3, format!("1 {h} 0 0 {} 500000 4000000 100\n", -h)).unwrap();
    let check = PointsTransform::parse(&std::fs::read_to_string(&sim3).unwrap()).unwrap();
    assert_eq!(
        check.point([1.0, 2.0, 3.0]).map(|v| v.round()),
        [500_002.0, 3_999_999.0, 103.0]
    );

    let convert = |pack: &Path, extra: &[&str]| {
        let mut args = vec![
            "convert",
            scene.to_str().unwrap(),
            "-o",
            pack.to_str().unwrap(),
            "--points",
            "scan.laz",
        ];
        args.extend_from_slice(extra);
        gs_pack(&args)
    };

    // Without the transform, no view sees the scan.
    let o = convert(&tmp.path().join("far.pack"), &[]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("none of the points of --points"), "{err}");

    // With the aligner's file, inverted: every point lands on its surface.
    let pack = tmp.path().join("seeded.pack");
    let o = convert(
        &pack,
        &[
            "--points-transform",
            sim3.to_str().unwrap(),
            "--invert-points-transform",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("(inverted): the points are moved by scale 1.000000, rotation 90.000°")
            && err.contains("(100.0 % of a sample in view)")
            && !err.contains("32-bit floats"),
        "{err}"
    );
    let got = positions(&pack);
    assert_eq!(got.len(), dense.len());
    for (k, (xyz, (want, _))) in got.iter().zip(&dense).enumerate() {
        assert_near(*xyz, want.map(f64::from), 0.6e-4, &format!("point {k}"));
    }
    let m = Pack::open(&pack).unwrap().manifest().clone();
    let rows = m.source.points_transform.expect("recorded");
    let want = PointsTransform::parse(TO_LOCAL).unwrap().rows();
    for (r, w) in rows.iter().flatten().zip(want.iter().flatten()) {
        assert!((r - w).abs() < 1e-9, "{rows:?}");
    }
    let o = gs_pack(&["info", pack.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("moved by --points-transform [A | t]"),
        "{}",
        text(&o)
    );

    // A dataset's own points are in its frame already: the option alone is refused.
    let bare = tmp.path().join("bare.pack");
    let o = gs_pack(&[
        "convert",
        scene.to_str().unwrap(),
        "-o",
        bare.to_str().unwrap(),
        "--points-transform",
        sim3.to_str().unwrap(),
    ]);
    assert!(!o.status.success() && !bare.exists(), "{}", text(&o));
    assert!(
        text(&o).contains("give --points FILE, or drop --points-transform"),
        "{}",
        text(&o)
    );
    // A damaged transform is refused naming its file, before anything is written.
    let bad = tmp.path().join("bad.txt");
    std::fs::write(&bad, "1 0 0 0\n0 1 0 0\n0 0 1 0\n5 6 7 1\n").unwrap();
    let o = convert(&bare, &["--points-transform", bad.to_str().unwrap()]);
    assert!(!o.status.success() && !bare.exists(), "{}", text(&o));
    assert!(
        text(&o).contains("bad.txt") && text(&o).contains("transposed"),
        "{}",
        text(&o)
    );
    // Inverting needs a transform.
    let o = convert(&bare, &["--invert-points-transform"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));

    // A scan converted on its own is moved too.
    let alone = tmp.path().join("alone.pack");
    let o = gs_pack(&[
        "convert",
        scene.join("scan.laz").to_str().unwrap(),
        "-o",
        alone.to_str().unwrap(),
        "--points-transform",
        sim3.to_str().unwrap(),
        "--invert-points-transform",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(positions(&alone), got);
}
