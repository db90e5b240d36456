//! CIFAR-10, binary version: records of one label byte and 3,072 pixel bytes (R, G, B planes of
//! 32×32, row-major), in `data_batch_1.bin`..`data_batch_5.bin` (10,000 records each) and
//! `test_batch.bin`.

use super::download::{cache_dir, ensure_extracted, Checksum, Remote};
use super::{ImageSet, Normalize, Split};
use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};

/// Channels, rows and columns of an image.
pub const SHAPE: [usize; 3] = [3, 32, 32];
/// Bytes per record: the label, then the pixels.
pub const RECORD: usize = 1 + 3 * 32 * 32;
/// Class names, by label.
pub const CLASSES: [&str; 10] = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
];
/// Per-channel mean of the training images in [0, 1].
pub const MEAN: [f32; 3] = [0.4914, 0.4822, 0.4465];
/// Per-channel standard deviation of the training pixels in [0, 1]. (The often-copied
/// 0.2023/0.1994/0.2010 are not this: they are the spread of per-image means.)
pub const STD: [f32; 3] = [0.2470, 0.2435, 0.2616];

/// The archive as published by its authors (md5 from the CIFAR page, 170,052,171 bytes).
pub const REMOTE: Remote = Remote {
    urls: &["https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"],
    file: "cifar-10-binary.tar.gz",
    checksum: Checksum::Md5("c32a1d4ab5d03f1284b67883e8d87530"),
};
/// The folder the archive unpacks to.
pub const FOLDER: &str = "cifar-10-batches-bin";
/// The training files, in the order their records are concatenated.
pub const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
/// The test file.
pub const TEST_FILE: &str = "test_batch.bin";

/// The CIFAR-10 normalisation ([`MEAN`], [`STD`]).
pub fn normalization() -> Normalize {
    Normalize {
        mean: MEAN.to_vec(),
        std: STD.to_vec(),
    }
}

/// Parses the records in `bytes`; `name` (the file) is named in every error.
pub fn parse_batch(bytes: &[u8], name: &str) -> Result<ImageSet> {
    ensure!(
        !bytes.is_empty(),
        "{name}: empty file, expected records of {RECORD} bytes"
    );
    ensure!(
        bytes.len().is_multiple_of(RECORD),
        "{name}: {} bytes is not a whole number of {RECORD}-byte records (truncated or not CIFAR-10 binary)",
        bytes.len()
    );
    let n = bytes.len() / RECORD;
    let mut set = ImageSet::empty(SHAPE[0], SHAPE[1], SHAPE[2], CLASSES.len());
    set.pixels.reserve(n * (RECORD - 1));
    for (i, record) in bytes.chunks_exact(RECORD).enumerate() {
        let label = record[0];
        ensure!(
            (label as usize) < CLASSES.len(),
            "{name}: record {i} (byte offset {}) has label {label}, expected 0..=9",
            i * RECORD
        );
        set.labels.push(label as u32);
        set.pixels.extend_from_slice(&record[1..]);
    }
    set.n = n;
    Ok(set)
}

/// Reads one batch file.
pub fn read_batch(path: &Path) -> Result<ImageSet> {
    let bytes = std::fs::read(path).with_context(|| format!("reading CIFAR-10 file {}", path.display()))?;
    parse_batch(&bytes, &path.display().to_string())
}

/// Reads a split from a folder holding the `.bin` files.
pub fn load_dir(dir: &Path, split: Split) -> Result<ImageSet> {
    let files: &[&str] = match split {
        Split::Train => &TRAIN_FILES,
        Split::Test => &[TEST_FILE],
    };
    let mut set = ImageSet::empty(SHAPE[0], SHAPE[1], SHAPE[2], CLASSES.len());
    for file in files {
        set.append(read_batch(&dir.join(file))?)?;
    }
    Ok(set)
}

/// The folder with the `.bin` files: in `data_dir` (itself or its `cifar-10-batches-bin`) when
/// given, never downloading; else in the cache, downloaded and extracted on first use.
pub fn locate(data_dir: Option<&Path>) -> Result<PathBuf> {
    match data_dir {
        Some(dir) => [dir.to_path_buf(), dir.join(FOLDER)]
            .into_iter()
            .find(|d| d.join(TEST_FILE).is_file() || d.join(TRAIN_FILES[0]).is_file())
            .with_context(|| {
                format!(
                    "no CIFAR-10 binary files in {} (expected {} and {TEST_FILE} there or in {FOLDER}/)",
                    dir.display(),
                    TRAIN_FILES.join(", ")
                )
            }),
        None => ensure_extracted(&REMOTE, &cache_dir()?, FOLDER),
    }
}

