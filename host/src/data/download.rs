//! Downloads into the cache folder with a checksum and a progress bar; archive extraction.
//!
//! A download goes to a hidden part file beside its destination and is renamed into place only
//! after its checksum matched, so the cache never holds a partial or corrupt file under the real
//! name, and an interrupted run just starts the download again.

use anyhow::{bail, ensure, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::Digest;
use std::fs::{self, File};
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Environment variable that overrides the cache folder.
pub const CACHE_ENV: &str = "HOMEADAM_DATA";

/// An expected digest, lowercase hex, of the kind the dataset's publisher gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checksum {
    /// MD5 (what CIFAR-10, Tiny-ImageNet and WikiText are published or mirrored with).
    Md5(&'static str),
    /// SHA-256.
    Sha256(&'static str),
}

impl Checksum {
    fn kind(&self) -> &'static str {
        match self {
            Checksum::Md5(_) => "md5",
            Checksum::Sha256(_) => "sha256",
        }
    }

    fn expected(&self) -> &'static str {
        match self {
            Checksum::Md5(h) | Checksum::Sha256(h) => h,
        }
    }
}

/// A digest being computed over a stream.
enum Hasher {
    Md5(md5::Md5),
    Sha256(sha2::Sha256),
}

impl Hasher {
    fn new(checksum: &Checksum) -> Self {
        match checksum {
            Checksum::Md5(_) => Hasher::Md5(md5::Md5::new()),
            Checksum::Sha256(_) => Hasher::Sha256(sha2::Sha256::new()),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Md5(h) => h.update(bytes),
            Hasher::Sha256(h) => h.update(bytes),
        }
    }

    fn hex(self) -> String {
        let digest = match self {
            Hasher::Md5(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
        };
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A published archive: where to get it, under which file name to cache it, and its digest.
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    /// URLs tried in order (mirrors), each expected to serve the identical file.
    pub urls: &'static [&'static str],
    /// File name in the cache folder; its suffix (`.tar.gz`, `.tgz`, `.zip`) says how to extract.
    pub file: &'static str,
    /// The archive's digest.
    pub checksum: Checksum,
}

/// The cache folder: `$HOMEADAM_DATA` when set and non-empty, else `~/.cache/homeadam`.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(CACHE_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .with_context(|| format!("no cache folder: set {CACHE_ENV} (or HOME), or pass --data-dir"))?;
    Ok(PathBuf::from(home).join(".cache").join("homeadam"))
}

/// Deletes the part file on every early return; `keep` after the rename.
struct PartFile {
    path: PathBuf,
    keep: bool,
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if !self.keep {
            // Best effort: the file may not have been created yet.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Downloads `url` to `dest`, showing a progress bar (bytes, rate, ETA) on a terminal, and
/// renames it into place only when its digest equals `checksum`. On a network error, a short
/// body or a mismatch it returns an error and leaves no file behind (an older `dest` stays).
pub fn fetch(url: &str, checksum: &Checksum, dest: &Path) -> Result<()> {
    let name = dest
        .file_name()
        .with_context(|| format!("download destination {} has no file name", dest.display()))?
        .to_string_lossy()
        .into_owned();
    let dir = dest
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir).with_context(|| format!("creating the cache folder {}", dir.display()))?;
    let mut part = PartFile {
        path: dir.join(format!(".{name}.part-{}", std::process::id())),
        keep: false,
    };

    let bar = ProgressBar::no_length().with_prefix(name.clone());
    let result = download(url, checksum, &part.path, &bar);
    bar.finish_and_clear();
    let (bytes, got) = result?;
    ensure!(
        got == checksum.expected(),
        "{url}: {} mismatch for {name}: expected {}, got {got} ({bytes} bytes); the download was discarded",
        checksum.kind(),
        checksum.expected()
    );
    fs::rename(&part.path, dest).with_context(|| format!("moving the download into {}", dest.display()))?;
    part.keep = true;
    Ok(())
}

/// Streams `url` into `part`, hashing on the way; returns the byte count and the hex digest.
fn download(url: &str, checksum: &Checksum, part: &Path, bar: &ProgressBar) -> Result<(u64, String)> {
    let config = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(30)))
        // A stalled server fails the download instead of hanging the run; no limit on the
        // whole transfer, which takes as long as the link needs.
        .timeout_per_read(Some(Duration::from_secs(60)))
        .build();
    let agent = ureq::Agent::new_with_config(config);
    let response = agent
        .get(url)
        // The digest is of the archive as published: ask for it unencoded.
        .header("Accept-Encoding", "identity")
        .call()
        .with_context(|| format!("downloading {url}"))?;
    let length = response.body().content_length();
    let template = match length {
        Some(len) => {
            bar.set_length(len);
            "{prefix} {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}"
        }
        // Without a Content-Length there is no total and no ETA: show what has arrived.
        None => "{prefix} {spinner} {bytes} {binary_bytes_per_sec}",
    };
    bar.set_style(ProgressStyle::with_template(template).context("progress bar template")?);
    let mut reader = response.into_body().into_reader();
    let mut file = File::create(part).with_context(|| format!("creating {}", part.display()))?;
    let mut hasher = Hasher::new(checksum);
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let k = reader
            .read(&mut buf)
            .with_context(|| format!("downloading {url} (after {total} bytes)"))?;
        if k == 0 {
            break;
        }
        hasher.update(&buf[..k]);
        file.write_all(&buf[..k])
            .with_context(|| format!("writing {}", part.display()))?;
        total += k as u64;
        bar.inc(k as u64);
    }
    file.sync_all()
        .with_context(|| format!("writing {}", part.display()))?;
    if let Some(len) = length {
        ensure!(
            total == len,
            "downloading {url}: the connection ended after {total} of {len} bytes"
        );
    }
    Ok((total, hasher.hex()))
}

