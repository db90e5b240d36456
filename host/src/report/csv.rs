//! The one CSV dialect every report file uses, and a crash-safe appending writer for it.
//!
//! A file is a header line followed by one row per line, comma-separated, `\n`-terminated, no
//! quoting (no field is text). Numbers are written with Rust's shortest round-trip formatting, so
//! reading a file back gives the same `f64`s; a non-finite value is written `NaN`, `inf` or `-inf`
//! (a diverged run) and an absent value as an empty field. Every row has a key (the epoch or the
//! step) that strictly increases down the file.
//!
//! [`CsvWriter::append`] writes each row with one `write` call straight to the file (no user-space
//! buffer), so a run killed mid-way keeps every row it finished. [`CsvWriter::resume`] reopens a
//! file for a resumed run and cuts the rows after the resumed key, so a resumed run never writes a
//! row twice.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

/// A row type of one of the report's CSV files.
pub trait CsvRow: Sized {
    /// What selects the file's header: [`crate::report::MetricsColumns`] for `metrics.csv`,
    /// [`crate::report::IterationColumns`] for `iterations.csv`, `()` for files with a single
    /// header.
    type Kind: Copy + PartialEq + std::fmt::Debug;
    /// The name of the key column (`epoch`, `step`).
    const KEY: &'static str;
    /// The header line (without its newline) for files of `kind`.
    fn header(kind: Self::Kind) -> String;
    /// The kind whose header is `header`, if any.
    fn kind_of_header(header: &str) -> Option<Self::Kind>;
    /// Whether a run that writes files of kind `wanted` may resume a file of kind `found`: the
    /// same kind, or an older layout of it (fewer optional columns), which the file then keeps.
    fn resumes_as(found: Self::Kind, wanted: Self::Kind) -> bool {
        found == wanted
    }
    /// The row's key: strictly increasing down a file.
    fn key(&self) -> u64;
    /// The row's fields for a file of `kind`, in header order.
    fn fields(&self, kind: Self::Kind) -> Vec<Field>;
    /// Builds a row from its fields (as many as the header has), or says what is wrong.
    fn parse(fields: &[&str], kind: Self::Kind) -> Result<Self, String>;
    /// Checks a row's values for `kind` (ranges), or says what is wrong.
    fn validate(&self, kind: Self::Kind) -> Result<(), String>;
}

/// One field's value, for writing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field {
    /// A key or count.
    Int(u64),
    /// A measurement; non-finite values are written `NaN`, `inf`, `-inf`.
    Float(f64),
    /// A measurement that may be absent (empty field).
    Optional(Option<f64>),
}

impl Field {
    fn write(self, out: &mut String) {
        use std::fmt::Write as _;
        // Writing into a String cannot fail.
        let _ = match self {
            Field::Int(v) => write!(out, "{v}"),
            Field::Float(v) | Field::Optional(Some(v)) => write!(out, "{v}"),
            Field::Optional(None) => Ok(()),
        };
    }
}

/// Parses an integer field named `name`.
pub(crate) fn parse_int(name: &str, text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("field `{name}`: `{text}` is not a non-negative integer"))
}

/// Parses a number field named `name` (`NaN`, `inf`, `-inf` accepted).
pub(crate) fn parse_float(name: &str, text: &str) -> Result<f64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("field `{name}`: `{text}` is not a number"))
}

/// Parses a number field named `name` that may be empty (absent).
pub(crate) fn parse_optional(name: &str, text: &str) -> Result<Option<f64>, String> {
    if text.trim().is_empty() {
        Ok(None)
    } else {
        parse_float(name, text).map(Some)
    }
}

/// Field `i` of a row, named `name`, as [`parse_optional`]; `None` when the row has no such field
/// (a column of a layout the file does not have).
pub(crate) fn parse_optional_at(f: &[&str], i: usize, name: &str) -> Result<Option<f64>, String> {
    f.get(i).map_or(Ok(None), |text| parse_optional(name, text))
}

/// Checks that a fraction (accuracy, share) lies in [0, 1]; NaN passes (a diverged run).
pub(crate) fn check_fraction(name: &str, value: f64) -> Result<(), String> {
    if value.is_nan() || (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is {value}, outside [0, 1] (a fraction, not a percentage)"
        ))
    }
}

/// One line of a file: its 1-based number, its text without the line ending, the byte offset just
/// after it, and whether it ended with `\n`.
struct Line<'a> {
    number: usize,
    text: &'a str,
    end: usize,
    terminated: bool,
}

fn lines(text: &str) -> impl Iterator<Item = Line<'_>> {
    let mut start = 0;
    let mut number = 0;
    std::iter::from_fn(move || {
        if start >= text.len() {
            return None;
        }
        number += 1;
        let rest = &text[start..];
        let (body, len, terminated) = match rest.find('\n') {
            Some(i) => (&rest[..i], i + 1, true),
            None => (rest, rest.len(), false),
        };
        start += len;
        Some(Line {
            number,
            text: body.strip_suffix('\r').unwrap_or(body),
            end: start,
            terminated,
        })
    })
}

