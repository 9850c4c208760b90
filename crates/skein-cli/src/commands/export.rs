/*!
`skein export`: the whole graph as JSONL, on stdout or in a file.

`export -o FILE` never leaves a truncated or mixed file where a good one
was: it writes a temporary file of its own beside FILE and renames it into
place (so concurrent exports each produce a whole file, and the last rename
wins). A device or pipe (`-o /dev/stdout`) is written through instead; a
directory, a block device or a socket is refused.
*/

use super::common::context::{Context, Globals};
use crate::ui::{self};
use anyhow::{Context as _, Result, bail};
use clap::Args;
use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Write to this file instead of stdout (written beside it and renamed into place; a device or
    /// pipe, such as /dev/stdout, is written through)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn run(globals: &Globals, args: ExportArgs) -> Result<ExitCode> {
    let ctx = &globals.open_to_show()?;
    match &args.output {
        Some(path) => {
            match target(path)? {
                Target::Replace(file) => export_replacing(ctx, &file)?,
                Target::Through => {
                    let file = OpenOptions::new()
                        .write(true)
                        .open(path)
                        .with_context(|| format!("cannot open {}", path.display()))?;
                    let mut out = BufWriter::new(file);
                    ctx.store
                        .export(&mut out)
                        .map_err(anyhow::Error::from)
                        .and_then(|()| Ok(out.flush()?))
                        .with_context(|| {
                            format!("cannot write the export to {}", path.display())
                        })?;
                }
            }
            ui::note(format!("exported to {}", path.display()));
        }
        None => {
            let mut out = BufWriter::new(ui::Stdout);
            ctx.store.export(&mut out)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How `export -o PATH` writes.
enum Target {
    /// A regular file (or none yet): written whole beside it, then renamed
    /// over it. Through a symbolic link, the file it points at.
    Replace(PathBuf),
    /// A character device or a pipe (`/dev/stdout`, `>(gzip > x.gz)`):
    /// written through, since naming one means writing into it.
    Through,
}

fn target(path: &Path) -> Result<Target> {
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_file() => Ok(Target::Replace(
            std::fs::canonicalize(path)
                .with_context(|| format!("cannot resolve {}", path.display()))?,
        )),
        Ok(metadata) if metadata.is_dir() => bail!(
            "{} is a directory: give the path of the file to write the export to",
            path.display()
        ),
        Ok(metadata) => special_file(path, &metadata.file_type()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(path).is_ok() {
                bail!(
                    "{} is a symbolic link to a file that does not exist: give the path of the file itself",
                    path.display()
                );
            }
            Ok(Target::Replace(path.to_path_buf()))
        }
        Err(error) => Err(error).with_context(|| format!("cannot inspect {}", path.display())),
    }
}

#[cfg(unix)]
fn special_file(path: &Path, kind: &std::fs::FileType) -> Result<Target> {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_block_device() {
        bail!(
            "{} is a block device: skein does not write an export over a disk",
            path.display()
        );
    }
    if kind.is_socket() {
        bail!("{} is a socket: give the path of a file", path.display());
    }
    Ok(Target::Through)
}

#[cfg(not(unix))]
fn special_file(_path: &Path, _kind: &std::fs::FileType) -> Result<Target> {
    Ok(Target::Through)
}

/// Write the export to a temporary file of its own in `file`'s directory
/// (so concurrent exports never share one, and nothing else is touched),
/// then rename it over `file`. On any failure the temporary file is
/// removed and `file` is as it was. An existing file keeps its
/// permissions; a new one is readable by its owner only, as an export
/// holds every conversation.
fn export_replacing(ctx: &Context, file: &Path) -> Result<()> {
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = file
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut partial = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".partial")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    if let Ok(existing) = std::fs::metadata(file) {
        partial
            .as_file()
            .set_permissions(existing.permissions())
            .with_context(|| format!("cannot give the export {}'s permissions", file.display()))?;
    }
    let written = (|| -> Result<()> {
        let mut out = BufWriter::new(partial.as_file_mut());
        ctx.store.export(&mut out)?;
        out.flush()?;
        drop(out);
        partial.as_file().sync_all()?;
        Ok(())
    })();
    written.with_context(|| format!("cannot write the export to {}", file.display()))?;
    partial
        .persist(file)
        .map_err(|error| error.error)
        .with_context(|| format!("cannot write {}", file.display()))?;
    Ok(())
}
