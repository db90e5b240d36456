//! Tiny-ImageNet-200: 200 classes of 64×64 JPEGs (some grayscale), laid out as `wnids.txt`,
//! `train/<wnid>/images/*.JPEG` (500 per class) and `val/images/*.JPEG` labelled by
//! `val/val_annotations.txt` (file, wnid, bounding box; tab-separated). The unlabelled `test/`
//! images are not used: `val/` serves as the test split.

use super::download::{cache_dir, ensure_extracted, Checksum, Remote};
use super::{ImageSet, Split};
use anyhow::{anyhow, bail, ensure, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Rows and columns of every image.
pub const SIZE: usize = 64;
/// Bytes per decoded image (RGB planes).
const IMAGE_LEN: usize = 3 * SIZE * SIZE;

/// The archive as published on the cs231n site (248,100,043 bytes; the md5 every public loader
/// of it checks).
pub const REMOTE: Remote = Remote {
    urls: &["http://cs231n.stanford.edu/tiny-imagenet-200.zip"],
    file: "tiny-imagenet-200.zip",
    checksum: Checksum::Md5("90528d7ca1a48142e341f4ef8d21d0de"),
};
/// The folder the archive unpacks to.
pub const FOLDER: &str = "tiny-imagenet-200";

/// The class ids of `root/wnids.txt`, sorted: label `i` is the `i`-th in sorted order, as
/// torchvision's `ImageFolder` numbers the `train/` folders.
pub fn read_wnids(root: &Path) -> Result<Vec<String>> {
    let path = root.join("wnids.txt");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut wnids: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    wnids.sort();
    let count = wnids.len();
    wnids.dedup();
    ensure!(count == wnids.len(), "{}: duplicate class ids", path.display());
    ensure!(!wnids.is_empty(), "{}: no class ids", path.display());
    Ok(wnids)
}

/// Decodes one image into `dst` as R, G, B planes (grayscale is replicated to RGB).
fn decode_into(path: &Path, dst: &mut [u8]) -> Result<()> {
    let img = image::ImageReader::open(path)
        .and_then(|r| r.with_guessed_format())
        .map_err(anyhow::Error::from)
        .and_then(|r| Ok(r.decode()?))
        .with_context(|| format!("decoding {}", path.display()))?
        .to_rgb8();
    ensure!(
        (img.width() as usize, img.height() as usize) == (SIZE, SIZE),
        "{}: {}×{} pixels, expected {SIZE}×{SIZE}",
        path.display(),
        img.width(),
        img.height()
    );
    for (i, px) in img.pixels().enumerate() {
        for c in 0..3 {
            dst[c * SIZE * SIZE + i] = px.0[c];
        }
    }
    Ok(())
}

/// Decodes `jobs` (file, label) in parallel, keeping their order, with a progress bar (the
/// training split is 100,000 JPEGs).
fn decode_all(jobs: &[(PathBuf, u32)], classes: usize) -> Result<ImageSet> {
    let mut pixels = vec![0u8; jobs.len() * IMAGE_LEN];
    let pb = crate::progress::bar(true, jobs.len() as u64, "decoding Tiny-ImageNet".into());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Contiguous chunks, one per thread: each writes only its own part of `pixels`.
    let per = jobs.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = pixels
            .chunks_mut(per * IMAGE_LEN)
            .zip(jobs.chunks(per))
            .map(|(out, jobs)| {
                let pb = pb.clone();
                s.spawn(move || {
                    out.chunks_exact_mut(IMAGE_LEN)
                        .zip(jobs)
                        .try_for_each(|(dst, (path, _))| {
                            decode_into(path, dst)?;
                            pb.inc(1);
                            Ok(())
                        })
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(anyhow!("an image decoding thread panicked")))
        })
    })?;
    pb.finish_and_clear();
    Ok(ImageSet {
        n: jobs.len(),
        channels: 3,
        height: SIZE,
        width: SIZE,
        pixels,
        labels: jobs.iter().map(|(_, l)| *l).collect(),
        classes,
    })
}

