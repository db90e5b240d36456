//! The shipped handwritten digits (`data/digits/digits.csv.gz`): 1,797 rows of 64 pixel values
//! 0..=16 (an 8×8 image) followed by the label 0..=9.

use crate::rng::Rng;
use anyhow::{bail, ensure, Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Pixels per row (8×8).
pub const FEATURES: usize = 64;
/// Digit classes.
pub const CLASSES: usize = 10;
/// Largest pixel value in the file (the UCI data counts set bits in 4×4 blocks: 0..=16).
pub const MAX_PIXEL: u32 = 16;

/// Labelled fixed-length feature vectors (here the digits, pixels scaled to [0, 1]).
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureSet {
    /// Number of examples.
    pub n: usize,
    /// Values per example.
    pub features: usize,
    /// `n × features` values, example-major.
    pub x: Vec<f32>,
    /// One class index per example, each `< classes`.
    pub labels: Vec<u32>,
    /// Number of classes.
    pub classes: usize,
}

impl FeatureSet {
    /// The features of example `i` (`i < n`).
    pub fn example(&self, i: usize) -> &[f32] {
        &self.x[i * self.features..(i + 1) * self.features]
    }

    /// The examples at `indices`, in that order.
    pub fn subset(&self, indices: &[usize]) -> FeatureSet {
        FeatureSet {
            n: indices.len(),
            features: self.features,
            x: indices
                .iter()
                .flat_map(|&i| self.example(i).iter().copied())
                .collect(),
            labels: indices.iter().map(|&i| self.labels[i]).collect(),
            classes: self.classes,
        }
    }
}

/// The shipped file, `data/digits/digits.csv.gz` in the repository.
pub fn shipped_path() -> PathBuf {
    super::shipped_dir().join("digits").join("digits.csv.gz")
}

/// Reads a digits CSV (gzip-compressed when the name ends in `.gz`), pixels scaled to [0, 1].
pub fn load(path: &Path) -> Result<FeatureSet> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut text = String::new();
    let read = if path.extension().is_some_and(|e| e == "gz") {
        flate2::read::GzDecoder::new(file).read_to_string(&mut text)
    } else {
        std::io::BufReader::new(file).read_to_string(&mut text)
    };
    read.with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("in {}", path.display()))
}

/// Parses digits CSV text: each non-blank line 64 integers 0..=16 then a label 0..=9.
pub fn parse(text: &str) -> Result<FeatureSet> {
    let mut x = Vec::new();
    let mut labels = Vec::new();
    for (number, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        ensure!(
            fields.len() == FEATURES + 1,
            "line {number}: {} fields, expected {} (64 pixels and a label)",
            fields.len(),
            FEATURES + 1
        );
        for (col, field) in fields.iter().enumerate() {
            let value: u32 = field
                .parse()
                .with_context(|| format!("line {number}, field {}: {field:?} is not an integer", col + 1))?;
            if col < FEATURES {
                ensure!(
                    value <= MAX_PIXEL,
                    "line {number}, field {}: pixel {value} is above {MAX_PIXEL}",
                    col + 1
                );
                x.push(value as f32 / MAX_PIXEL as f32);
            } else {
                ensure!(
                    (value as usize) < CLASSES,
                    "line {number}: label {value} is not a digit 0..=9"
                );
                labels.push(value);
            }
        }
    }
    ensure!(!labels.is_empty(), "no rows");
    Ok(FeatureSet {
        n: labels.len(),
        features: FEATURES,
        x,
        labels,
        classes: CLASSES,
    })
}

/// A stratified split: within each class, the examples are shuffled by `Rng::new(seed)` forked
/// per class and the first `round(count · test_fraction)` go to the test set, so every class
/// keeps its share and the split depends only on (`seed`, the data). Both parts keep file order.
pub fn split(set: &FeatureSet, test_fraction: f64, seed: u64) -> Result<(FeatureSet, FeatureSet)> {
    let (train, test) = split_indices(set, test_fraction, seed)?;
    Ok((set.subset(&train), set.subset(&test)))
}