/// Loads a split (see [`locate`] for where from).
pub fn load(data_dir: Option<&Path>, split: Split) -> Result<ImageSet> {
    load_dir(&locate(data_dir)?, split)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` records whose label is `i % 10` and whose pixels all equal `i`.
    fn records(n: usize, first: u8) -> Vec<u8> {
        (0..n)
            .flat_map(|i| {
                let v = first.wrapping_add(i as u8);
                std::iter::once(v % 10).chain(std::iter::repeat_n(v, RECORD - 1))
            })
            .collect()
    }

    #[test]
    fn reads_the_binary_layout_and_concatenates_training_files() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join(FOLDER);
        std::fs::create_dir(&sub).unwrap();
        for (k, file) in TRAIN_FILES.iter().enumerate() {
            std::fs::write(sub.join(file), records(3, 10 * k as u8)).unwrap();
        }
        let mut test = records(2, 7);
        // A distinct R, G, B value and position per plane to pin the plane order.
        test[1] = 200;
        test[1 + 1024] = 201;
        test[1 + 2048 + 33] = 202;
        std::fs::write(sub.join(TEST_FILE), &test).unwrap();

        // The offline folder may be the parent of cifar-10-batches-bin.
        assert_eq!(locate(Some(dir.path())).unwrap(), sub);
        let train = load(Some(dir.path()), Split::Train).unwrap();
        assert_eq!((train.n, train.pixels.len(), train.classes), (15, 15 * 3072, 10));
        assert_eq!(train.labels, [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]);
        assert!(train.image(4).iter().all(|&p| p == 11));
        let test = load(Some(&sub), Split::Test).unwrap();
        assert_eq!((test.n, test.labels.clone()), (2, vec![7, 8]));
        let img = test.image(0);
        assert_eq!((img[0], img[1024], img[2048 + 33], img[1]), (200, 201, 202, 7));
    }

    #[test]
    fn truncated_corrupt_and_missing_files_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short.bin");
        std::fs::write(&short, &records(2, 0)[..RECORD + 100]).unwrap();
        let err = read_batch(&short).unwrap_err();
        assert!(
            format!("{err:#}").contains("short.bin: 3173 bytes is not a whole number"),
            "{err:#}"
        );

        let bad = dir.path().join("bad.bin");
        let mut bytes = records(3, 0);
        bytes[2 * RECORD] = 10;
        std::fs::write(&bad, &bytes).unwrap();
        let err = read_batch(&bad).unwrap_err();
        assert!(
            format!("{err:#}").contains("bad.bin: record 2 (byte offset 6146) has label 10"),
            "{err:#}"
        );

        let empty = dir.path().join("empty.bin");
        std::fs::write(&empty, b"").unwrap();
        assert!(format!("{:#}", read_batch(&empty).unwrap_err()).contains("empty.bin: empty file"));

        std::fs::write(dir.path().join(TEST_FILE), records(1, 0)).unwrap();
        let err = load(Some(dir.path()), Split::Train).unwrap_err();
        assert!(format!("{err:#}").contains("data_batch_1.bin"), "{err:#}");
        let nothing = tempfile::tempdir().unwrap();
        let err = locate(Some(nothing.path())).unwrap_err();
        assert!(format!("{err:#}").contains("no CIFAR-10 binary files"), "{err:#}");
    }

    #[test]
    fn normalization_centres_the_mean_pixel() {
        let mut set = parse_batch(&records(1, 0), "one.bin").unwrap();
        for (plane, mean) in set.pixels.chunks_exact_mut(1024).zip(MEAN) {
            plane.fill((mean * 255.0).round() as u8);
        }
        let mut out = vec![0.0; 3072];
        set.write_normalized(0, &normalization(), None, &mut out);
        // Within half a grey level of the mean.
        for (c, (plane, std)) in out.chunks_exact(1024).zip(STD).enumerate() {
            let bound = 0.5 / 255.0 / std + 1e-6;
            assert!(plane.iter().all(|v| v.abs() < bound), "channel {c}");
        }
    }
}
