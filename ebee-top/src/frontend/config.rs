//! The settings file, `$XDG_CONFIG_HOME/ebee-top/config.toml` (else
//! `~/.config/ebee-top/config.toml`): read once before the terminal is taken, saved by the setup
//! screen (F2). A file that cannot be used is one warning and the defaults, never a refusal to
//! start, and is never written over: not a broken file, not a symbolic link, not something
//! other than a plain file. A save is atomic (a temporary file in the same directory, fsync,
//! rename), the directory is created 0700 and the file 0600.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use crate::app::settings::{self, Settings};

/// Saves the settings; the error is one line for the status line.
pub type Saver = Box<dyn FnMut(&Settings) -> Result<(), String>>;

/// Files larger than this are not settings.
const MAX_SIZE: u64 = 1 << 20;

/// What was read at start, and whether F2 may write the file.
#[derive(Debug, Default)]
pub struct Loaded {
    pub settings: Settings,
    /// The file, when there is one to use (not with `--no-config`, nor without a home).
    pub path: Option<PathBuf>,
    /// One line for stderr and the status line: what in the file could not be used.
    pub warning: Option<String>,
    /// Why F2 must not write the file (broken, a symbolic link...); None: it may.
    pub refuse: Option<String>,
}

impl Loaded {
    /// The setup screen's first line: where changes go.
    pub fn note(&self) -> String {
        match (&self.path, &self.refuse) {
            (None, Some(r)) => format!("not saved: {r}"),
            (None, None) => "not saved".into(),
            (Some(_), Some(r)) => format!("not saved: {r}"),
            (Some(p), None) => format!("changes apply at once and are saved to {}", p.display()),
        }
    }

    /// The saver the screen calls after each change in the setup screen.
    pub fn saver(&self) -> Saver {
        match (&self.path, &self.refuse) {
            (Some(p), None) => {
                let p = p.clone();
                Box::new(move |s| save(&p, s))
            }
            _ => {
                let why = self.note();
                Box::new(move |_| Err(why.clone()))
            }
        }
    }
}

/// Where the settings file is, from the environment (None: neither variable is set).
pub fn path_from(xdg: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    // The XDG spec ignores a relative XDG_CONFIG_HOME.
    let base = match (xdg, home) {
        (Some(x), _) if x.starts_with('/') => PathBuf::from(x),
        (_, Some(h)) if h.starts_with('/') => Path::new(h).join(".config"),
        _ => return None,
    };
    Some(base.join("ebee-top").join("config.toml"))
}

/// Read the settings file (`--no-config`: nothing read, nothing saved).
pub fn load(no_config: bool) -> Loaded {
    if no_config {
        return Loaded {
            refuse: Some("--no-config".into()),
            ..Default::default()
        };
    }
    let env = |k| std::env::var(k).ok().filter(|v| !v.is_empty());
    match path_from(env("XDG_CONFIG_HOME").as_deref(), env("HOME").as_deref()) {
        Some(p) => load_from(&p),
        None => Loaded {
            refuse: Some("neither XDG_CONFIG_HOME nor HOME is set".into()),
            ..Default::default()
        },
    }
}

/// Read the settings at `path`: a missing file is the defaults, silently.
pub fn load_from(path: &Path) -> Loaded {
    let shown = path.display();
    let mut out = Loaded {
        path: Some(path.to_path_buf()),
        ..Default::default()
    };
    let unusable = |out: &mut Loaded, why: String| {
        out.warning = Some(format!(
            "config {shown}: {why}; using the defaults (the file is left as it is)"
        ));
        out.refuse = Some(format!("{shown}: {why}"));
    };
    match read(path) {
        Ok(None) => {}
        Ok(Some(text)) => match settings::parse(&text) {
            Ok((s, notes)) => {
                out.settings = s;
                if !notes.is_empty() {
                    out.warning = Some(format!("config {shown}: {}", notes.join("; ")));
                }
            }
            Err(b) => unusable(&mut out, format!("broken, {b}")),
        },
        Err(why) => unusable(&mut out, why),
    }
    out
}

