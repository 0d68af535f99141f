//! Hostile and careless inputs against the real binaries (issue 11's table): each case asserts
//! the exit code and that the error names the file or record and the remedy, so no silent
//! drop, misleading message or crash can come back.
//!
//! | case | exit | first line (abridged) |
//! |---|---|---|
//! | shard header version byte flipped, `verify` | 3 | `…/shard-00000.gss: header: header checksum A does not match the stored B (its version field reads N …); the pack is damaged, re-create it with gs-pack convert --force` |
//! | shard file deleted, `verify` (`info`: 1) | 3 | `…: shard 0: missing: the manifest lists "shard-00000.gss" (N bytes) but there is no such file; the pack is damaged, …` |
//! | view / shard checksum edited in manifest.json | 3 | `… checksum A (as its … also says) does not match the B in manifest.json; …` |
//! | payload byte flipped | 3 | `…: record at byte N (view …): payload checksum A does not match the stored B; …` |
//! | `gs-render --ply MISSING` | 1 | `gs-render: error: cannot load the model: …/nope.ply: No such file or directory` (cause once) |
//! | `gs-render` camera 100000×100000 (`--camera`, `--cameras`) | 1 | `…/huge.json: a 100000x100000 image (… pixels) is beyond what gs-render renders …; lower width/height and scale fx, fy, cx, cy …` |
//! | `gs-render --pack` on a view named `00000.png` | 0 | writes `00000_00000.png`, not `.png.png` |
//! | JPEG with corrupt scan data | 1 | `…/00002.jpg: JPEG scan data is corrupt ("Bad Huffman Code …"); … or pass --lenient to pack it as decoded` |
//! | the same with `--lenient` | 0 | `warning: …/00002.jpg: JPEG scan data is corrupt (…); packed as decoded (damaged part grey) because of --lenient` |
//! | 1-view dataset, default `--test-every 8` | 1 | `with --test-every 8 the dataset's only view is a test view, leaving none to train on: pass --test-every 0 …` |
//! | 1-view dataset, `--test-every 0` | 1 | `…: the dataset's only view was taken from one camera position (scene extent 0) …` |
//! | `--downscale 0` | 2 | clap: `invalid value '0' for '--downscale <N>'` (`--max-width 0` is documented as full size) |
//! | COLMAP images.txt missing one POINTS2D line and the count comment | 1 | `…/images.txt: line N: expected the 2D-observation line of image 2 …; insert an empty line after it` |
//! | PLY vertex with an all-zero quaternion, `gs-render` | 1 | `…/m.ply: vertex 3: rotation rot_0..rot_3 is all zeros …` |
//! | PLY vertex with log-scales 20 (σ ≈ 5e8), `gs-render` | 0 | drawn over the whole image as float64 draws it (no longer culled in f32) |
//! | PLY vertex with log-scales 60, `gs-render` | 0 | `gs-render: warning: 1 Gaussian(s) of …/m.ply have a log-scale above 30 (… the first is vertex 2); a view where one's projected covariance overflows single precision skips it …` |
//! | `convert --depths`: a depth map missing | 1 | `…/depths/00002.png: view '00002.png' has no depth map (--depths expects one per image, …); run Depth Anything V2 on every image, or drop --depths` |
//! | `convert --depths`: COLMAP without `sparse/0/depth_params.json` | 1 | `…/sparse/0/depth_params.json: no such file: … make it with 3DGS's \`python utils/make_depth_scale.py --base_dir WS --depths_dir DIR\`` |
//! | `convert --depths`: an image without an entry | 1 | `…/depth_params.json: image 4 (00003.png) has no entry "00003" (its depth map is …); every registered image needs one: …` |
//! | `convert --depths`: a non-numeric scale | 1 | `…/depth_params.json: entry "00001": "scale" is "0.5", not a number; regenerate …` |
//! | `convert --depths`: a map of another aspect ratio | 1 | `…/depths/00001.png: the depth map of view '00001.png' is 32x32 but its image … is 48x32; …` |
//! | `convert --depths`: a truncated map | 1 | `…/depths/00004.png: cannot decode the depth map of view '00004.png' (…); …` |
//! | `convert --depths`: a 16-bit RGB map of half size | 0 | packed: the blue channel (OpenCV's channel 0), resampled to the image |
//! | `convert --depths`: a scale 100× the median | 0 | `warning: 1 of 6 views' depth fits in … are unreliable (…): packed without depth, as 3DGS trains them without the depth loss` |
//! | `convert --sfm-depths --depths DIR` | 1 | `--sfm-depths and --depths both give the views an inverse-depth plane, and a pack holds one kind: drop --depths … or drop --sfm-depths …` |
//! | `convert --sfm-depths` of a transforms.json dataset (or a point cloud) | 1 | `…: --sfm-depths needs a COLMAP model, an OpenSfM reconstruction, a Meshroom SfMData file or a Bundler file, whose tracks say which images observe each point; this is a transforms.json (NeRF) dataset, which has no tracks: drop --sfm-depths …` |
//! | `convert --sfm-depths`: COLMAP points3D without tracks | 1 | `…/sparse/0/points3D.txt: the model has no tracks: …; convert the original COLMAP model, or drop --sfm-depths` |
//! | `convert --sfm-depths`: a track naming an unregistered image | 1 | `…/sparse/0/points3D.txt: line N: point P: its track names image 99, which …/images.txt does not register; the model is inconsistent: …` |
//! | `convert` of frames with nerfstudio's `depth_file_path` | 0 | `warning: 6 frames have nerfstudio's "depth_file_path" (metric depth in millimetres); it is not used: --depths DIR takes …` |
//! | PCD binary_compressed cut inside its LZF block, `convert` | 1 | `…/cut.pcd: byte N: the compressed block declares 330 bytes but only 323 follow its sizes; the file is truncated` (before packing starts) |
//! | PCD LZF back-reference before the start of the data | 1 | `…/lzf.pcd: byte N: an LZF back-reference at uncompressed byte 0 reaches back 1 (to byte -1), before the start of the data; the binary_compressed data is damaged: save the cloud again from its source` |
//! | PCD point with an infinite coordinate | 1 | ``…/inf.pcd: line 13: point 1: `x` = inf is not a finite coordinate; PCL marks missing points with NaN, so an infinite one is damage: …`` |
//! | PCD points with NaN coordinates (pixels without a measurement) | 0 | `warning: …/nan.pcd: 5 of 20 points have NaN coordinates (no measurement at those sensor pixels) and are left out` |
//! | a folder holding .ply and .pcd clouds | 1 | `…: the folder holds .ply (1) and .pcd (1) point clouds, so which to pack is unclear; pass --format ply, pcd, las, e57 or obj (only those files are then read)` |
//! | E57 scan with a damaged page | 1 | `…/scan.e57: byte N: scan 0 (station A): page N's checksum is …, its data's …; the E57 file is damaged (copy or export it again)` |
//! | a dataset's image, `points3D.txt`, `cameras.txt`, depth map or `depth_params.json` is a named pipe, `convert` | 1 | `…/images/00002.png: a named pipe, not a regular file; only regular files are read: save the data to a file and give that` (was: the image skipped as missing, the points left out, exit 0) |
//! | `gs-render --bilateral-grids` a named pipe (`--camera`, `--cameras`, `--exposure` read pipes and `/dev/stdin` like files) | 1 | `…/grids.json: a named pipe, not a regular file; …` (was: waited forever) |
//! | a pack's `manifest.json` a named pipe, `verify` / `info` | 1 | `…/manifest.json: a named pipe, not a regular file; …` |
//! | LAS whose header counts more points than it holds | 1 | `…/cut.las: record 18: the header counts 20 points of 34 bytes, but the file holds only 18 of them; it is truncated (copy it again)` |
//! | LAZ chunk table claiming 4 billion chunks | 1 | `…/chunks.laz: byte N: the chunk table lists 4294967295 chunks, more than 40 points in N bytes of compressed data can fill; the LAZ file is damaged (…)` |
//! | LAZ GPS-time data recursing without end (a fuzz find) | 1 | `…/gps.laz: record 359: its compressed data cannot be decoded (its GPS-time data sends the decoder more than 16 MiB deep into recursion); the LAZ file is damaged (…)` |
//!
//! Cases covered elsewhere: `--force` safety, concurrent converts, a destination created
//! mid-run, killed converts, a corrupt PNG and `--test-every 1` (tests/cli.rs); training
//! resume, checkpoints and `-o` holding another run (tests/train_cli.rs).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{mkfifo, output_within_60s};

