//! Fuzz target for the checkpoint reader (`train::checkpoint`): what `gs-train --resume` reads
//! must give a resumable state or an error naming the file, never a panic, a hang or an
//! allocation the file does not back.
//!
//! The first input byte picks the mode (it is not part of the file):
//! - odd: the rest is the checkpoint file as it is, so mutations reach the preamble, the
//!   header's length and checksum and the container's extent checks;
//! - even: the rest is the header JSON, a NUL byte, then the data section. The target writes
//!   the container around them with a fresh header checksum, after giving every array the
//!   header lists whose extent lies in the data its real xxh3, so that mutations get past the
//!   checksums to the state header, the shapes and the values.
//!
//! A file whose state header reads is then loaded as the run it names would load it (its own
//! pack id and configuration expected), and an accepted state must build a CPU trainer or be
//! refused by it with an error.
//!
//! Seeds: `seeds/checkpoint/` (see fuzz/README.md). Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run
//! checkpoint corpus/checkpoint seeds/checkpoint -- -max_len=32768` from `fuzz/`.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ramsplat::render::CpuRasterizer;
use ramsplat::train::checkpoint::{load_state, read_meta, Expected, MAGIC, PREAMBLE_LEN, VERSION};
use ramsplat::train::{Engine, Trainer};
use xxhash_rust::xxh3::xxh3_64;

fn file() -> &'static PathBuf {
    static F: OnceLock<PathBuf> = OnceLock::new();
    F.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("ramsplat-fuzz-checkpoint-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("fuzz folder");
        dir.join("ckpt-00000010.bin")
    })
}

/// The container around `header` and `data`, each listed array given the checksum of the
/// bytes its extent names (when they exist).
fn container(header: &[u8], data: &[u8]) -> Vec<u8> {
    let mut header = header.to_vec();
    if let Ok(mut json) = serde_json::from_slice::<serde_json::Value>(&header) {
        if let Some(arrays) = json.get_mut("arrays").and_then(|a| a.as_array_mut()) {
            for a in arrays {
                let extent = (
                    a.get("offset").and_then(|v| v.as_u64()),
                    a.get("bytes").and_then(|v| v.as_u64()),
                );
                if let (Some(offset), Some(bytes)) = extent {
                    let end = offset.checked_add(bytes).unwrap_or(u64::MAX);
                    if end <= data.len() as u64 {
                        let h = xxh3_64(&data[offset as usize..end as usize]);
                        a["xxh3"] = serde_json::json!(format!("{h:016x}"));
                    }
                }
            }
        }
        header = serde_json::to_vec(&json).expect("a parsed value serializes");
    }
    let mut out = Vec::with_capacity(PREAMBLE_LEN as usize + header.len() + 8 + data.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&xxh3_64(&header).to_le_bytes());
    debug_assert_eq!(out.len() as u64, PREAMBLE_LEN);
    out.extend_from_slice(&header);
    out.resize(out.len().div_ceil(8) * 8, 0);
    out.extend_from_slice(data);
    out
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let bytes = if mode & 1 == 1 {
        rest.to_vec()
    } else {
        let cut = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        container(&rest[..cut], rest.get(cut + 1..).unwrap_or(&[]))
    };
    let file = file();
    std::fs::write(file, &bytes).expect("write the input");
    let Ok(meta) = read_meta(file) else {
        return;
    };
    let expected = Expected {
        pack_id: &meta.pack_id,
        pack_content: meta.pack_content.as_deref(),
        config: &meta.config,
        extend: false,
        views: None,
    };
    if let Ok(state) = load_state(file, &expected) {
        assert_eq!(state.model.gaussians.len() as u64, meta.num_gaussians);
        assert_eq!(state.step, meta.step);
        let _ = Trainer::from_state(state, Engine::host(CpuRasterizer::<f32>::new()));
    }
});