/// The file's text; None when there is none. Never through a symbolic link.
fn read(path: &Path) -> Result<Option<String>, String> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot be read ({e})")),
        Ok(m) if m.file_type().is_symlink() => {
            return Err("is a symbolic link, not followed".into());
        }
        Ok(m) if !m.is_file() => return Err("is not a plain file".into()),
        Ok(m) if m.len() > MAX_SIZE => return Err("is larger than 1 MiB".into()),
        Ok(_) => {}
    }
    // O_NOFOLLOW: a link put there since the check is refused, not followed.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("cannot be read ({e})"))?;
    let mut text = String::new();
    std::io::Read::by_ref(&mut f)
        .take(MAX_SIZE)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot be read ({e})"))?;
    Ok(Some(text))
}

/// Write the settings to `path` atomically: a temporary file beside it (0600, fsync'd),
/// renamed over it, the directory fsync'd. The directory is created 0700 when missing; a path
/// that is now a symbolic link or not a plain file is refused.
pub fn save(path: &Path, s: &Settings) -> Result<(), String> {
    let shown = path.display();
    let fail = |what: &str, e: std::io::Error| format!("settings not saved: {what} {shown}: {e}");
    let dir = path
        .parent()
        .ok_or_else(|| format!("settings not saved: {shown} has no directory"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| fail("creating the directory of", e))?;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(format!(
                "settings not saved: {shown} is a symbolic link, not followed"
            ));
        }
        Ok(m) if !m.is_file() => {
            return Err(format!("settings not saved: {shown} is not a plain file"));
        }
        _ => {}
    }
    let tmp = dir.join(format!(".config.toml.{}.tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        // A stale temporary file of ours (a crash) goes first; create_new refuses anything
        // else put there, a link included.
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(settings::to_toml(s).as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail("writing", e)
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::Duration;

    use super::*;
    use crate::app::SortBy;

    #[test]
    fn the_path_follows_xdg_then_home() {
        let p = |x, h| path_from(x, h).map(|p| p.display().to_string());
        assert_eq!(
            p(Some("/x"), Some("/h")).as_deref(),
            Some("/x/ebee-top/config.toml")
        );
        assert_eq!(
            p(Some("rel"), Some("/h")).as_deref(),
            Some("/h/.config/ebee-top/config.toml")
        );
        assert_eq!(p(None, None), None);
    }

    #[test]
    fn saves_atomically_with_private_modes_and_reads_back() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("new").join("ebee-top").join("config.toml");
        let missing = load_from(&path);
        assert_eq!(missing.settings, Settings::default());
        assert!(missing.warning.is_none() && missing.refuse.is_none());
        let s = Settings {
            sort: Some(SortBy::Mem),
            interval: Some(Duration::from_millis(500)),
            ..Default::default()
        };
        missing.saver()(&s).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let back = load_from(&path);
        assert_eq!(back.settings, s);
        assert!(back.warning.is_none());
        // No temporary file left behind.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn a_broken_file_is_one_warning_and_never_written_over() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("config.toml");
        let text = "sort = \"mem\"\ninterval = [\n";
        std::fs::write(&path, text).unwrap();
        let l = load_from(&path);
        assert_eq!(l.settings, Settings::default());
        let w = l.warning.clone().unwrap();
        assert!(!w.contains('\n'), "{w}");
        assert!(
            w.contains(&path.display().to_string()) && w.contains("line 2"),
            "{w}"
        );
        assert!(l.note().contains("not saved"), "{}", l.note());
        assert!(l.saver()(&Settings::default()).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }

    #[test]
    fn a_symbolic_link_is_neither_read_nor_written() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("elsewhere");
        std::fs::write(&target, "sort = \"mem\"\n").unwrap();
        let path = d.path().join("config.toml");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let l = load_from(&path);
        assert_eq!(l.settings.sort, None);
        assert!(l.warning.as_deref().unwrap().contains("symbolic link"));
        assert!(l.saver()(&Settings::default()).is_err());
        assert!(save(&path, &Settings::default()).is_err());
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "sort = \"mem\"\n"
        );
    }

    #[test]
    fn an_unknown_key_is_kept_through_a_save() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("config.toml");
        std::fs::write(&path, "[future]\nx = 1\n").unwrap();
        let l = load_from(&path);
        assert!(l.warning.as_deref().unwrap().contains("`future` kept"));
        let mut s = l.settings.clone();
        s.tree = Some(true);
        l.saver()(&s).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("[future]") && text.contains("tree = true"),
            "{text}"
        );
    }
}