fn gs_pack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gs-pack"))
        .args(args)
        .output()
        .expect("run gs-pack")
}

fn gs_render(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gs-render"))
        .args(args)
        .output()
        .expect("run gs-render")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A small synthetic COLMAP dataset at `dir` (`extra` goes to `gs-pack synth`).
fn synth(dir: &Path, extra: &[&str]) {
    let mut args = vec![
        "synth",
        "-o",
        s(dir),
        "--views",
        "6",
        "--width",
        "48",
        "--height",
        "32",
        "--points",
        "100",
        "--seed",
        "5",
    ];
    args.extend_from_slice(extra);
    let o = gs_pack(&args);
    assert!(o.status.success(), "{}", text(&o));
}

/// A verified pack of a small synthetic scene at `tmp/scene.pack`.
fn small_pack(tmp: &Path) -> PathBuf {
    let scene = tmp.join("scene");
    synth(&scene, &[]);
    let pack = tmp.join("scene.pack");
    let o = gs_pack(&["convert", s(&scene), "-o", s(&pack), "--codec", "raw"]);
    assert!(o.status.success(), "{}", text(&o));
    pack
}

fn manifest(pack: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(pack.join("manifest.json")).unwrap()).unwrap()
}

fn write_manifest(pack: &Path, m: &serde_json::Value) {
    std::fs::write(pack.join("manifest.json"), m.to_string()).unwrap();
}

fn shard_path(pack: &Path) -> PathBuf {
    pack.join(manifest(pack)["shards"][0]["file"].as_str().unwrap())
}

fn verify(pack: &Path) -> Output {
    gs_pack(&["verify", s(pack)])
}

#[test]
fn a_flipped_version_byte_in_a_shard_header_is_damage_not_a_newer_format() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = small_pack(tmp.path());
    let shard = shard_path(&pack);
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[10] ^= 0xAA; // inside the u32 version at offset 8
    std::fs::write(&shard, &bytes).unwrap();
    let o = verify(&pack);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let err = stderr(&o);
    let name = shard.file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name), "names the shard: {err}");
    assert!(err.contains("header checksum"), "{err}");
    assert!(
        err.contains("gs-pack convert --force"),
        "gives the remedy: {err}"
    );
    assert!(
        !err.contains("upgrade"),
        "not a 'newer version' message: {err}"
    );
}

#[test]
fn a_missing_shard_exits_3_naming_it_once_with_advice() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = small_pack(tmp.path());
    let shard = shard_path(&pack);
    std::fs::remove_file(&shard).unwrap();
    let o = verify(&pack);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let err = stderr(&o);
    assert!(err.contains("missing"), "{err}");
    assert!(err.contains("gs-pack convert --force"), "{err}");
    assert_eq!(err.lines().count(), 1, "one error line: {err}");
    // Other commands reading the pack fail on it too (exit 1), with the same message.
    let o = gs_pack(&["info", s(&pack)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stderr(&o).contains("missing"), "{}", text(&o));
}

/// A shard replaced by something that is not a file is named for what it is, as damage (exit 3
/// from verify, 1 from the other commands) with the remedy; a pipe is refused without being
/// opened (opening one would wait for a writer forever).
#[test]
fn a_shard_that_is_not_a_file_is_named_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = small_pack(tmp.path());
    let shard = shard_path(&pack);
    type Replace = fn(&Path);
    let cases: [(Replace, &str); 3] = [
        (|p| std::fs::create_dir(p).unwrap(), "a directory, where"),
        (
            |p| std::os::unix::fs::symlink("/dev/null", p).unwrap(),
            "a device, where",
        ),
        (mkfifo, "a named pipe, where"),
    ];
    for (replace, want) in cases {
        let _ = std::fs::remove_file(&shard);
        let _ = std::fs::remove_dir(&shard);
        replace(&shard);
        let o = verify(&pack);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{err}");
        assert!(
            err.contains(want) && err.contains("gs-pack convert --force"),
            "{err}"
        );
        let o = gs_pack(&["info", s(&pack)]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(stderr(&o).contains(want), "{}", text(&o));
    }
}

/// A model path that is a directory or a named pipe is refused for what it is, at once: the
/// pipe is not opened (that would wait for a writer forever). Both `gs-render --ply` and
/// `gs-train --init` read models through the same loader.
#[test]
fn a_model_that_is_not_a_file_is_refused_without_opening_it() {
    let tmp = tempfile::tempdir().unwrap();
    let cam = tmp.path().join("cam.json");
    std::fs::write(&cam, camera_json(16, 12).to_string()).unwrap();
    let dir_model = tmp.path().join("dir.ply");
    std::fs::create_dir(&dir_model).unwrap();
    let pipe_model = tmp.path().join("pipe.ply");
    mkfifo(&pipe_model);
    for (model, want) in [
        (&dir_model, "a directory, not a model file"),
        (&pipe_model, "a named pipe, not a model file"),
    ] {
        let o = output_within_60s(
            Command::new(env!("CARGO_BIN_EXE_gs-render"))
                .args(["--ply", s(model), "--camera", s(&cam), "-o"])
                .arg(tmp.path().join("x.png")),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(want) && err.contains(s(model)), "{err}");
    }
}