/// The `*.JPEG` files of a folder, sorted by name.
fn jpegs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("jpeg") || e.eq_ignore_ascii_case("jpg"))
        {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The (file, label) list of the training split.
fn train_jobs(root: &Path, wnids: &[String]) -> Result<Vec<(PathBuf, u32)>> {
    let mut jobs = Vec::new();
    for (label, wnid) in wnids.iter().enumerate() {
        let dir = root.join("train").join(wnid).join("images");
        let files = jpegs(&dir)?;
        ensure!(
            !files.is_empty(),
            "{}: no JPEG images for class {wnid}",
            dir.display()
        );
        jobs.extend(files.into_iter().map(|f| (f, label as u32)));
    }
    Ok(jobs)
}

/// The (file, label) list of the validation split, from `val/val_annotations.txt`.
fn val_jobs(root: &Path, wnids: &[String]) -> Result<Vec<(PathBuf, u32)>> {
    let index: HashMap<&str, u32> = wnids
        .iter()
        .enumerate()
        .map(|(i, w)| (w.as_str(), i as u32))
        .collect();
    let path = root.join("val").join("val_annotations.txt");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut jobs = Vec::new();
    for (number, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l)) {
        if line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split('\t');
        let (Some(file), Some(wnid)) = (fields.next(), fields.next()) else {
            bail!(
                "{} line {number}: expected file<TAB>wnid<TAB>bbox, got {line:?}",
                path.display()
            );
        };
        let (file, wnid) = (file.trim(), wnid.trim());
        // A name with a separator could point outside val/images.
        ensure!(
            !file.is_empty() && !file.contains(['/', '\\']) && file != "..",
            "{} line {number}: bad file name {file:?}",
            path.display()
        );
        let label = *index.get(wnid).with_context(|| {
            format!(
                "{} line {number}: class {wnid:?} is not in wnids.txt",
                path.display()
            )
        })?;
        jobs.push((root.join("val").join("images").join(file), label));
    }
    ensure!(!jobs.is_empty(), "{}: no annotations", path.display());
    Ok(jobs)
}

/// Decodes a split of the dataset rooted at `root` (the folder holding `wnids.txt`).
pub fn load_dir(root: &Path, split: Split) -> Result<ImageSet> {
    let wnids = read_wnids(root)?;
    let jobs = match split {
        Split::Train => train_jobs(root, &wnids)?,
        Split::Test => val_jobs(root, &wnids)?,
    };
    decode_all(&jobs, wnids.len())
}

