//! Fuzzes the shard reader: the input replaces the bytes of the only shard of an otherwise
//! valid pack (`synth::packs::write_layouts_pack`: a view of every pixel layout, alpha, loss
//! mask and inverse depth, in every codec, and a point cloud). The manifest is adjusted to the
//! input's length so the reader gets past its size check, and the pack id is taken from the
//! input's header so inputs derived from the seed get past the pack-id check; then the pack is
//! opened, verified and every view read. Nothing may panic, hang or allocate without bound;
//! errors are expected.
//!
//! Seed corpus: `RAMSPLAT_FUZZ_SEED_DIR=DIR cargo fuzz run shard DIR -- -runs=0` copies the
//! fixture's valid shard into DIR.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ramsplat::shard::reader::Pack;

struct Fixture {
    dir: PathBuf,
    manifest: serde_json::Value,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ramsplat-fuzz-shard-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ramsplat::synth::packs::write_layouts_pack(&dir).expect("seed pack");
        if let Some(seed_dir) = std::env::var_os("RAMSPLAT_FUZZ_SEED_DIR") {
            let _ = std::fs::create_dir_all(&seed_dir);
            std::fs::copy(
                dir.join("shard-00000.gss"),
                PathBuf::from(seed_dir).join("seed-valid-shard"),
            )
            .expect("copy seed");
        }
        let text = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest");
        Fixture {
            dir,
            manifest: serde_json::from_str(&text).expect("manifest json"),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let mut m = f.manifest.clone();
    m["shards"][0]["bytes"] = serde_json::json!(data.len());
    if data.len() >= 32 {
        let id = u64::from_le_bytes(data[24..32].try_into().unwrap());
        m["pack_id"] = serde_json::json!(format!("{id:016x}"));
    }
    std::fs::write(f.dir.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
    std::fs::write(f.dir.join("shard-00000.gss"), data).unwrap();
    if let Ok(pack) = Pack::open(&f.dir) {
        let _ = pack.verify(&|_, _| {});
        for i in 0..pack.manifest().views.len() {
            let mut buf = vec![0u8; pack.manifest().views[i].decoded_len()];
            let _ = pack.read_view_into(i, &mut buf);
        }
        for c in 0..pack.manifest().clouds.len() {
            for k in 0..pack.manifest().clouds[c].chunks.len() {
                let mut buf =
                    vec![0u8; pack.manifest().clouds[c].chunks[k].record.decoded_len as usize];
                let _ = pack.read_chunk_into(c, k, &mut buf);
            }
        }
    }
});
