//! WikiText-2 and WikiText-103, word level: words separated by spaces, `<unk>` already applied.
//!
//! Tokenised as pytorch/examples' `word_language_model` does it, so perplexities compare: each
//! line's whitespace-separated words, then `<eos>`; the vocabulary is the training split's
//! words in order of first appearance.

use super::download::{cache_dir, ensure_extracted, Checksum, Remote};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// The unknown-word token (already in the data; words outside a vocabulary map to it too).
pub const UNK: &str = "<unk>";
/// The end-of-line token appended to every line.
pub const EOS: &str = "<eos>";

/// Which WikiText.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corpus {
    /// WikiText-2 (about 2 M training tokens).
    WikiText2,
    /// WikiText-103 (about 103 M training tokens).
    WikiText103,
}

impl Corpus {
    /// The official word-level archive. md5 as recorded by torchtext for the original S3 files;
    /// the author's own mirror is tried first because the S3 bucket has been unreliable.
    pub fn remote(self) -> Remote {
        match self {
            Corpus::WikiText2 => Remote {
                urls: &[
                    "https://wikitext.smerity.com/wikitext-2-v1.zip",
                    "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
                ],
                file: "wikitext-2-v1.zip",
                checksum: Checksum::Md5("542ccefacc6c27f945fb54453812b3cd"),
            },
            Corpus::WikiText103 => Remote {
                urls: &[
                    "https://wikitext.smerity.com/wikitext-103-v1.zip",
                    "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip",
                ],
                file: "wikitext-103-v1.zip",
                checksum: Checksum::Md5("9ddaacaf6af0710eda8c456decff7832"),
            },
        }
    }

    /// The folder the archive unpacks to.
    pub fn folder(self) -> &'static str {
        match self {
            Corpus::WikiText2 => "wikitext-2",
            Corpus::WikiText103 => "wikitext-103",
        }
    }
}

/// Which part of the corpus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextSplit {
    /// Training text (builds the vocabulary).
    Train,
    /// Validation text.
    Valid,
    /// Test text.
    Test,
}

impl TextSplit {
    /// File names accepted for the split: the official archive's, then pytorch/examples'.
    pub fn file_names(self) -> [&'static str; 2] {
        match self {
            TextSplit::Train => ["wiki.train.tokens", "train.txt"],
            TextSplit::Valid => ["wiki.valid.tokens", "valid.txt"],
            TextSplit::Test => ["wiki.test.tokens", "test.txt"],
        }
    }
}

/// Word ↔ id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vocab {
    /// The word of each id.
    pub words: Vec<String>,
    /// The id of each word.
    pub index: HashMap<String, u32>,
}

impl Vocab {
    /// The vocabulary of `text` (the training split): its words and `<eos>` in order of first
    /// appearance, plus `<unk>` at the end when the text lacks it, so unknown words always
    /// have an id.
    pub fn build(text: &str) -> Vocab {
        let mut vocab = Vocab::default();
        text.lines().for_each(|line| vocab.add_line(line));
        vocab.with_unk()
    }

    /// The `max` most frequent words of `text` (`<eos>` counted once per line; ties broken by
    /// first appearance), plus `<unk>`, which every other word becomes: a small vocabulary
    /// for CPU-sized models.
    pub fn most_frequent(text: &str, max: usize) -> Vocab {
        let full = Vocab::build(text);
        let mut counts = vec![0u64; full.len()];
        for line in text.lines() {
            for word in line.split_whitespace().chain([EOS]) {
                counts[full.index[word] as usize] += 1;
            }
        }
        let mut ids: Vec<usize> = (0..full.len()).collect();
        ids.sort_by_key(|&i| std::cmp::Reverse(counts[i]));
        ids.truncate(max);
        ids.sort_unstable();
        let mut vocab = Vocab::default();
        for i in ids {
            let word = &full.words[i];
            vocab.index.insert(word.clone(), vocab.words.len() as u32);
            vocab.words.push(word.clone());
        }
        vocab.with_unk()
    }