/// The dataset root: `data_dir` (itself or its `tiny-imagenet-200`) when given, never
/// downloading; else in the cache, downloaded and extracted on first use.
pub fn locate(data_dir: Option<&Path>) -> Result<PathBuf> {
    match data_dir {
        Some(dir) => [dir.to_path_buf(), dir.join(FOLDER)]
            .into_iter()
            .find(|d| d.join("wnids.txt").is_file())
            .with_context(|| {
                format!(
                    "no Tiny-ImageNet in {} (no wnids.txt there or in {FOLDER}/)",
                    dir.display()
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
    use image::{GrayImage, ImageFormat, Luma, Rgb, RgbImage};
    use std::fs;

    /// A tree with classes b, a (unsorted in wnids.txt): two colour training images for b,
    /// one grayscale for a, and two validation images.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(FOLDER);
        fs::create_dir_all(root.join("val/images")).unwrap();
        fs::write(root.join("wnids.txt"), "n02\nn01\n").unwrap();
        for (wnid, files) in [
            ("n01", &["n01_0.JPEG"][..]),
            ("n02", &["n02_1.JPEG", "n02_0.JPEG"][..]),
        ] {
            let images = root.join("train").join(wnid).join("images");
            fs::create_dir_all(&images).unwrap();
            for f in files {
                if wnid == "n01" {
                    let img = GrayImage::from_pixel(64, 64, Luma([90]));
                    img.save_with_format(images.join(f), ImageFormat::Jpeg).unwrap();
                } else {
                    let img = RgbImage::from_pixel(64, 64, Rgb([220, 30, 40]));
                    img.save_with_format(images.join(f), ImageFormat::Jpeg).unwrap();
                }
            }
            fs::write(images.join("ignored.txt"), "x").unwrap();
        }
        RgbImage::from_pixel(64, 64, Rgb([10, 200, 10]))
            .save_with_format(root.join("val/images/val_0.JPEG"), ImageFormat::Jpeg)
            .unwrap();
        RgbImage::from_pixel(64, 64, Rgb([10, 10, 200]))
            .save_with_format(root.join("val/images/val_1.JPEG"), ImageFormat::Jpeg)
            .unwrap();
        fs::write(
            root.join("val/val_annotations.txt"),
            "val_0.JPEG\tn02\t0\t0\t63\t63\nval_1.JPEG\tn01\t1\t2\t3\t4\n",
        )
        .unwrap();
        dir
    }

    fn near(a: u8, b: u8) -> bool {
        a.abs_diff(b) <= 3
    }

    #[test]
    fn loads_train_and_val_in_rgb_planes() {
        let dir = tree();
        let root = locate(Some(dir.path())).unwrap();
        let train = load(Some(&root), Split::Train).unwrap();
        assert_eq!(
            (train.n, train.classes, train.channels, train.height),
            (3, 2, 3, 64)
        );
        // n01 sorts first: label 0 is the grayscale class, replicated to three equal planes.
        assert_eq!(train.labels, [0, 1, 1]);
        let gray = train.image(0);
        assert!(near(gray[0], 90) && near(gray[4096], 90) && near(gray[8191], 90));
        let red = train.image(1);
        assert!(
            near(red[0], 220) && near(red[4096 + 100], 30) && near(red[8192 + 4095], 40),
            "{:?}",
            &red[..3]
        );
        let val = load(Some(dir.path()), Split::Test).unwrap();
        assert_eq!(val.labels, [1, 0]);
        assert!(near(val.image(0)[4096], 200) && near(val.image(1)[8192], 200));
    }

    #[test]
    fn bad_annotations_and_images_name_the_file() {
        let dir = tree();
        let root = dir.path().join(FOLDER);
        let ann = root.join("val/val_annotations.txt");
        fs::write(&ann, "val_0.JPEG\tn02\t0\t0\t1\t1\nval_1.JPEG\tn99\t0\t0\t1\t1\n").unwrap();
        let err = load_dir(&root, Split::Test).unwrap_err();
        assert!(
            format!("{err:#}").contains("val_annotations.txt line 2: class \"n99\" is not in wnids.txt"),
            "{err:#}"
        );
        fs::write(&ann, "../x.JPEG\tn01\n").unwrap();
        assert!(format!("{:#}", load_dir(&root, Split::Test).unwrap_err()).contains("bad file name"));
        fs::write(&ann, "no-tab-here\n").unwrap();
        assert!(format!("{:#}", load_dir(&root, Split::Test).unwrap_err()).contains("line 1: expected"));

        fs::write(root.join("train/n02/images/n02_1.JPEG"), b"not a jpeg").unwrap();
        let err = load_dir(&root, Split::Train).unwrap_err();
        assert!(format!("{err:#}").contains("n02_1.JPEG"), "{err:#}");
        RgbImage::new(32, 32)
            .save_with_format(root.join("train/n02/images/n02_1.JPEG"), ImageFormat::Jpeg)
            .unwrap();
        let err = load_dir(&root, Split::Train).unwrap_err();
        assert!(format!("{err:#}").contains("32×32 pixels"), "{err:#}");

        fs::remove_dir_all(root.join("train/n01")).unwrap();
        assert!(format!("{:#}", load_dir(&root, Split::Train).unwrap_err()).contains("n01"));
        let empty = tempfile::tempdir().unwrap();
        assert!(format!("{:#}", locate(Some(empty.path())).unwrap_err()).contains("no wnids.txt"));
    }
}