/// [`split`] as the indices of `set`'s examples: (kept, held out), each in increasing order.
pub fn split_indices(set: &FeatureSet, test_fraction: f64, seed: u64) -> Result<(Vec<usize>, Vec<usize>)> {
    if !(test_fraction > 0.0 && test_fraction < 1.0) {
        bail!("held-out fraction {test_fraction} must lie strictly between 0 and 1");
    }
    let root = Rng::new(seed);
    let mut train = Vec::new();
    let mut test = Vec::new();
    for class in 0..set.classes {
        let mut members: Vec<usize> = (0..set.n).filter(|&i| set.labels[i] as usize == class).collect();
        root.fork(class as u64).shuffle(&mut members);
        let k = (members.len() as f64 * test_fraction).round() as usize;
        test.extend_from_slice(&members[..k]);
        train.extend_from_slice(&members[k..]);
    }
    train.sort_unstable();
    test.sort_unstable();
    Ok((train, test))
}

/// The indices of the first `size` examples of `set` in a stratified order: within each class
/// the examples are shuffled by `Rng::new(seed)` forked per class, the r-th of a class of n_c
/// placed at (r + ½)/n_c, and the classes merged by that place (ties by class). Every class of
/// the subset keeps about its share, size · n_c / n, and the subset of a smaller `size` lies
/// inside that of a larger one (the subsets are nested). In increasing order.
pub fn nested_subset(set: &FeatureSet, size: usize, seed: u64) -> Result<Vec<usize>> {
    if size == 0 || size > set.n {
        bail!(
            "a training subset of {size} examples: give 1 to {} (the training split's size)",
            set.n
        );
    }
    let root = Rng::new(seed);
    let mut placed = Vec::with_capacity(set.n);
    for class in 0..set.classes {
        let mut members: Vec<usize> = (0..set.n).filter(|&i| set.labels[i] as usize == class).collect();
        root.fork(class as u64).shuffle(&mut members);
        let n_c = members.len() as u64;
        placed.extend(
            members
                .into_iter()
                .enumerate()
                .map(|(r, i)| (2 * r as u64 + 1, 2 * n_c, class, i)),
        );
    }
    // (2r + 1) / (2 n_c) compared as integers, so that equal places tie exactly.
    placed.sort_by(|a, b| {
        (u128::from(a.0) * u128::from(b.1), a.2).cmp(&(u128::from(b.0) * u128::from(a.1), b.2))
    });
    let mut chosen: Vec<usize> = placed[..size].iter().map(|p| p.3).collect();
    chosen.sort_unstable();
    Ok(chosen)
}

/// The runner's three parts of the digits, as indices of the whole set: the test split
/// ([`TEST_FRACTION`], seed 0, what every run tests on) and, carved from the training split
/// by a second stratified split, a validation split for choosing hyper-parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holdout {
    /// What a run with validation trains on: the training split less the validation split.
    pub train: Vec<usize>,
    /// The validation split, a part of the training split.
    pub validation: Vec<usize>,
    /// The test split, which no choice of hyper-parameters reads.
    pub test: Vec<usize>,
}

/// The share of the digits in the test split.
pub const TEST_FRACTION: f64 = 0.2;
/// The seed of the test split.
pub const TEST_SEED: u64 = 0;
/// The seed of the validation split (another stream than the test split's).
pub const VALIDATION_SEED: u64 = 1;