    fn add_line(&mut self, line: &str) {
        for word in line.split_whitespace().chain([EOS]) {
            if !self.index.contains_key(word) {
                self.index.insert(word.to_string(), self.words.len() as u32);
                self.words.push(word.to_string());
            }
        }
    }

    fn with_unk(mut self) -> Vocab {
        if !self.index.contains_key(UNK) {
            self.index.insert(UNK.to_string(), self.words.len() as u32);
            self.words.push(UNK.to_string());
        }
        self
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether there are no words (only for a vocabulary not made by [`Vocab::build`]).
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The id of `word`, if known.
    pub fn id(&self, word: &str) -> Option<u32> {
        self.index.get(word).copied()
    }
}

/// A split as ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// One id per token, `<eos>` included.
    pub ids: Vec<u32>,
    /// How many tokens were not in the vocabulary and became `<unk>` (those already written
    /// `<unk>` in the text are not counted).
    pub unknown: usize,
}

/// Maps lines to ids, counting the words the vocabulary lacks.
struct Encoder<'a> {
    vocab: &'a Vocab,
    unk: u32,
    out: Encoded,
}

impl<'a> Encoder<'a> {
    fn new(vocab: &'a Vocab) -> Result<Self> {
        let unk = vocab
            .id(UNK)
            .with_context(|| format!("the vocabulary has no {UNK}"))?;
        Ok(Encoder {
            vocab,
            unk,
            out: Encoded {
                ids: Vec::new(),
                unknown: 0,
            },
        })
    }

    fn line(&mut self, line: &str) {
        for word in line.split_whitespace().chain([EOS]) {
            let id = self.vocab.id(word).unwrap_or_else(|| {
                self.out.unknown += 1;
                self.unk
            });
            self.out.ids.push(id);
        }
    }
}

/// Encodes `text` with `vocab`; words it lacks become `<unk>` and are counted.
pub fn encode(text: &str, vocab: &Vocab) -> Result<Encoded> {
    let mut encoder = Encoder::new(vocab)?;
    text.lines().for_each(|line| encoder.line(line));
    Ok(encoder.out)
}

/// Calls `f` on each line of the file, streamed (WikiText-103's training split is 540 MB, so
/// it is never held whole); errors name the file and line.
fn for_each_line(path: &Path, mut f: impl FnMut(&str)) -> Result<()> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    for number in 1.. {
        line.clear();
        let read = reader.read_line(&mut line);
        if read.with_context(|| format!("reading {} line {number}", path.display()))? == 0 {
            break;
        }
        f(&line);
    }
    Ok(())
}

/// Builds the vocabulary from a (training) file.
pub fn vocab_from_file(path: &Path) -> Result<Vocab> {
    let mut vocab = Vocab::default();
    for_each_line(path, |line| vocab.add_line(line))?;
    Ok(vocab.with_unk())
}

/// Reads and encodes a split file with `vocab`.
pub fn read_split(path: &Path, vocab: &Vocab) -> Result<Encoded> {
    let mut encoder = Encoder::new(vocab).with_context(|| format!("encoding {}", path.display()))?;
    for_each_line(path, |line| encoder.line(line))?;
    Ok(encoder.out)
}