/// Checks that the file at `path` has the digest `checksum`.
pub fn verify(path: &Path, checksum: &Checksum) -> Result<()> {
    let mut reader = BufReader::new(File::open(path).with_context(|| format!("opening {}", path.display()))?);
    let mut hasher = Hasher::new(checksum);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let k = reader
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if k == 0 {
            break;
        }
        hasher.update(&buf[..k]);
    }
    let got = hasher.hex();
    ensure!(
        got == checksum.expected(),
        "{}: {} mismatch: expected {}, got {got}",
        path.display(),
        checksum.kind(),
        checksum.expected()
    );
    Ok(())
}

/// The archive of `remote` in `dir`: kept when already there with the right digest, else
/// downloaded from the first of its URLs that works.
pub fn fetch_remote(remote: &Remote, dir: &Path) -> Result<PathBuf> {
    let dest = dir.join(remote.file);
    if dest.is_file() && verify(&dest, &remote.checksum).is_ok() {
        return Ok(dest);
    }
    let mut errors = Vec::new();
    for url in remote.urls {
        match fetch(url, &remote.checksum, &dest) {
            Ok(()) => return Ok(dest),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    bail!("could not download {}:\n  {}", remote.file, errors.join("\n  "))
}

/// Unpacks a `.tar.gz` archive into `dir` (the `tar` crate refuses entries that would land
/// outside it).
pub fn extract_tar_gz(archive: &Path, dir: &Path) -> Result<()> {
    let file = File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    tar::Archive::new(flate2::read::GzDecoder::new(BufReader::new(file)))
        .unpack(dir)
        .with_context(|| format!("extracting {} into {}", archive.display(), dir.display()))
}

/// Unpacks a `.zip` archive into `dir` (entries whose names would leave `dir` are refused).
pub fn extract_zip(archive: &Path, dir: &Path) -> Result<()> {
    let file = File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    zip::ZipArchive::new(BufReader::new(file))
        .and_then(|mut z| z.extract(dir))
        .with_context(|| format!("extracting {} into {}", archive.display(), dir.display()))
}

/// The folder `cache/top` that `remote`'s archive unpacks to, downloading and extracting it
/// first when it is not there. Extraction goes to a scratch folder that is renamed into place
/// whole, so `cache/top` existing means it is complete.
pub fn ensure_extracted(remote: &Remote, cache: &Path, top: &str) -> Result<PathBuf> {
    let target = cache.join(top);
    if target.is_dir() {
        return Ok(target);
    }
    let archive = fetch_remote(remote, cache)?;
    let scratch = cache.join(format!(".extract-{top}-{}", std::process::id()));
    // A scratch folder left by a crashed run of the same pid would mix two extractions.
    let _ = fs::remove_dir_all(&scratch);
    let result = (|| {
        if remote.file.ends_with(".tar.gz") || remote.file.ends_with(".tgz") {
            extract_tar_gz(&archive, &scratch)?;
        } else if remote.file.ends_with(".zip") {
            extract_zip(&archive, &scratch)?;
        } else {
            bail!(
                "{}: unknown archive type (expected .tar.gz, .tgz or .zip)",
                remote.file
            );
        }
        let unpacked = scratch.join(top);
        ensure!(
            unpacked.is_dir(),
            "{} has no top-level folder {top}",
            archive.display()
        );
        match fs::rename(&unpacked, &target) {
            // Another process finished the same extraction first: its copy is as good.
            Err(_) if target.is_dir() => Ok(()),
            r => r.with_context(|| format!("moving the extraction to {}", target.display())),
        }
    })();
    let _ = fs::remove_dir_all(&scratch);
    result?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::net::TcpListener;

    /// Serves `responses` (raw HTTP bytes), one per connection, on a local port; returns its URL.
    fn serve(responses: Vec<Vec<u8>>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for response in responses {
                let (stream, _) = listener.accept().unwrap();
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap() > 2 {
                    line.clear();
                }
                let mut stream = stream;
                let _ = stream.write_all(&response);
            }
        });
        format!("http://{addr}/file")
    }

    fn ok(body: &[u8]) -> Vec<u8> {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    }

    const ABC_SHA256: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    const ABC_MD5: &str = "900150983cd24fb0d6963f7d28e17f72";

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn fetch_verifies_and_renames() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("sub").join("abc.bin");
        fetch(&serve(vec![ok(b"abc")]), &Checksum::Sha256(ABC_SHA256), &dest).unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"abc");
        verify(&dest, &Checksum::Md5(ABC_MD5)).unwrap();
        assert_eq!(leftovers(dest.parent().unwrap()), vec!["abc.bin"]);
    }

    #[test]
    fn checksum_mismatch_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("abc.bin");
        let err = fetch(&serve(vec![ok(b"abd")]), &Checksum::Md5(ABC_MD5), &dest).unwrap_err();
        assert!(format!("{err:#}").contains("md5 mismatch for abc.bin"), "{err:#}");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn http_error_and_short_body_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("abc.bin");
        let not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec();
        let err = fetch(&serve(vec![not_found]), &Checksum::Md5(ABC_MD5), &dest).unwrap_err();
        assert!(format!("{err:#}").contains("404"), "{err:#}");
        let short = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nabc".to_vec();
        let err = fetch(&serve(vec![short]), &Checksum::Md5(ABC_MD5), &dest).unwrap_err();
        assert!(format!("{err:#}").contains("downloading"), "{err:#}");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn unreachable_server_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        // Bind then drop: the port is very likely closed now.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/x");
        let err = fetch(&url, &Checksum::Md5(ABC_MD5), &dir.path().join("x")).unwrap_err();
        assert!(format!("{err:#}").contains(&url), "{err:#}");
    }

    #[test]
    fn mirrors_are_tried_in_order_and_a_verified_file_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let bad = serve(vec![ok(b"xyz")]);
        let good = serve(vec![ok(b"abc")]);
        let urls: &'static [&'static str] = Box::leak(
            vec![
                &*Box::leak(bad.into_boxed_str()),
                &*Box::leak(good.into_boxed_str()),
            ]
            .into(),
        );
        let remote = Remote {
            urls,
            file: "abc.bin",
            checksum: Checksum::Md5(ABC_MD5),
        };
        let path = fetch_remote(&remote, dir.path()).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"abc");
        // Both servers are spent now: a second call must not download.
        assert_eq!(fetch_remote(&remote, dir.path()).unwrap(), path);
    }

    fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut builder = tar::Builder::new(gz);
        for (name, data) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            builder.append_data(&mut header, name, *data).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    fn zip_bytes(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (name, data) in files {
            w.start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    fn md5_hex(bytes: &[u8]) -> &'static str {
        let mut h = Hasher::new(&Checksum::Md5(""));
        h.update(bytes);
        Box::leak(h.hex().into_boxed_str())
    }

    #[test]
    fn ensure_extracted_unpacks_a_cached_archive_once() {
        for (file, bytes) in [
            (
                "a.tar.gz",
                tar_gz(&[("top/x.txt", b"hello"), ("top/d/y.txt", b"y")]),
            ),
            (
                "a.zip",
                zip_bytes(&[("top/x.txt", b"hello"), ("top/d/y.txt", b"y")]),
            ),
        ] {
            let cache = tempfile::tempdir().unwrap();
            fs::write(cache.path().join(file), &bytes).unwrap();
            // No URL: the verified archive in the cache must be enough.
            let remote = Remote {
                urls: &[],
                file,
                checksum: Checksum::Md5(md5_hex(&bytes)),
            };
            let top = ensure_extracted(&remote, cache.path(), "top").unwrap();
            assert_eq!(fs::read(top.join("x.txt")).unwrap(), b"hello");
            assert_eq!(fs::read(top.join("d/y.txt")).unwrap(), b"y");
            let mut names = leftovers(cache.path());
            names.sort();
            assert_eq!(names, vec![file.to_string(), "top".to_string()], "{file}");
            assert_eq!(ensure_extracted(&remote, cache.path(), "top").unwrap(), top);
        }
    }

    #[test]
    fn corrupt_archive_or_wrong_layout_is_an_error() {
        let cache = tempfile::tempdir().unwrap();
        // The error of extracting `bytes`, cached as a.zip with their checksum.
        let extract = |bytes: &[u8]| {
            fs::write(cache.path().join("a.zip"), bytes).unwrap();
            let remote = Remote {
                urls: &[],
                file: "a.zip",
                checksum: Checksum::Md5(md5_hex(bytes)),
            };
            format!(
                "{:#}",
                ensure_extracted(&remote, cache.path(), "top").unwrap_err()
            )
        };
        let err = extract(b"not a zip");
        assert!(err.contains("a.zip"), "{err}");
        let err = extract(&zip_bytes(&[("other/x.txt", b"x")]));
        assert!(err.contains("no top-level folder top"), "{err}");
        assert_eq!(leftovers(cache.path()), vec!["a.zip"]);
    }

    #[test]
    fn a_wrong_cached_archive_without_mirrors_names_the_file() {
        let cache = tempfile::tempdir().unwrap();
        fs::write(cache.path().join("a.zip"), b"tampered").unwrap();
        let remote = Remote {
            urls: &[],
            file: "a.zip",
            checksum: Checksum::Md5(ABC_MD5),
        };
        let err = fetch_remote(&remote, cache.path()).unwrap_err();
        assert!(format!("{err:#}").contains("could not download a.zip"), "{err:#}");
    }
}