/// The three parts of `set`, with `validation_fraction` of the training split held out.
pub fn holdout(set: &FeatureSet, validation_fraction: f64) -> Result<Holdout> {
    let (train, test) = split_indices(set, TEST_FRACTION, TEST_SEED)?;
    let (kept, held) = split_indices(&set.subset(&train), validation_fraction, VALIDATION_SEED)?;
    Ok(Holdout {
        train: kept.iter().map(|&i| train[i]).collect(),
        validation: held.iter().map(|&i| train[i]).collect(),
        test,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pixel: u32, label: u32) -> String {
        let mut fields = vec![pixel.to_string(); FEATURES];
        fields.push(label.to_string());
        fields.join(",")
    }

    #[test]
    fn shipped_file_parses_and_splits_stratified() {
        let set = load(&shipped_path()).unwrap();
        assert_eq!((set.n, set.x.len()), (1797, 1797 * 64));
        assert!(set.x.iter().all(|&v| (0.0..=1.0).contains(&v)));
        assert_eq!(set.labels[..3], [0, 1, 2]);
        assert_eq!(set.example(0)[2], 5.0 / 16.0);
        let (train, test) = split(&set, 0.2, 0).unwrap();
        assert_eq!(train.n + test.n, 1797);
        for c in 0..10u32 {
            let total = set.labels.iter().filter(|&&l| l == c).count();
            let held = test.labels.iter().filter(|&&l| l == c).count();
            assert_eq!(held, (total as f64 * 0.2).round() as usize, "class {c}");
        }
        assert_eq!(split(&set, 0.2, 0).unwrap(), (train.clone(), test.clone()));
        assert_ne!(split(&set, 0.2, 1).unwrap().1, test);
    }

    #[test]
    fn the_validation_split_is_carved_from_the_training_split_and_misses_the_test_split() {
        let set = load(&shipped_path()).unwrap();
        let h = holdout(&set, 0.2).unwrap();
        let (train, test) = split_indices(&set, TEST_FRACTION, TEST_SEED).unwrap();
        assert_eq!(h.test, test);
        assert_eq!(
            (train.len(), h.validation.len(), h.train.len()),
            (1438, 287, 1151)
        );
        let mut rejoined = [h.train.clone(), h.validation.clone()].concat();
        rejoined.sort_unstable();
        assert_eq!(rejoined, train);
        assert!(h.validation.iter().all(|i| test.binary_search(i).is_err()));
        assert!(h.validation.iter().all(|i| h.train.binary_search(i).is_err()));
    }

    #[test]
    fn nested_subsets_keep_each_class_share_and_lie_inside_the_larger_ones() {
        let set = load(&shipped_path()).unwrap();
        let (train, _) = split(&set, TEST_FRACTION, TEST_SEED).unwrap();
        let mut previous: Vec<usize> = Vec::new();
        for size in [180, 360, 720, 1438] {
            let subset = nested_subset(&train, size, 3).unwrap();
            assert_eq!(subset.len(), size);
            assert!(previous.iter().all(|i| subset.binary_search(i).is_ok()), "{size}");
            for c in 0..10u32 {
                let all = train.labels.iter().filter(|&&l| l == c).count() as f64;
                let kept = subset.iter().filter(|&&i| train.labels[i] == c).count() as f64;
                let share = size as f64 * all / train.n as f64;
                assert!(
                    (kept - share).abs() <= 1.0,
                    "class {c} of {size}: {kept} against {share}"
                );
            }
            previous = subset;
        }
        assert_eq!(
            nested_subset(&train, 180, 3).unwrap(),
            nested_subset(&train, 180, 3).unwrap()
        );
        assert_ne!(
            nested_subset(&train, 180, 4).unwrap(),
            nested_subset(&train, 180, 3).unwrap()
        );
        for bad in [0, 1439] {
            let err = nested_subset(&train, bad, 0).unwrap_err().to_string();
            assert!(err.contains("give 1 to 1438"), "{err}");
        }
    }

    #[test]
    fn malformed_rows_name_the_line() {
        let cases = [
            (format!("{}\n1,2,3\n", row(0, 0)), "line 2: 3 fields"),
            (row(17, 0), "pixel 17 is above 16"),
            (row(0, 10), "label 10 is not a digit"),
            (row(0, 0).replace("0,0,", "0,x,"), "\"x\" is not an integer"),
            ("\n \n".to_string(), "no rows"),
        ];
        for (text, want) in cases {
            let err = parse(&text).unwrap_err();
            assert!(format!("{err:#}").contains(want), "{err:#} lacks {want}");
        }
    }

    #[test]
    fn missing_file_and_bad_fraction_are_errors() {
        let err = load(Path::new("/nonexistent/digits.csv.gz")).unwrap_err();
        assert!(
            format!("{err:#}").contains("/nonexistent/digits.csv.gz"),
            "{err:#}"
        );
        let set = parse(&row(16, 3)).unwrap();
        assert_eq!(set.x, vec![1.0; 64]);
        assert!(split(&set, 1.0, 0).is_err() && split(&set, f64::NAN, 0).is_err());
        assert!(holdout(&set, 0.0).is_err());
    }

    #[test]
    fn corrupt_gzip_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.csv.gz");
        std::fs::write(&path, b"not gzip").unwrap();
        let err = load(&path).unwrap_err();
        assert!(format!("{err:#}").contains("d.csv.gz"), "{err:#}");
    }
}
