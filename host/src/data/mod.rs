//! Datasets: download with checksums into a cache folder, parse, split and batch.
//!
//! Loaders return plain Rust data (`Vec<u8>`, `Vec<f32>`, `Vec<u32>`); the training code turns
//! batches into tensors. Every loader takes an optional offline folder (`--data-dir`) and never
//! downloads when its files are there; without one it uses [`download::cache_dir`].

pub mod batches;
pub mod cifar10;
pub mod digits;
pub mod download;
pub mod image_set;
pub mod tiny_imagenet;
pub mod wikitext;

pub use image_set::{ImageSet, Normalize};

/// Which part of an image dataset to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The training images.
    Train,
    /// The labelled held-out images (CIFAR-10's `test_batch.bin`, Tiny-ImageNet's `val/`,
    /// since Tiny-ImageNet's own test images carry no labels).
    Test,
}

/// The repository's shipped `data/` folder, for the offline defaults (`homeadam quick`).
///
/// Resolved at compile time from this crate's manifest, so it is right for a binary run from a
/// checkout; an installed binary should be given explicit paths instead.
pub fn shipped_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("data")
}
