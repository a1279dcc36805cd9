//! A file in the temporary directory for a test, removed when dropped.

use std::path::PathBuf;

/// A file in the temporary directory, removed when dropped. The name carries the test
/// process's id, so test binaries running at once do not share a file.
pub struct TempFile(PathBuf);

impl TempFile {
    pub fn new(name: &str, contents: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!("kacrab-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).expect("write a temporary file");
        TempFile(path)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temporary path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