/// The file of `split`: in `data_dir` (itself or its `wikitext-2`/`wikitext-103` folder) when
/// given, never downloading; else in the cache, downloaded and extracted on first use.
pub fn locate(corpus: Corpus, split: TextSplit, data_dir: Option<&Path>) -> Result<PathBuf> {
    let find = |dir: &Path| {
        [dir.to_path_buf(), dir.join(corpus.folder())]
            .into_iter()
            .flat_map(|d| split.file_names().map(|name| d.join(name)))
            .find(|p| p.is_file())
    };
    match data_dir {
        Some(dir) => find(dir).with_context(|| {
            format!(
                "no {:?} split of {} in {} (expected {} there or in {}/)",
                split,
                corpus.folder(),
                dir.display(),
                split.file_names().join(" or "),
                corpus.folder()
            )
        }),
        None => {
            let cache = cache_dir()?;
            if let Some(path) = find(&cache) {
                return Ok(path);
            }
            let folder = ensure_extracted(&corpus.remote(), &cache, corpus.folder())?;
            match find(&folder) {
                Some(path) => Ok(path),
                None => bail!("{} has no {}", folder.display(), split.file_names()[0]),
            }
        }
    }
}

/// Lays `ids` out as `batch` columns of equal length, each a contiguous stretch of the text
/// (pytorch/examples' `batchify`; the tail that does not fill a row is dropped).
pub fn batchify(ids: &[u32], batch: usize) -> Vec<Vec<u32>> {
    let rows = ids.len().checked_div(batch).unwrap_or(0);
    (0..batch)
        .map(|b| ids[b * rows..(b + 1) * rows].to_vec())
        .collect()
}

/// The stream that [`batchify`] cuts into the first `rows` tokens of each of the `columns`
/// columns of `batchify(ids, columns)` (`rows` at most a column's length): a run that trains
/// on the first windows of each column only, as a stream of its own.
pub fn leading_rows(ids: &[u32], columns: usize, rows: usize) -> Vec<u32> {
    batchify(ids, columns)
        .into_iter()
        .flat_map(|c| c.into_iter().take(rows))
        .collect()
}

/// One training window over the columns: `input[b][t]` is column `b` at `start + t`, and
/// `target[b][t]` the token after it. Both are row-major `batch × len` (batch first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Input ids, `batch × len`.
    pub input: Vec<u32>,
    /// The next id after each input id, `batch × len`.
    pub target: Vec<u32>,
    /// Number of columns.
    pub batch: usize,
    /// Tokens per column: `bptt`, or fewer in the last window.
    pub len: usize,
}

/// The window starting at row `start`, `bptt` long or what is left before the last row
/// (pytorch/examples' `get_batch`); `None` when no target remains or `bptt` is 0.
pub fn window(columns: &[Vec<u32>], start: usize, bptt: usize) -> Option<Window> {
    let rows = columns.first().map_or(0, Vec::len);
    let len = bptt.min(rows.checked_sub(start + 1)?);
    if len == 0 {
        return None;
    }
    let input = columns
        .iter()
        .flat_map(|c| c[start..start + len].iter().copied())
        .collect();
    let target = columns
        .iter()
        .flat_map(|c| c[start + 1..start + 1 + len].iter().copied())
        .collect();
    Some(Window {
        input,
        target,
        batch: columns.len(),
        len,
    })
}

