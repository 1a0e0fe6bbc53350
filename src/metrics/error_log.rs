//! The first few distinct failure messages of a run, kept to show on stderr at its end.
//! Noted only on failures, never on the success path, and bounded: a run of a million
//! failures keeps a handful of lines.

use std::sync::{Arc, Mutex};

/// The first few distinct failures of a run, to show on stderr.
#[derive(Debug, Clone, Default)]
pub struct ErrorLog {
    inner: Arc<Mutex<Vec<String>>>,
}

impl ErrorLog {
    const KEEP: usize = 5;

    /// Remembers `message` if it is new and fewer than a handful are kept. Called only on
    /// failures, never on the success path.
    pub fn note(&self, message: String) {
        if let Ok(mut v) = self.inner.lock() {
            if v.len() < Self::KEEP && !v.contains(&message) {
                v.push(message);
            }
        }
    }

    pub fn messages(&self) -> Vec<String> {
        self.inner.lock().map(|v| v.clone()).unwrap_or_default()
    }
}
