//! Build metadata for `weir version`: the git commit the binary was built from (`unknown`
//! outside a git checkout, as in a crates.io tarball) and the target triple.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=WEIR_BUILD_TARGET={target}");
    let ours = in_weirs_repository();
    let commit = ours
        .then(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .flatten()
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=WEIR_BUILD_COMMIT={commit}");
    // Rerun only when HEAD moves: HEAD itself (a checkout), the branch it names (a commit) or
    // packed-refs (where a packed branch lives). With no git, or no rerun-if-changed at all,
    // cargo would rerun this on every change to the package's files instead.
    println!("cargo:rerun-if-changed=build.rs");
    if ours {
        for file in watched_git_files() {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }
}

/// Whether the git repository around this crate is weir's own, this crate at `crates/weir`
/// in it: a copy unpacked inside some other checkout (a vendored crate) must not take that
/// checkout's commit for its own.
fn in_weirs_repository() -> bool {
    let (Some(top), Ok(manifest_dir)) = (
        git(&["rev-parse", "--show-toplevel"]),
        std::env::var("CARGO_MANIFEST_DIR"),
    ) else {
        return false;
    };
    let expected = Path::new(&top).join("crates/weir").canonicalize();
    let actual = Path::new(&manifest_dir).canonicalize();
    matches!((expected, actual), (Ok(e), Ok(a)) if e == a)
}

/// One line of git's output, or `None` without git or outside a repository.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// The files whose change moves HEAD. Only existing ones: cargo reruns a script every time
/// for a watched path that does not exist.
fn watched_git_files() -> Vec<PathBuf> {
    let (Some(git_dir), Some(common_dir)) = (
        git(&["rev-parse", "--absolute-git-dir"]),
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
    ) else {
        return Vec::new();
    };
    let mut files = vec![Path::new(&git_dir).join("HEAD")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        files.push(Path::new(&common_dir).join(branch));
    }
    files.push(Path::new(&common_dir).join("packed-refs"));
    files.retain(|f| f.exists());
    files
}
