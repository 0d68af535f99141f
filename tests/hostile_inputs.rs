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
//!
//! Cases covered elsewhere: `--force` safety, concurrent converts, a destination created
//! mid-run, killed converts, a corrupt PNG and `--test-every 1` (tests/cli.rs); training
//! resume, checkpoints and `-o` holding another run (tests/train_cli.rs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

/// Overwrites 32 bytes in the middle of a JPEG's scan data with all-one bits (no valid Huffman
/// code there), keeping its end-of-image marker: the file looks complete (not truncated) but
/// its entropy-coded data is damaged, as after a bad copy or a flipped disk sector.
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
