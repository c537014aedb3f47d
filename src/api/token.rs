//! The bearer token that `/api/*` requires (`--token-file`).
//!
//! What it proves: that the request was sent by someone who holds the token — in the shipped
//! setup argocd-server, which adds `Authorization: Bearer <token>` from `argocd-secret` to every
//! proxied request after deleting the browser's own `Authorization` and `Cookie` headers
//! (argo-cd `server/extension/extension.go`, `NewProxy`). It says nothing about which Argo CD
//! user is behind the request; that is what `Argocd-Application-Name` scopes (see `scope`).
//!
//! The file is re-read when it changes (Kubernetes updates a mounted Secret by swapping a
//! symlink, so the file's identity changes), so a rotated token takes effect without a restart.
//! An unreadable or empty file after a change refuses every request: failing closed.

use super::ApiError;
use crate::locks::lock;
use axum::http::HeaderValue;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use subtle::ConstantTimeEq;

/// How often the file's metadata is looked at, at most.
const RECHECK: Duration = Duration::from_secs(1);

pub struct Token {
    file: Option<PathBuf>,
    recheck: Duration,
    state: Mutex<Loaded>,
}

/// Why there is no token to compare with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenError {
    #[error("token file {0} is empty")]
    Empty(PathBuf),
    #[error("cannot read token file {path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: Arc<std::io::Error>,
    },
}

struct Loaded {
    value: Result<Arc<str>, TokenError>,
    stamp: Option<Stamp>,
    checked: Instant,
}

/// What identifies one version of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        inode: m.ino(),
    })
}

fn read(path: &Path) -> Result<Arc<str>, TokenError> {
    match std::fs::read_to_string(path) {
        Ok(t) if !t.trim().is_empty() => Ok(Arc::from(t.trim())),
        Ok(_) => Err(TokenError::Empty(path.to_path_buf())),
        Err(e) => Err(TokenError::Unreadable {
            path: path.to_path_buf(),
            source: Arc::new(e),
        }),
    }
}

impl Token {
    /// A token that never changes (tests, embedding).
    pub fn fixed(value: &str) -> Token {
        Token {
            file: None,
            recheck: RECHECK,
            state: Mutex::new(Loaded {
                value: Ok(Arc::from(value)),
                stamp: None,
                checked: Instant::now(),
            }),
        }
    }

    /// The token in `path`; an error when it cannot be read now (so `serve` fails at start
    /// rather than run with an API nobody can call).
    pub(crate) fn from_file(path: &Path) -> Result<Token, TokenError> {
        Self::from_file_rechecked(path, RECHECK)
    }

    pub(crate) fn from_file_rechecked(path: &Path, recheck: Duration) -> Result<Token, TokenError> {
        let stamp = stamp(path);
        let value = read(path)?;
        Ok(Token {
            file: Some(path.to_path_buf()),
            recheck,
            state: Mutex::new(Loaded {
                value: Ok(value),
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    fn current(&self) -> Result<Arc<str>, TokenError> {
        let mut loaded = lock(&self.state);
        if let Some(path) = &self.file
            && loaded.checked.elapsed() >= self.recheck
        {
            loaded.checked = Instant::now();
            let now = stamp(path);
            if now.is_none() || now != loaded.stamp {
                loaded.value = read(path);
                loaded.stamp = now;
                match &loaded.value {
                    Ok(_) => tracing::info!(file = %path.display(), "API token reloaded"),
                    Err(e) => tracing::warn!(error = %e, "API token unusable; refusing requests"),
                }
            }
        }
        loaded.value.clone()
    }

    /// Accept `Authorization: Bearer <token>` (the scheme in any case, RFC 9110 §11.1),
    /// compared in constant time.
    pub(crate) fn verify(&self, header: Option<&HeaderValue>) -> Result<(), ApiError> {
        let expected = self.current().map_err(|e| {
            ApiError::Unavailable(format!(
                "{e}; every API request is refused until it is fixed"
            ))
        })?;
        let given = header
            .and_then(|v| v.to_str().ok())
            .and_then(bearer)
            .unwrap_or("");
        if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
            Ok(())
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}

/// The credentials of a `Bearer` Authorization value.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(rest.trim_start())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        let t = Token::fixed("s3cret");
        for ok in ["Bearer s3cret", "bearer s3cret", "BEARER  s3cret"] {
            assert!(t.verify(Some(&header(ok))).is_ok(), "{ok}");
        }
        for bad in [
            "Bearer s3cre",
            "Basic s3cret",
            "s3cret",
            "Bearer",
            "Bearer s3cret2",
        ] {
            assert!(t.verify(Some(&header(bad))).is_err(), "{bad}");
        }
        assert!(t.verify(None).is_err());
    }

    #[test]
    fn rotated_token_file_takes_effect_without_restart() {
        let dir = std::env::temp_dir().join(format!("wavegate-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "old-token\n").unwrap();
        let t = Token::from_file_rechecked(&path, Duration::ZERO).unwrap();
        assert!(t.verify(Some(&header("Bearer old-token"))).is_ok());
        // As the kubelet does: a new file swapped in, not an in-place write.
        let next = dir.join("token.new");
        std::fs::write(&next, "new-token").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert!(t.verify(Some(&header("Bearer old-token"))).is_err());
        assert!(t.verify(Some(&header("Bearer new-token"))).is_ok());
        // Emptied: fail closed, with a message that names the file.
        std::fs::write(dir.join("token.new"), "").unwrap();
        std::fs::rename(dir.join("token.new"), &path).unwrap();
        match t.verify(Some(&header("Bearer new-token"))) {
            Err(ApiError::Unavailable(m)) => assert!(m.contains("empty"), "{m}"),
            other => panic!("expected Unavailable, got {other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