#[test]
fn checksum_mismatches_show_both_values() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = small_pack(tmp.path());
    let original = manifest(&pack);
    let zero = "0000000000000000";

    // A view's checksum in the manifest edited: both the record's and the manifest's value.
    let mut m = original.clone();
    let real = m["views"][0]["record"]["checksum"]
        .as_str()
        .unwrap()
        .to_owned();
    m["views"][0]["record"]["checksum"] = zero.into();
    write_manifest(&pack, &m);
    let o = verify(&pack);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let err = stderr(&o);
    assert!(err.contains(&real) && err.contains(zero), "{err}");

    // The shard checksum in the manifest edited.
    let mut m = original.clone();
    let real = m["shards"][0]["checksum"].as_str().unwrap().to_owned();
    m["shards"][0]["checksum"] = zero.into();
    write_manifest(&pack, &m);
    let o = verify(&pack);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let err = stderr(&o);
    assert!(err.contains(&real) && err.contains(zero), "{err}");
    assert!(err.contains("manifest.json"), "{err}");

    // A payload byte flipped: the computed and the stored value differ and both are shown.
    write_manifest(&pack, &original);
    let shard = shard_path(&pack);
    let mut bytes = std::fs::read(&shard).unwrap();
    let offset = original["views"][1]["record"]["offset"].as_u64().unwrap() as usize;
    bytes[offset + 64 + 10] ^= 1;
    std::fs::write(&shard, &bytes).unwrap();
    let o = verify(&pack);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let err = stderr(&o);
    let stored = original["views"][1]["record"]["checksum"].as_str().unwrap();
    assert!(err.contains(&format!("the stored {stored}")), "{err}");
    let computed = err
        .split("payload checksum ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .unwrap_or_default();
    assert!(
        computed.len() == 16 && computed != stored,
        "computed value shown and different: {err}"
    );
}

#[test]
fn an_os_error_is_printed_once() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope.ply");
    let cam = tmp.path().join("cam.json");
    std::fs::write(&cam, camera_json(8, 8).to_string()).unwrap();
    let o = gs_render(&[
        "--ply",
        s(&missing),
        "--camera",
        s(&cam),
        "-o",
        s(&tmp.path().join("x.png")),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(err.contains("nope.ply"), "{err}");
    assert_eq!(
        err.matches("No such file or directory").count(),
        1,
        "the cause once: {err}"
    );
}

fn camera_json(width: u64, height: u64) -> serde_json::Value {
    serde_json::json!({
        "width": width, "height": height,
        "fx": 60.0, "fy": 60.0, "cx": width as f64 / 2.0, "cy": height as f64 / 2.0,
        "world_to_camera": [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0],
                            [0.0, 0.0, 1.0, 3.0], [0.0, 0.0, 0.0, 1.0]],
    })
}

/// A 3DGS PLY with a few Gaussians in front of [`camera_json`]'s camera.
fn small_model(path: &Path) {
    use ramsplat::scene::gaussians::{sh_coeffs, Gaussians};
    let mut g = Gaussians::zeros(5, 0);
    for i in 0..5 {
        let x = i as f32 * 0.2 - 0.4;
        g.means[i] = [x, 0.0, 0.0];
        g.log_scales[i] = [-2.0; 3];
        g.rotations[i] = [0.0, 0.0, 0.0, 1.0];
        g.logit_opacities[i] = 1.0;
        for c in 0..sh_coeffs(0) {
            g.sh[i * sh_coeffs(0) + c] = [0.5, 0.2, -0.3];
        }
    }
    ramsplat::export::ply::save(
        path,
        &g,
        ramsplat::export::ply::PlyEncoding::BinaryLittleEndian,
    )
    .unwrap();
}