/// Reads a file's text, naming the file on failure.
fn read_text(path: &Path) -> Result<String> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow!(
            "{}: not UTF-8 text (byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

fn parse_header<R: CsvRow>(line: Option<&Line<'_>>, path: &Path) -> Result<R::Kind> {
    let Some(line) = line else {
        bail!("{}: line 1: empty file, expected a header", path.display());
    };
    R::kind_of_header(line.text.trim())
        .ok_or_else(|| anyhow!("{}: line 1: unexpected header `{}`", path.display(), line.text))
}

/// Parses one data line and checks that its key follows `previous`.
fn parse_row<R: CsvRow>(line: &Line<'_>, kind: R::Kind, previous: Option<u64>, path: &Path) -> Result<R> {
    let at = || format!("{}: line {}", path.display(), line.number);
    let fields: Vec<&str> = line.text.split(',').collect();
    let expected = R::header(kind).split(',').count();
    if fields.len() != expected {
        bail!("{}: expected {expected} fields, found {}", at(), fields.len());
    }
    let row = R::parse(&fields, kind).map_err(|e| anyhow!("{}: {e}", at()))?;
    row.validate(kind).map_err(|e| anyhow!("{}: {e}", at()))?;
    if let Some(prev) = previous {
        if row.key() <= prev {
            bail!(
                "{}: {} {} does not come after {} {prev} (duplicate or out-of-order rows)",
                at(),
                R::KEY,
                row.key(),
                R::KEY
            );
        }
    }
    Ok(row)
}

/// Reads a whole file: its kind (from the header) and its rows. Errors name the file and line.
/// Blank lines are skipped.
pub fn read_rows<R: CsvRow>(path: &Path) -> Result<(R::Kind, Vec<R>)> {
    let text = read_text(path)?;
    let mut all = lines(&text);
    let kind = parse_header::<R>(all.next().as_ref(), path)?;
    let mut rows: Vec<R> = Vec::new();
    for line in all {
        if line.text.trim().is_empty() {
            continue;
        }
        let row = parse_row::<R>(&line, kind, rows.last().map(R::key), path)?;
        rows.push(row);
    }
    Ok((kind, rows))
}

/// Appends rows to one report CSV, one `write` per row.
#[derive(Debug)]
pub struct CsvWriter<R: CsvRow> {
    file: File,
    path: PathBuf,
    kind: R::Kind,
    last_key: Option<u64>,
    _row: PhantomData<fn(&R)>,
}

impl<R: CsvRow> CsvWriter<R> {
    /// Creates (or truncates) the file, creating its folder, and writes the header for `kind`.
    pub fn create(path: &Path, kind: R::Kind) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        file.write_all(format!("{}\n", R::header(kind)).as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(CsvWriter {
            file,
            path: path.to_path_buf(),
            kind,
            last_key: None,
            _row: PhantomData,
        })
    }

    /// Reopens the file of a run resumed after key `last_key` (the last finished epoch or step):
    /// rows up to `last_key` stay, later rows and an unfinished last line (a run killed while
    /// writing it) are cut, and new rows append after them. A missing or empty file is created as
    /// by [`CsvWriter::create`]. A file of an older layout of `kind` ([`CsvRow::resumes_as`])
    /// keeps its layout: new rows are written in it. A file written for another kind, or a
    /// malformed kept row, is an error naming the line.
    pub fn resume(path: &Path, kind: R::Kind, last_key: u64) -> Result<Self> {
        if !path.exists() || fs::metadata(path).map(|m| m.len() == 0).unwrap_or(false) {
            return Self::create(path, kind);
        }
        let text = read_text(path)?;
        let mut all = lines(&text);
        let header = all.next();
        if header.as_ref().is_some_and(|h| !h.terminated) {
            // Killed while writing the header: nothing was recorded yet.
            return Self::create(path, kind);
        }
        let found = parse_header::<R>(header.as_ref(), path)?;
        if !R::resumes_as(found, kind) {
            bail!("{}: written for {found:?}, resumed as {kind:?}", path.display());
        }
        let kind = found;
        let mut keep = header.map_or(0, |h| h.end);
        let mut last = None;
        for line in all {
            if !line.terminated {
                break;
            }
            if line.text.trim().is_empty() {
                keep = line.end;
                continue;
            }
            let row = parse_row::<R>(&line, kind, last, path)?;
            if row.key() > last_key {
                break;
            }
            last = Some(row.key());
            keep = line.end;
        }
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        file.set_len(keep as u64)
            .with_context(|| format!("truncating {}", path.display()))?;
        let mut writer = CsvWriter {
            file,
            path: path.to_path_buf(),
            kind,
            last_key: last,
            _row: PhantomData,
        };
        writer.seek_end()?;
        Ok(writer)
    }

    fn seek_end(&mut self) -> Result<()> {
        use std::io::{Seek, SeekFrom};
        self.file
            .seek(SeekFrom::End(0))
            .with_context(|| format!("seeking {}", self.path.display()))?;
        Ok(())
    }

    fn write_line(&mut self, line: &str) -> Result<()> {
        self.file
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| self.file.flush())
            .with_context(|| format!("writing {}", self.path.display()))
    }

    /// Appends one row. Its key must come after the last row's, and its values must be in range
    /// (accuracies and shares in [0, 1]).
    pub fn append(&mut self, row: &R) -> Result<()> {
        if let Some(prev) = self.last_key {
            if row.key() <= prev {
                bail!(
                    "{}: {} {} does not come after {} {prev}",
                    self.path.display(),
                    R::KEY,
                    row.key(),
                    R::KEY
                );
            }
        }
        row.validate(self.kind)
            .map_err(|e| anyhow!("{}: {e}", self.path.display()))?;
        let mut line = String::new();
        for (i, field) in row.fields(self.kind).into_iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            field.write(&mut line);
        }
        self.write_line(&line)?;
        self.last_key = Some(row.key());
        Ok(())
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The key of the last row in the file, if any.
    pub fn last_key(&self) -> Option<u64> {
        self.last_key
    }
}
