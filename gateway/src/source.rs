//! Where configuration documents come from. A source hands the service a list of named
//! documents whenever they change; the service loads them ([`crate::config::load`]) and keeps
//! the old configuration when a new one fails. This is the file source (upstream's `RUNTIME_*`
//! layout and reload rules); the other, xDS, is [`crate::xds`], whose resources pass the same
//! validator ([`crate::config::build`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Named documents, in a stable order.
pub type Documents = Vec<(String, String)>;

/// Upstream's file layout: documents are the files under
/// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`, named as goruntime names them: the
/// path below the directory it watches, `/` as `.`, the extension kept. With `watch_root`
/// (upstream's default) that is `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY` (`config.basic.yaml`) and a
/// reload follows a swap of the `RUNTIME_ROOT` symlink; without it, the app directory itself
/// (`basic.yaml`) and any change of a file in it.
#[derive(Debug, Clone)]
pub struct FileSource {
    pub root: PathBuf,
    pub subdirectory: String,
    pub app_directory: String,
    pub ignore_dot_files: bool,
    pub watch_root: bool,
}

/// What decides whether to reload: the files' names, sizes and times, or where the root points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Vec<(PathBuf, u64, Option<SystemTime>)>);

impl FileSource {
    fn base(&self) -> PathBuf {
        self.root.join(&self.subdirectory)
    }

    fn files(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, ignore_dot: bool, out: &mut Vec<PathBuf>) {
            let Ok(entries) = std::fs::read_dir(dir) else { return };
            for entry in entries.flatten() {
                let path = entry.path();
                let hidden = entry.file_name().to_string_lossy().starts_with('.');
                if hidden && ignore_dot {
                    continue;
                }
                if path.is_dir() {
                    walk(&path, ignore_dot, out);
                } else if path.is_file() {
                    out.push(path);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.base().join(&self.app_directory), self.ignore_dot_files, &mut out);
        out.sort();
        out
    }

    /// The documents now, named as goruntime names them (config errors and alerts on upstream's
    /// log lines rely on these names).
    pub fn read(&self) -> std::io::Result<Documents> {
        let watched = if self.watch_root { self.base() } else { self.base().join(&self.app_directory) };
        let mut docs = Vec::new();
        for path in self.files() {
            let content = std::fs::read_to_string(&path)?;
            let rel = path.strip_prefix(&watched).unwrap_or(&path);
            let name = rel.to_string_lossy().replace('/', ".");
            docs.push((name, content));
        }
        Ok(docs)
    }

    /// What a change is measured against.
    pub fn fingerprint(&self) -> Fingerprint {
        if self.watch_root {
            let target = std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
            return Fingerprint(vec![(target, 0, None)]);
        }
        Fingerprint(
            self.files()
                .into_iter()
                .map(|p| {
                    let meta = std::fs::metadata(&p).ok();
                    let (len, modified) = meta.map_or((0, None), |m| (m.len(), m.modified().ok()));
                    (p, len, modified)
                })
                .collect(),
        )
    }

    /// Calls `changed` with the documents at start and at every change (polled every
    /// `interval`); an unreadable file is reported as a load error by the caller's loader.
    pub async fn watch(self, interval: Duration, mut changed: impl FnMut(std::io::Result<Documents>) + Send) {
        let mut seen = self.fingerprint();
        changed(self.read());
        loop {
            tokio::time::sleep(interval).await;
            let now = self.fingerprint();
            if now != seen {
                seen = now;
                changed(self.read());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(root: PathBuf, watch_root: bool) -> FileSource {
        FileSource {
            root,
            subdirectory: "ratelimit".into(),
            app_directory: "config".into(),
            ignore_dot_files: true,
            watch_root,
        }
    }

    #[test]
    fn names_and_reloads_follow_upstream_s_layout() {
        let base = std::env::temp_dir().join(format!("rls-source-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        for (version, body) in [("v1", "domain: a\n"), ("v2", "domain: b\n")] {
            let dir = base.join(version).join("ratelimit/config/nested");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.parent().unwrap().join("basic.yaml"), body).unwrap();
            std::fs::write(dir.join("more.yaml"), body).unwrap();
            std::fs::write(dir.parent().unwrap().join(".hidden.yaml"), "x").unwrap();
        }
        let current = base.join("current");
        std::os::unix::fs::symlink(base.join("v1"), &current).unwrap();
        // Watching the root: edits inside do not reload, a swapped symlink does.
        let s = source(current.clone(), true);
        let docs = s.read().unwrap();
        assert_eq!(
            docs,
            vec![
                ("config.basic.yaml".to_string(), "domain: a\n".to_string()),
                ("config.nested.more.yaml".to_string(), "domain: a\n".to_string())
            ]
        );
        let before = s.fingerprint();
        std::fs::write(base.join("v1/ratelimit/config/basic.yaml"), "domain: a2\n").unwrap();
        assert_eq!(s.fingerprint(), before);
        std::fs::remove_file(&current).unwrap();
        std::os::unix::fs::symlink(base.join("v2"), &current).unwrap();
        assert_ne!(s.fingerprint(), before);
        assert_eq!(s.read().unwrap()[0].1, "domain: b\n");
        // Watching the files: an edit reloads.
        let f = source(current, false);
        let names: Vec<String> = f.read().unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["basic.yaml", "nested.more.yaml"]);
        let before = f.fingerprint();
        std::fs::write(base.join("v2/ratelimit/config/basic.yaml"), "domain: b-changed\n").unwrap();
        assert_ne!(f.fingerprint(), before);
        let _ = std::fs::remove_dir_all(&base);
    }
}