#[test]
fn gs_render_refuses_an_absurd_image_size_before_allocating() {
    let tmp = tempfile::tempdir().unwrap();
    let ply = tmp.path().join("m.ply");
    small_model(&ply);
    let cam = tmp.path().join("huge.json");
    std::fs::write(&cam, camera_json(100_000, 100_000).to_string()).unwrap();
    let out = tmp.path().join("x.png");
    let o = gs_render(&["--ply", s(&ply), "--camera", s(&cam), "-o", s(&out)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("huge.json") && err.contains("100000x100000"),
        "{err}"
    );
    assert!(
        err.contains("scale fx, fy, cx, cy"),
        "gives the remedy: {err}"
    );
    assert!(
        !err.contains("memory allocation") && !err.contains("backtrace"),
        "{err}"
    );
    assert!(!out.exists());

    // The same through a 3DGS cameras.json list: refused before anything is written.
    let list = tmp.path().join("cameras.json");
    let entry = |id: u64, w: u64| {
        serde_json::json!({"id": id, "img_name": format!("v{id}"), "width": w, "height": w,
            "position": [0.0, 0.0, -3.0],
            "rotation": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
            "fx": 60.0, "fy": 60.0})
    };
    std::fs::write(
        &list,
        serde_json::json!([entry(0, 16), entry(1, 100_000)]).to_string(),
    )
    .unwrap();
    let dir = tmp.path().join("renders");
    let o = gs_render(&["--ply", s(&ply), "--cameras", s(&list), "-o", s(&dir)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("cameras.json") && err.contains("camera 1") && err.contains("100000x100000"),
        "{err}"
    );
    assert!(!dir.exists(), "nothing written");
}

#[test]
fn gs_render_pack_mode_names_files_without_a_double_extension() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = small_pack(tmp.path());
    let ply = tmp.path().join("m.ply");
    small_model(&ply);
    let out = tmp.path().join("eval");
    let o = gs_render(&[
        "--ply",
        s(&ply),
        "--pack",
        s(&pack),
        "--split",
        "all",
        "-o",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 7, "{names:?}");
    assert_eq!(names[0], "00000_00000.png", "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| !n.contains(".png.png") && !n.starts_with('.')),
        "no double extension, no temporary file left: {names:?}"
    );
    assert!(names.contains(&"metrics.json".to_owned()));
}

/// No output of gs-render replaces one of its inputs or writes into a pack: `-o` naming the
/// model beside `--camera` used to replace the model with a PNG. Each refusal names both
/// paths and leaves every input as it was (compared byte for byte, the pack by its listing).
#[test]
fn gs_render_never_writes_over_its_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = small_pack(tmp.path());
    let ply = tmp.path().join("m.ply");
    small_model(&ply);
    let cam = tmp.path().join("cam.json");
    std::fs::write(&cam, camera_json(16, 12).to_string()).unwrap();
    let (model, camera) = (std::fs::read(&ply).unwrap(), std::fs::read(&cam).unwrap());
    let listing = || {
        let mut names: Vec<_> = std::fs::read_dir(&pack)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let shards = listing();
    // The model spelled another way: paths are compared as the file system resolves them.
    let spelled = tmp.path().join(".").join("m.ply");
    let inside = pack.join("renders");
    let cases: [(&[&str], &str); 6] = [
        (
            &["--camera", s(&cam), "-o", s(&spelled)],
            "is the --ply file",
        ),
        (
            &["--camera", s(&cam), "-o", s(&cam)],
            "is the --camera file",
        ),
        (&["--convert", s(&spelled)], "is the --ply file"),
        (&["--pack", s(&pack), "-o", s(&pack)], "is the pack"),
        (
            &["--pack", s(&pack), "-o", s(&inside)],
            "lies inside the pack",
        ),
        (
            &["--pack", s(&pack), "-o", s(&ply)],
            "is a file; -o names the directory",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["--ply", s(&ply)];
        args.extend_from_slice(extra);
        let o = gs_render(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert_eq!(std::fs::read(&ply).unwrap(), model, "{extra:?}");
        assert_eq!(std::fs::read(&cam).unwrap(), camera, "{extra:?}");
        assert_eq!(listing(), shards, "{extra:?}");
    }
    // Another name is written as before.
    let png = tmp.path().join("view.png");
    let o = gs_render(&["--ply", s(&ply), "--camera", s(&cam), "-o", s(&png)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(png.exists());
}

/// Overwrites 32 bytes in the middle of a JPEG's scan data with all-one bits (no valid Huffman
/// code there), keeping its end-of-image marker: the file looks complete (not truncated) but
/// its entropy-coded data is damaged, as after a bad copy or a flipped disk sector.
/// A dataset file that is a named pipe (or anything else that is not a regular file) is named
/// for what it is, at once: not read (a pipe would wait for a writer forever), not taken for a
/// missing file (an image used to be skipped as missing and a points file to leave the pack
/// without points, both with exit 0), and no pack is written.
#[test]
fn dataset_files_that_are_pipes_are_named_not_read_or_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let pipe = "a named pipe, not a regular file";
    for (i, rel) in [
        "images/00002.png",
        "sparse/0/points3D.txt",
        "sparse/0/cameras.txt",
        "sparse/0/depth_params.json",
        "depths/00001.png",
    ]
    .into_iter()
    .enumerate()
    {
        let scene = tmp.path().join(format!("scene{i}"));
        synth(&scene, &["--depths"]);
        std::fs::remove_file(scene.join(rel)).unwrap();
        mkfifo(&scene.join(rel));
        let out = tmp.path().join(format!("out{i}.pack"));
        let o = output_within_60s(Command::new(env!("CARGO_BIN_EXE_gs-pack")).args([
            "convert",
            s(&scene),
            "-o",
            s(&out),
            "--depths",
            "depths",
        ]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{rel}: {}", text(&o));
        assert!(err.contains(&format!("{rel}: {pipe}")), "{rel}: {err}");
        assert!(!out.exists(), "{rel}: a pack was written");
    }
    // A dataset given as a file that is a pipe.
    let json = tmp.path().join("transforms.json");
    mkfifo(&json);
    let o = output_within_60s(Command::new(env!("CARGO_BIN_EXE_gs-pack")).args([
        "convert",
        s(&json),
        "-o",
        s(&tmp.path().join("json.pack")),
    ]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("transforms.json: a named pipe, not a dataset folder or file"),
        "{}",
        text(&o)
    );
}

/// `gs-render`'s camera files may come from a stream, as a shell makes them: `--camera
/// /dev/stdin` and a named pipe with a writer (`--cameras <(…)`) read like files. A directory
/// there is named for what it is. A pack's manifest that is a pipe is refused at once (the
/// checkpoint pointer and checkpoint of `gs-train --resume`: tests/train_cli.rs).
#[test]
fn gs_render_reads_cameras_from_streams_and_refuses_a_pipe_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let ply = tmp.path().join("m.ply");
    small_model(&ply);
    let camera = camera_json(16, 12).to_string();
    let render = |args: &[&str], stdin: Option<&str>| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gs-render"))
            .args(["--ply", s(&ply), "--backend", "cpu"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            std::io::Write::write_all(&mut input, text.as_bytes()).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    };
    let png = tmp.path().join("x.png");
    let o = render(&["--camera", "/dev/stdin", "-o", s(&png)], Some(&camera));
    assert!(o.status.success(), "{}", text(&o));
    assert!(png.is_file());

    let pipe = tmp.path().join("cameras.json");
    mkfifo(&pipe);
    let list = serde_json::json!([{"id": 0, "img_name": "a", "width": 16, "height": 12,
        "position": [0.0, 0.0, -3.0],
        "rotation": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
        "fx": 20.0, "fy": 20.0}])
    .to_string();
    let writer = {
        let pipe = pipe.clone();
        // Opening a pipe for writing waits for its reader: gs-render, started below.
        std::thread::spawn(move || std::fs::write(&pipe, list).unwrap())
    };
    let out = tmp.path().join("out");
    let o = render(&["--cameras", s(&pipe), "-o", s(&out)], None);
    // Had gs-render not opened the pipe, the writer would still wait: a reader of our own
    // lets it finish, so a failure below is reported instead of hanging the test.
    {
        use std::os::unix::fs::OpenOptionsExt;
        let _unblock = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&pipe);
        writer.join().unwrap();
    }
    assert!(o.status.success(), "{}", text(&o));
    let written: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");

    let o = render(&["--camera", s(tmp.path()), "-o", s(&png)], None);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("a directory, not a regular file"),
        "{}",
        text(&o)
    );

    let pack = small_pack(tmp.path());
    let manifest = pack.join("manifest.json");
    std::fs::remove_file(&manifest).unwrap();
    mkfifo(&manifest);
    for cmd in ["verify", "info"] {
        let o =
            output_within_60s(Command::new(env!("CARGO_BIN_EXE_gs-pack")).args([cmd, s(&pack)]));
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", text(&o));
        assert!(
            stderr(&o).contains("manifest.json: a named pipe, not a regular file"),
            "{cmd}: {}",
            text(&o)
        );
    }
}

fn corrupt_scan(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let sos = bytes
        .windows(2)
        .position(|w| w == [0xFF, 0xDA])
        .expect("a start of scan");
    let mid = sos + (bytes.len() - sos) / 2;
    for k in 0..16 {
        bytes[mid + 2 * k..mid + 2 * k + 2].copy_from_slice(&[0xFF, 0x00]);
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_jpeg_with_corrupt_scan_data_fails_the_convert_unless_lenient() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    synth(&scene, &["--image-format", "jpg"]);
    corrupt_scan(&scene.join("images/00002.jpg"));
    let pack = tmp.path().join("scene.pack");
    let o = gs_pack(&["convert", s(&scene), "-o", s(&pack)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(err.contains("00002.jpg"), "names the file: {err}");
    assert!(err.contains("scan data is corrupt"), "{err}");
    assert!(err.contains("--lenient"), "names the opt-in: {err}");
    assert!(!pack.exists());

    let o = gs_pack(&["convert", s(&scene), "-o", s(&pack), "--lenient"]);
    assert!(o.status.success(), "{}", text(&o));
    let err = stderr(&o);
    let warning = err
        .lines()
        .find(|l| l.starts_with("warning:") && l.contains("00002.jpg"))
        .unwrap_or_else(|| panic!("a warning names the file: {err}"));
    assert!(warning.contains("--lenient"), "{warning}");
    assert_eq!(manifest(&pack)["views"].as_array().unwrap().len(), 6);
    // The intact JPEGs of the same dataset pack without any warning.
    std::fs::remove_file(scene.join("images/00002.jpg")).unwrap();
    let pack2 = tmp.path().join("rest.pack");
    let o = gs_pack(&["convert", s(&scene), "-o", s(&pack2)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!stderr(&o).contains("corrupt"), "{}", text(&o));
}

#[test]
fn packs_with_nothing_to_train_on_are_refused_with_the_remedy() {
    let tmp = tempfile::tempdir().unwrap();
    let one = tmp.path().join("one");
    let o = gs_pack(&[
        "synth",
        "-o",
        s(&one),
        "--views",
        "1",
        "--width",
        "32",
        "--height",
        "24",
        "--points",
        "20",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let pack = tmp.path().join("one.pack");
    // Default --test-every 8 makes the only view a test view.
    let o = gs_pack(&["convert", s(&one), "-o", s(&pack)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stderr(&o).contains("--test-every 0"), "{}", text(&o));
    // With no test views, one view is still one camera position: no parallax.
    let o = gs_pack(&["convert", s(&one), "-o", s(&pack), "--test-every", "0"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("one camera position") && err.contains("at least two"),
        "{err}"
    );
    assert!(!pack.exists());
}

#[test]
fn meaningless_resize_values_are_refused_or_documented() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    synth(&scene, &[]);
    let pack = tmp.path().join("p");
    let o = gs_pack(&["convert", s(&scene), "-o", s(&pack), "--downscale", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(stderr(&o).contains("--downscale"), "{}", text(&o));
    // --max-width 0 is documented as "keep every view at full size", and does that.
    let o = gs_pack(&["convert", "--help"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("0 keeps"));
    let o = gs_pack(&["convert", s(&scene), "-o", s(&pack), "--max-width", "0"]);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&pack);
    assert_eq!(m["views"][0]["camera"]["width"], 48, "{m}");
}

#[test]
fn a_colmap_image_missing_its_observation_line_is_named_not_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    synth(&scene, &[]);
    let images = scene.join("sparse/0/images.txt");
    let listed = std::fs::read_to_string(&images).unwrap();
    // Drop the count comment and the (empty) observation line of image 2.
    let mut out = Vec::new();
    let mut skip_next = false;
    for line in listed.lines() {
        if line.starts_with("# Number of images") {
            continue;
        }
        if skip_next {
            skip_next = false;
            continue;
        }
        skip_next = line.starts_with("2 ");
        out.push(line);
    }
    std::fs::write(&images, out.join("\n") + "\n").unwrap();
    let pack = tmp.path().join("p");
    let o = gs_pack(&["convert", s(&scene), "-o", s(&pack)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("images.txt") && err.contains("line ") && err.contains("insert an empty line"),
        "{err}"
    );
    assert!(!pack.exists());
}

#[test]
fn gs_render_refuses_a_zero_quaternion_naming_the_vertex() {
    let tmp = tempfile::tempdir().unwrap();
    let ply = tmp.path().join("m.ply");
    small_model(&ply);
    set_floats(&ply, 3, "rot_0", &[0.0; 4]);
    let cam = tmp.path().join("cam.json");
    std::fs::write(&cam, camera_json(16, 16).to_string()).unwrap();
    let out = tmp.path().join("x.png");
    let o = gs_render(&["--ply", s(&ply), "--camera", s(&cam), "-o", s(&out)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("m.ply") && err.contains("vertex 3") && err.contains("all zeros"),
        "{err}"
    );
    assert!(!out.exists());
}

/// Overwrites consecutive float properties of vertex `v`, from `first` on, in a float-only
/// binary 3DGS PLY (as `small_model` writes).
fn set_floats(ply: &Path, v: usize, first: &str, values: &[f32]) {
    let mut bytes = std::fs::read(ply).unwrap();
    let end = b"end_header\n";
    let body = bytes.windows(end.len()).position(|w| w == end).unwrap() + end.len();
    let header = String::from_utf8_lossy(&bytes[..body]).into_owned();
    let props: Vec<&str> = header
        .lines()
        .filter_map(|l| l.strip_prefix("property float "))
        .collect();
    let at = props.iter().position(|&p| p == first).unwrap();
    for (k, value) in values.iter().enumerate() {
        let o = body + (v * props.len() + at + k) * 4;
        bytes[o..o + 4].copy_from_slice(&value.to_le_bytes());
    }
    std::fs::write(ply, &bytes).unwrap();
}

#[test]
fn gs_render_draws_a_huge_gaussian_and_reports_one_beyond_single_precision() {
    let tmp = tempfile::tempdir().unwrap();
    let cam = tmp.path().join("cam.json");
    std::fs::write(&cam, camera_json(16, 16).to_string()).unwrap();
    let render = |log_scale: Option<f32>| {
        let ply = tmp.path().join("m.ply");
        small_model(&ply);
        if let Some(v) = log_scale {
            set_floats(&ply, 2, "scale_0", &[v; 3]);
        }
        let out = tmp.path().join("x.png");
        let o = gs_render(&["--ply", s(&ply), "--camera", s(&cam), "-o", s(&out)]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        (image::open(&out).unwrap().to_rgb8().into_raw(), stderr(&o))
    };
    let (plain, _) = render(None);
    // Log-scales of 20 seen from 3 units through f = 60: Σ2d ≈ 1e20 px², a·c overflows f32.
    // The splat covers every pixel with opacity sigmoid(1) (float64 draws it so).
    let (huge, err) = render(Some(20.0));
    assert!(!err.contains("warning"), "{err}");
    let corners = [0usize, 15, 16 * 15, 16 * 16 - 1];
    for p in corners {
        assert_ne!(plain[p * 3..p * 3 + 3], huge[p * 3..p * 3 + 3], "pixel {p}");
    }
    // Log-scales of 60: Σ itself overflows f32; reported, not silently dropped.
    let (beyond, err) = render(Some(60.0));
    assert!(
        err.contains("warning: 1 Gaussian(s)") && err.contains("vertex 2") && err.contains("m.ply"),
        "{err}"
    );
    assert_eq!(beyond.len(), plain.len());
}

/// A 16-bit PNG of `w × h` pixels of `channels` (1 grey, 3 RGB) from `f(x, y, channel)`.
fn png16(path: &Path, w: u32, h: u32, channels: u32, f: impl Fn(u32, u32, u32) -> u16) {
    let values: Vec<u16> = (0..h)
        .flat_map(|y| (0..w).flat_map(move |x| (0..channels).map(move |c| (x, y, c))))
        .map(|(x, y, c)| f(x, y, c))
        .collect();
    let img = if channels == 1 {
        image::DynamicImage::ImageLuma16(image::ImageBuffer::from_raw(w, h, values).unwrap())
    } else {
        image::DynamicImage::ImageRgb16(image::ImageBuffer::from_raw(w, h, values).unwrap())
    };
    img.save(path).unwrap();
}

/// `gs-pack convert --depths`: every broken depth input is refused naming the file (and the
/// view or entry) and the remedy, and leaves no pack; a 16-bit colour map is read as 3DGS
/// reads it (OpenCV's channel 0, blue); an unreliable fit packs its view without depth with
/// a one-line note; nerfstudio's metric `depth_file_path` is noted, never read.
#[test]
fn broken_depth_inputs_are_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = tmp.path().join("clean");
    synth(&clean, &["--depths"]);
    let copy = |name: &str| {
        let to = tmp.path().join(name);
        for e in walk(&clean) {
            let rel = e.strip_prefix(&clean).unwrap();
            std::fs::create_dir_all(to.join(rel).parent().unwrap()).unwrap();
            std::fs::copy(&e, to.join(rel)).unwrap();
        }
        to
    };
    let convert = |ds: &Path, extra: &[&str]| {
        let pack = tmp.path().join("out.pack");
        let _ = std::fs::remove_dir_all(&pack);
        let mut args = vec!["convert", s(ds), "-o", s(&pack), "--depths", "depths"];
        args.extend_from_slice(extra);
        (gs_pack(&args), pack)
    };
    let refused = |ds: &Path, wants: &[&str]| {
        let (o, pack) = convert(ds, &[]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let e = stderr(&o);
        for w in wants {
            assert!(e.contains(w), "wanted {w:?} in:\n{e}");
        }
        assert!(!pack.exists());
    };

    // The clean dataset packs every view with depth; info counts them.
    let (o, pack) = convert(&clean, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let info: serde_json::Value =
        serde_json::from_slice(&gs_pack(&["info", s(&pack), "--json"]).stdout).unwrap();
    assert_eq!(info["depth_views"], 6);
    let human = String::from_utf8_lossy(&gs_pack(&["info", s(&pack)]).stdout).into_owned();
    assert!(human.contains("6 with an inverse-depth map"), "{human}");
    // Without --depths nothing changes: no depth plane.
    let plain = tmp.path().join("plain.pack");
    assert!(gs_pack(&["convert", s(&clean), "-o", s(&plain)])
        .status
        .success());
    assert!(!std::fs::read_to_string(plain.join("manifest.json"))
        .unwrap()
        .contains("\"depth\""));

    // A missing map: the view and the file expected.
    let ds = copy("no-map");
    std::fs::remove_file(ds.join("depths/00002.png")).unwrap();
    refused(
        &ds,
        &["depths/00002.png", "view '00002.png' has no depth map"],
    );

    // No depth_params.json beside the model: how to make it.
    let ds = copy("no-params");
    std::fs::remove_file(ds.join("sparse/0/depth_params.json")).unwrap();
    refused(
        &ds,
        &[
            "sparse/0/depth_params.json",
            "utils/make_depth_scale.py --base_dir",
        ],
    );

    // An image without an entry.
    let ds = copy("no-entry");
    let p = ds.join("sparse/0/depth_params.json");
    let mut params: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    params.remove("00003");
    std::fs::write(&p, serde_json::to_string(&params).unwrap()).unwrap();
    refused(
        &ds,
        &["depth_params.json", "(00003.png) has no entry \"00003\""],
    );

    // A non-numeric scale: the file and the entry.
    let ds = copy("text-scale");
    let p = ds.join("sparse/0/depth_params.json");
    let mut params: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    params["00001"]["scale"] = "0.5".into();
    std::fs::write(&p, serde_json::to_string(&params).unwrap()).unwrap();
    refused(
        &ds,
        &[
            "depth_params.json",
            "entry \"00001\": \"scale\" is \"0.5\", not a number",
        ],
    );

    // Another aspect ratio: the file, the view and both sizes.
    let ds = copy("aspect");
    png16(&ds.join("depths/00001.png"), 32, 32, 1, |_, _, _| 7);
    refused(
        &ds,
        &["depths/00001.png", "view '00001.png' is 32x32", "48x32"],
    );

    // A corrupt PNG: the file and the view.
    let ds = copy("corrupt");
    let p = ds.join("depths/00004.png");
    let mut bytes = std::fs::read(&p).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&p, bytes).unwrap();
    refused(
        &ds,
        &[
            "depths/00004.png",
            "cannot decode the depth map of view '00004.png'",
        ],
    );

    // A 16-bit RGB map of half the size: accepted; its blue channel is the value, resampled
    // to the image (a constant stays exact).
    let ds = copy("rgb16");
    png16(&ds.join("depths/00000.png"), 24, 16, 3, |_, _, c| {
        [1, 2, 4321][c as usize]
    });
    let (o, pack) = convert(&ds, &["--codec", "raw", "--test-every", "0"]);
    assert!(o.status.success(), "{}", text(&o));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(pack.join("manifest.json")).unwrap()).unwrap();
    let v = &m["views"][0];
    let (w, h) = (
        v["camera"]["width"].as_u64().unwrap() as usize,
        v["camera"]["height"].as_u64().unwrap() as usize,
    );
    let offset = v["record"]["offset"].as_u64().unwrap() as usize;
    let shard = std::fs::read(pack.join("shard-00000.gss")).unwrap();
    let plane = &shard[offset + 64 + w * h * 3..offset + 64 + w * h * 5];
    assert!(plane
        .chunks_exact(2)
        .all(|b| u16::from_le_bytes([b[0], b[1]]) == 4321));

    // An unreliable fit (100× the median scale): the view packs without depth, one note.
    let ds = copy("unreliable");
    let p = ds.join("sparse/0/depth_params.json");
    let mut params: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let s5 = params["00005"]["scale"].as_f64().unwrap();
    params["00005"]["scale"] = (s5 * 100.0).into();
    std::fs::write(&p, serde_json::to_string(&params).unwrap()).unwrap();
    let (o, pack) = convert(&ds, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let e = stderr(&o);
    assert_eq!(e.matches("depth fits").count(), 1, "{e}");
    assert!(e.contains("1 of 6 views' depth fits"), "{e}");
    let info: serde_json::Value =
        serde_json::from_slice(&gs_pack(&["info", s(&pack), "--json"]).stdout).unwrap();
    assert_eq!(info["depth_views"], 5);

    // --depths naming no folder.
    let nope = tmp.path().join("nope.pack");
    let o = gs_pack(&["convert", s(&clean), "-o", s(&nope), "--depths", "nope"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("--depths nope: no such folder"),
        "{}",
        text(&o)
    );

    // nerfstudio's metric depth_file_path: noted, never read.
    let nerf = tmp.path().join("nerf");
    synth(&nerf, &["--format", "nerf"]);
    let p = nerf.join("transforms.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    for f in doc["frames"].as_array_mut().unwrap() {
        f["depth_file_path"] = "depth/none.png".into();
    }
    std::fs::write(&p, doc.to_string()).unwrap();
    let pack = tmp.path().join("nerf.pack");
    let o = gs_pack(&["convert", s(&nerf), "-o", s(&pack)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains("6 frames have nerfstudio's \"depth_file_path\" (metric depth in millimetres); it is not used"),
        "{}",
        text(&o)
    );
}

/// `gs-pack convert --sfm-depths`: every input it cannot use is refused before a pack is
/// written, naming the file (and the point and image) and the remedy.
#[test]
fn sfm_depths_refusals_name_the_file_and_the_remedy() {
    let tmp = tempfile::tempdir().unwrap();
    let refused = |input: &Path, extra: &[&str], wants: &[&str]| {
        let pack = tmp.path().join("out.pack");
        let mut args = vec!["convert", s(input), "-o", s(&pack), "--sfm-depths"];
        args.extend_from_slice(extra);
        let o = gs_pack(&args);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let e = stderr(&o);
        for w in wants {
            assert!(e.contains(w), "wanted {w:?} in:\n{e}");
        }
        assert!(!pack.exists());
    };
    // One kind of depth per pack.
    let colmap = tmp.path().join("colmap");
    synth(&colmap, &["--depths", "--tracks"]);
    refused(
        &colmap,
        &["--depths", "depths"],
        &[
            "a pack holds one kind",
            "drop --depths",
            "drop --sfm-depths",
        ],
    );
    // Datasets without tracks: transforms.json, a point cloud.
    let nerf = tmp.path().join("nerf");
    synth(&nerf, &["--format", "nerf"]);
    refused(
        &nerf,
        &[],
        &[
            "--sfm-depths needs a COLMAP model, an OpenSfM reconstruction, a Meshroom SfMData file or a Bundler file",
            "a transforms.json (NeRF) dataset, which has no tracks",
            "drop --sfm-depths",
        ],
    );
    refused(
        &nerf.join("points3d.ply"),
        &[],
        &["points3d.ply", "this is a point cloud, which has no tracks"],
    );
    // A model whose points have no track elements: each point line cut after its error.
    let points = colmap.join("sparse/0/points3D.txt");
    let original = std::fs::read_to_string(&points).unwrap();
    let cut: String = original
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                format!("{l}\n")
            } else {
                let f: Vec<&str> = l.split_whitespace().take(8).collect();
                format!("{}\n", f.join(" "))
            }
        })
        .collect();
    std::fs::write(&points, cut).unwrap();
    refused(
        &colmap,
        &[],
        &[
            "sparse/0/points3D.txt",
            "the model has no tracks",
            "drop --sfm-depths",
        ],
    );
    // A track naming image 99, which images.txt does not register.
    let (k, line) = original
        .lines()
        .enumerate()
        .find(|(_, l)| !l.starts_with('#') && l.split_whitespace().count() > 8)
        .unwrap();
    let mut f: Vec<&str> = line.split_whitespace().collect();
    let id = f[0].to_owned();
    f[8] = "99";
    let edited: Vec<String> = original
        .lines()
        .enumerate()
        .map(|(j, l)| if j == k { f.join(" ") } else { l.to_owned() })
        .collect();
    std::fs::write(&points, edited.join("\n") + "\n").unwrap();
    refused(
        &colmap,
        &[],
        &[
            &format!(
                "sparse/0/points3D.txt: line {}: point {id}: its track names image 99",
                k + 1
            ),
            "images.txt does not register",
            "the model is inconsistent",
        ],
    );
    // The original model converts.
    std::fs::write(&points, original).unwrap();
    let pack = tmp.path().join("ok.pack");
    let o = gs_pack(&["convert", s(&colmap), "-o", s(&pack), "--sfm-depths"]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// A PCD of `FIELDS x y z rgb` (rgb `U 4`) holding `points`, in `kind` (`ascii`, `binary` or
/// `binary_compressed`, whose LZF block is literal runs only).
fn pcd(kind: &str, points: &[[f32; 3]]) -> Vec<u8> {
    let n = points.len();
    let mut out = format!(
        "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS x y z rgb\nSIZE 4 4 4 4\nTYPE F F F U\nCOUNT 1 1 1 1\nWIDTH {n}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA {kind}\n"
    )
    .into_bytes();
    let rgb = 0x00FF_8040u32;
    match kind {
        "ascii" => {
            for p in points {
                out.extend(format!("{} {} {} {rgb}\n", p[0], p[1], p[2]).bytes());
            }
        }
        "binary" => {
            for p in points {
                p.iter().for_each(|v| out.extend(v.to_le_bytes()));
                out.extend(rgb.to_le_bytes());
            }
        }
        _ => {
            let mut data = Vec::new();
            for k in 0..3 {
                points.iter().for_each(|p| data.extend(p[k].to_le_bytes()));
            }
            points.iter().for_each(|_| data.extend(rgb.to_le_bytes()));
            let mut block = Vec::new();
            for run in data.chunks(32) {
                block.push(run.len() as u8 - 1);
                block.extend_from_slice(run);
            }
            out.extend((block.len() as u32).to_le_bytes());
            out.extend((data.len() as u32).to_le_bytes());
            out.extend(block);
        }
    }
    out
}

#[test]
fn damaged_pcd_clouds_are_refused_naming_the_file_and_the_place() {
    let tmp = tempfile::tempdir().unwrap();
    let pts: Vec<[f32; 3]> = (0..20).map(|i| [i as f32, 0.5, 1.0 + i as f32]).collect();
    let convert = |name: &str, bytes: &[u8]| {
        let path = tmp.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let pack = tmp.path().join(format!("{name}.pack"));
        let o = gs_pack(&["convert", s(&path), "-o", s(&pack)]);
        (o, pack)
    };

    // A binary_compressed file cut inside its block: refused before packing starts.
    let bytes = pcd("binary_compressed", &pts);
    let data = 23
        + bytes
            .windows(23)
            .position(|w| w == b"DATA binary_compressed\n")
            .unwrap();
    let (o, pack) = convert("cut.pcd", &bytes[..bytes.len() - 7]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = stderr(&o);
    assert!(
        e.contains(&format!(
            "cut.pcd: byte {data}: the compressed block declares"
        )) && e.contains("the file is truncated"),
        "{e}"
    );
    assert!(!pack.exists());

    // A back-reference before the start of the data, at the byte it is.
    let mut bad = bytes.clone();
    let block = data + 8;
    bad[block] = 0x20;
    bad[block + 1] = 0;
    let (o, _) = convert("lzf.pcd", &bad);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = stderr(&o);
    assert!(
        e.contains(&format!("lzf.pcd: byte {block}: an LZF back-reference at uncompressed byte 0 reaches back 1 (to byte -1), before the start of the data; the binary_compressed data is damaged")),
        "{e}"
    );

    // An infinite coordinate is damage, not an invalid-point marker.
    let mut inf = pts.clone();
    inf[1][0] = f32::INFINITY;
    let (o, _) = convert("inf.pcd", &pcd("ascii", &inf));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("inf.pcd: line 13: point 1: `x` = inf is not a finite coordinate"),
        "{}",
        text(&o)
    );

    // NaN points (pixels without a measurement) are left out, counted in one warning.
    let mut nan = pts.clone();
    for p in nan.iter_mut().step_by(4) {
        p[2] = f32::NAN;
    }
    let (o, pack) = convert("nan.pcd", &pcd("binary", &nan));
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains("warning: ")
            && stderr(&o).contains("nan.pcd: 5 of 20 points have NaN coordinates (no measurement at those sensor pixels) and are left out"),
        "{}",
        text(&o)
    );
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&gs_pack(&["info", s(&pack), "--json"]).stdout)
            .unwrap()["clouds"][0]["points"],
        15
    );

    // A folder holding PLY and PCD clouds: --format chooses.
    let both = tmp.path().join("both");
    std::fs::create_dir(&both).unwrap();
    std::fs::write(both.join("a.pcd"), pcd("ascii", &pts)).unwrap();
    std::fs::write(
        both.join("b.ply"),
        "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n1 2 3\n",
    )
    .unwrap();
    let pack = tmp.path().join("both.pack");
    let o = gs_pack(&["convert", s(&both), "-o", s(&pack)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("the folder holds .ply (1) and .pcd (1) point clouds")
            && stderr(&o).contains("pass --format ply, pcd, las, e57 or obj"),
        "{}",
        text(&o)
    );
    let o = gs_pack(&["convert", s(&both), "-o", s(&pack), "--format", "pcd"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains("packed point cloud \"a\": 20 points"),
        "{}",
        text(&o)
    );
}

#[test]
fn damaged_scan_files_are_refused_before_packing_naming_the_place() {
    use ramsplat::synth::las::{las_bytes, las_points, LasSpec, LazChunks};
    let tmp = tempfile::tempdir().unwrap();
    let convert = |name: &str, bytes: &[u8]| {
        let file = tmp.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let pack = tmp.path().join(format!("{name}.pack"));
        let o = gs_pack(&["convert", s(&file), "-o", s(&pack)]);
        assert!(!pack.exists(), "{}", text(&o));
        o
    };

    // A header counting more points than the file holds.
    let mut cut = las_bytes(&LasSpec::new(2, 3), &las_points(20));
    cut.truncate(cut.len() - 50);
    let o = convert("cut.las", &cut);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("cut.las: record 18: the header counts 20 points of 34 bytes, but the file holds only 18 of them; it is truncated"),
        "{}",
        text(&o)
    );

    // A chunk table claiming four billion chunks.
    let laz = las_bytes(
        &LasSpec::new(4, 7).laz(LazChunks::Fixed(10)),
        &las_points(40),
    );
    let data = u32::from_le_bytes(laz[96..100].try_into().unwrap()) as usize;
    let table = i64::from_le_bytes(laz[data..data + 8].try_into().unwrap()) as usize;
    let mut chunks = laz.clone();
    chunks[table + 4..table + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let o = convert("chunks.laz", &chunks);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("chunks.laz: byte ")
            && stderr(&o).contains("the chunk table lists 4294967295 chunks")
            && stderr(&o).contains("the LAZ file is damaged"),
        "{}",
        text(&o)
    );

    // GPS-time data that sends LASzip's decoder into endless recursion (found by the fuzz
    // target; it aborted the process with a stack overflow).
    let gps = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/las/gps_recursion.laz"),
    )
    .unwrap();
    let o = convert("gps.laz", &gps);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("gps.laz: record 359: its compressed data cannot be decoded")
            && stderr(&o).contains("deep into recursion"),
        "{}",
        text(&o)
    );

    // An E57 scan with a byte flipped in its point data: the page's checksum names it.
    let mut e57 =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/e57/two_scans.e57"))
            .unwrap();
    e57[3000] ^= 0x10;
    let o = convert("scan.e57", &e57);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("scan.e57: byte 2048: scan 0 (station A): page 2's checksum is")
            && stderr(&o).contains("the E57 file is damaged"),
        "{}",
        text(&o)
    );
}

/// Options of one `gs-render` mode given to another are command-line errors (exit 2) naming
/// both, not silently ignored: `--convert-format`, `--crop`, `--min-opacity`, `--prune-to`
/// and `--prune-views` belong to `--convert`; `--split`, `--half`, `--eval-pose-steps` and `--color-correct-metric` to
/// `--pack`; `--trajectory-shape` to `--trajectory`; and `--convert`, which renders nothing,
/// takes no background or resolution.
#[test]
fn gs_render_refuses_the_options_of_another_mode() {
    let cases: [(&[&str], &str); 12] = [
        (&["--convert", "o.ply", "--bg", "1,1,1"], "--bg"),
        (&["--convert", "o.ply", "-r", "2"], "--resolution"),
        (
            &[
                "--camera",
                "c.json",
                "-o",
                "x.png",
                "--convert-format",
                "ply",
            ],
            "--convert-format",
        ),
        (
            &["--camera", "c.json", "-o", "x.png", "--crop", "0,0,0,1,1,1"],
            "--crop",
        ),
        (
            &["--pack", "p", "-o", "d", "--min-opacity", "0.1"],
            "--min-opacity",
        ),
        (
            &["--cameras", "c.json", "-o", "d", "--split", "train"],
            "--split",
        ),
        (
            &["--camera", "c.json", "-o", "x.png", "--half", "left"],
            "--half",
        ),
        (
            &["--convert", "o.ply", "--eval-pose-steps", "3"],
            "--eval-pose-steps",
        ),
        (
            &[
                "--cameras",
                "c.json",
                "-o",
                "d",
                "--color-correct-metric",
                "affine",
            ],
            "--color-correct-metric",
        ),
        (
            &[
                "--camera",
                "c.json",
                "-o",
                "x.png",
                "--trajectory-shape",
                "ellipse",
            ],
            "--trajectory-shape",
        ),
        (
            &["--pack", "p", "-o", "d", "--prune-to", "10"],
            "--prune-to",
        ),
        (
            &["--cameras", "c.json", "-o", "d", "--prune-views", "p"],
            "--prune-views",
        ),
    ];
    for (args, flag) in cases {
        let o = gs_render(&[&["--ply", "model.ply"], args].concat());
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains("cannot be used with") && e.contains(flag),
            "{args:?}: {e}"
        );
    }
}