/// All windows of an epoch, starting at rows 0, `bptt`, 2·`bptt`, …
pub fn windows(columns: &[Vec<u32>], bptt: usize) -> impl Iterator<Item = Window> + '_ {
    (0..)
        .map(move |k| window(columns, k * bptt, bptt))
        .take_while(Option::is_some)
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped(name: &str) -> PathBuf {
        super::super::shipped_dir().join("wikitext-2").join(name)
    }

    #[test]
    fn most_frequent_keeps_the_top_words_and_unk() {
        // a: 4, b: 2, <eos>: 2 (b first seen), c: 1.
        let v = Vocab::most_frequent("a b a c\na a b\n", 2);
        assert_eq!(v.words, ["a", "b", "<unk>"]);
        let e = encode("a b z\n", &v).unwrap();
        assert_eq!(e.ids, [0, 1, 2, 2]);
    }

    #[test]
    fn shipped_splits_tokenise_like_pytorch_examples() {
        let dir = super::super::shipped_dir().join("wikitext-2");
        let valid = locate(Corpus::WikiText2, TextSplit::Valid, Some(&dir)).unwrap();
        let test = locate(Corpus::WikiText2, TextSplit::Test, Some(&dir)).unwrap();
        assert_eq!(
            (valid.clone(), test.clone()),
            (shipped("valid.txt"), shipped("test.txt"))
        );
        let vocab = vocab_from_file(&valid).unwrap();
        assert_eq!(vocab.words[..2], ["<eos>", "="]);
        let v = read_split(&valid, &vocab).unwrap();
        // Published token counts of WikiText-2 (words plus one <eos> per line).
        assert_eq!((v.ids.len(), v.unknown), (217_646, 0));
        let t = read_split(&test, &vocab).unwrap();
        assert_eq!(t.ids.len(), 245_569);
        let unk = vocab.id(UNK).unwrap();
        let text = std::fs::read_to_string(&test).unwrap();
        // The streamed file readers agree with the in-memory ones.
        assert_eq!(encode(&text, &vocab).unwrap(), t);
        assert_eq!(Vocab::build(&std::fs::read_to_string(&valid).unwrap()), vocab);
        let unknown_words = text.split_whitespace().filter(|w| vocab.id(w).is_none()).count();
        assert!(t.unknown > 0 && t.unknown == unknown_words, "{}", t.unknown);
        assert!(t.ids.iter().filter(|&&i| i == unk).count() >= t.unknown);
        assert!(t.ids.iter().all(|&i| (i as usize) < vocab.len()));
    }

    #[test]
    fn vocab_gets_unk_when_missing_and_encoding_counts_unknowns() {
        let vocab = Vocab::build("a b\n\n b c \n");
        assert_eq!(vocab.words, ["a", "b", "<eos>", "c", "<unk>"]);
        let e = encode(" a x\ny c", &vocab).unwrap();
        assert_eq!(e.ids, [0, 4, 2, 4, 3, 2]);
        assert_eq!(e.unknown, 2);
        assert!(encode("a", &Vocab::default()).is_err());
    }

    #[test]
    fn batchify_and_windows_match_pytorch_examples() {
        let ids: Vec<u32> = (0..11).collect();
        let cols = batchify(&ids, 2);
        assert_eq!(cols, vec![vec![0, 1, 2, 3, 4], vec![5, 6, 7, 8, 9]]);
        let w: Vec<Window> = windows(&cols, 3).collect();
        assert_eq!(w.len(), 2);
        assert_eq!(
            (w[0].input.clone(), w[0].target.clone()),
            (vec![0, 1, 2, 5, 6, 7], vec![1, 2, 3, 6, 7, 8])
        );
        assert_eq!(
            (w[1].len, w[1].input.clone(), w[1].target.clone()),
            (1, vec![3, 8], vec![4, 9])
        );
        assert!(window(&cols, 4, 3).is_none() && window(&cols, 0, 0).is_none());
        assert!(batchify(&ids, 0).is_empty() && windows(&[], 3).next().is_none());
        assert!(windows(&batchify(&ids, 20), 3).next().is_none());
    }

    #[test]
    fn missing_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = locate(Corpus::WikiText103, TextSplit::Train, Some(dir.path())).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("wiki.train.tokens or train.txt") && msg.contains("wikitext-103"),
            "{msg}"
        );
        std::fs::create_dir(dir.path().join("wikitext-103")).unwrap();
        std::fs::write(dir.path().join("wikitext-103/wiki.train.tokens"), " x y \n").unwrap();
        let path = locate(Corpus::WikiText103, TextSplit::Train, Some(dir.path())).unwrap();
        assert_eq!(vocab_from_file(&path).unwrap().len(), 4);
        let bad = dir.path().join("bad.txt");
        std::fs::write(&bad, [0xff, 0xfe]).unwrap();
        assert!(format!("{:#}", read_split(&bad, &Vocab::build("a")).unwrap_err()).contains("bad.txt"));
    }
}
