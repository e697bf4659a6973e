//! The name of a ring key, `<ring>-<revision>`: what a spec's ring key Secret must be called,
//! the key file's name line, and the file's name in the supervisor's key cache.

/// Directory of the supervisor's key cache.
pub const KEY_CACHE_DIR: &str = "/hab/cache/keys";

/// A ring key name `<ring>-<revision>`, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyName {
    /// The ring, as passed to `--ring`.
    pub ring: String,
    /// The 14-digit revision.
    pub revision: String,
}

impl KeyName {
    /// Splits `<ring>-<14 digits>`.
    pub fn parse(name: &str) -> Option<KeyName> {
        let (ring, revision) = name.rsplit_once('-')?;
        let valid = !ring.is_empty()
            && revision.len() == 14
            && revision.bytes().all(|b| b.is_ascii_digit());
        valid.then(|| KeyName {
            ring: ring.to_string(),
            revision: revision.to_string(),
        })
    }

    /// `<ring>-<revision>`, the Secret's name and the key file's name line.
    pub fn full(&self) -> String {
        format!("{}-{}", self.ring, self.revision)
    }

    /// The key file's path in the supervisor's key cache.
    pub fn cache_path(&self) -> String {
        format!("{KEY_CACHE_DIR}/{}.sym.key", self.full())
    }
}
