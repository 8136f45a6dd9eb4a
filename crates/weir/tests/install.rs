//! What an operator or a packager meets before any request: `weir version` and `--version`,
//! the version in the start log and `/api/status`, `WEIR_CONFIG`, and the shell completions and
//! man pages generated from the command's definition.

mod common;
use common::*;
use std::process::{Command, Output};

fn weir(args: &[&str]) -> Output {
    Command::new(weir_bin()).args(args).output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The commit `build.rs` should have found: git's own answer for this checkout.
fn expected_commit() -> String {
    Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or("unknown".into(), |out| {
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        })
}

#[test]
fn version_names_the_version_commit_and_target() {
    let line = stdout(&weir(&["version"]));
    assert_eq!(line, stdout(&weir(&["--version"])));
    let expected = format!(
        "weir {} (commit {}, {}-",
        env!("CARGO_PKG_VERSION"),
        expected_commit(),
        std::env::consts::ARCH
    );
    assert!(line.starts_with(&expected), "{line:?} vs {expected:?}");
    assert!(line.trim_end().ends_with("-linux-gnu)"), "{line:?}");
}

#[test]
fn the_start_log_and_the_admin_api_name_the_build() {
    let weir = Weir::start(
        "server: { workers: 1, admin: { address: \"127.0.0.1:0\" } }\n\
         entrypoints:\n  web: { address: \"127.0.0.1:0\" }\n\
         routers:\n  hi: { rule: \"PathPrefix(`/`)\", respond: { body: hi } }\n",
    );
    let logged = weir.wait_for_line(": version ", 1);
    let version = stdout(&Command::new(weir_bin()).arg("version").output().unwrap());
    let expected = version.trim().strip_prefix("weir ").unwrap();
    assert!(logged.ends_with(expected), "{logged:?}");
    let status = get(weir.addrs["@admin"], "a", "/api/status").json();
    assert_eq!(status["build"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["build"]["commit"], expected_commit().as_str());
    assert!(
        status["build"]["target"]
            .as_str()
            .is_some_and(|t| t.starts_with(std::env::consts::ARCH)),
        "{status}"
    );
    // The config version is still where it was.
    assert_eq!(status["version"], 1);
}

#[test]
fn weir_config_names_the_file_when_dash_c_is_absent() {
    let dir = temp_dir("weir-config-env");
    let path = dir.join("gateway.yaml");
    std::fs::write(
        &path,
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\n\
         routers:\n  hi: { rule: \"PathPrefix(`/`)\", respond: { body: hi } }\n",
    )
    .unwrap();
    let elsewhere = temp_dir("weir-config-cwd");
    let check = |env: Option<&std::path::Path>, args: &[&str]| {
        let mut command = Command::new(weir_bin());
        command.arg("check").args(args).current_dir(&elsewhere);
        command.env_remove("WEIR_CONFIG");
        if let Some(env) = env {
            command.env("WEIR_CONFIG", env);
        }
        command.output().unwrap()
    };
    let by_env = check(Some(&path), &[]);
    assert!(stdout(&by_env).starts_with(&format!("{}: ok (", path.display())));
    // `-c` wins over the variable.
    let missing = dir.join("missing.yaml");
    let by_flag = check(Some(&missing), &["-c", path.to_str().unwrap()]);
    assert!(stdout(&by_flag).starts_with(&format!("{}: ok (", path.display())));
    // Neither: ./weir.yaml, which is not there.
    let neither = check(None, &[]);
    assert!(!neither.status.success());
    assert!(String::from_utf8_lossy(&neither.stderr).contains("./weir.yaml"));
}

#[test]
fn bash_completes_subcommands_and_options() {
    // Bash's own completion machinery, as a shell with bash-completion would call it.
    let script = format!(
        "source <({weir} completions bash) || exit 1\n\
         complete -p weir || exit 1\n\
         COMP_WORDS=(weir ''); COMP_CWORD=1; _weir weir '' weir; echo \"words: ${{COMPREPLY[*]}}\"\n\
         COMP_WORDS=(weir run --); COMP_CWORD=2; _weir weir -- run; echo \"run: ${{COMPREPLY[*]}}\"\n",
        weir = weir_bin()
    );
    let out = stdout(&Command::new("bash").args(["-c", &script]).output().unwrap());
    let words = out.lines().find_map(|l| l.strip_prefix("words: ")).unwrap();
    for sub in [
        "run",
        "check",
        "reload",
        "route",
        "config",
        "version",
        "completions",
        "man",
    ] {
        assert!(words.split(' ').any(|w| w == sub), "{sub} not in {words:?}");
    }
    let run = out.lines().find_map(|l| l.strip_prefix("run: ")).unwrap();
    for option in ["--config", "--watch"] {
        assert!(
            run.split(' ').any(|w| w == option),
            "{option} not in {run:?}"
        );
    }
}

#[test]
fn zsh_and_fish_completions_parse() {
    let dir = temp_dir("completions");
    for (shell, file, checker, config_option) in [
        ("zsh", "_weir", ["zsh", "-n"], "'--config=["),
        (
            "fish",
            "weir.fish",
            ["fish", "--no-execute"],
            "-s c -l config",
        ),
    ] {
        let script = stdout(&weir(&["completions", shell]));
        assert!(script.contains(config_option), "{shell}: {script}");
        let path = dir.join(file);
        std::fs::write(&path, &script).unwrap();
        let out = Command::new(checker[0])
            .arg(checker[1])
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("{} (Debian's package): {e}", checker[0]));
        assert!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn man_pages_render_without_warnings() {
    let dir = temp_dir("man");
    stdout(&weir(&["man", "--out-dir", dir.to_str().unwrap()]));
    let page = |name: &str| {
        let out = Command::new("man")
            .args(["--warnings", "-l"])
            .arg(dir.join(name))
            .env("MANWIDTH", "100")
            .output()
            .unwrap();
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && warnings.is_empty(),
            "{name}: {warnings}"
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let top = page("weir.1");
    for sub in [
        "weir-run(1)",
        "weir-check(1)",
        "weir-config(1)",
        "weir-version(1)",
        "weir-man(1)",
    ] {
        assert!(top.contains(sub), "{sub} not in weir(1):\n{top}");
    }
    let run = page("weir-run.1");
    assert!(
        run.contains("WEIR_CONFIG") && run.contains("--watch"),
        "{run}"
    );
    // `weir man` alone prints weir(1).
    let printed = stdout(&weir(&["man"]));
    assert_eq!(
        printed,
        std::fs::read_to_string(dir.join("weir.1")).unwrap()
    );
}

/// What `weir check` says after the file's name: `ok (N entrypoints, N routers, …)`.
fn check_summary(path: &std::path::Path) -> String {
    let out = weir_check(path);
    let text = stdout(&out);
    text.split_once(": ").map(|(_, s)| s.to_string()).unwrap()
}

#[test]
fn config_dump_of_every_example_passes_check_with_the_same_parts() {
    // In a copy of examples/, so relative paths (static roots, htpasswd files) resolve as they
    // do for the originals.
    let dir = temp_dir("dump");
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(&examples)
        .arg(&dir)
        .status()
        .unwrap();
    assert!(copied.success());
    let dir = dir.join("examples");
    let mut dumped = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let dump = stdout(&weir(&["config", "dump", "-c", path.to_str().unwrap()]));
        let dump_path = path.with_extension("dump.yaml");
        std::fs::write(&dump_path, &dump).unwrap();
        assert_eq!(
            check_summary(&dump_path),
            check_summary(&path),
            "{}:\n{dump}",
            path.display()
        );
        // Dumping the dump changes nothing but its first line, which names the file.
        let again = stdout(&weir(&[
            "config",
            "dump",
            "-c",
            dump_path.to_str().unwrap(),
        ]));
        assert_eq!(
            again.split_once('\n').unwrap().1,
            dump.split_once('\n').unwrap().1
        );
        dumped += 1;
    }
    assert!(dumped >= 5);
}

#[test]
fn config_dump_expands_variables_and_writes_defaults() {
    let dir = temp_dir("dump-env");
    let path = dir.join("weir.yaml");
    std::fs::write(
        &path,
        "entrypoints:\n  web: { address: \"127.0.0.1:${DUMP_TEST_PORT:-81}\" }\n\
         routers:\n  hi: { rule: \"PathPrefix(`/`)\", respond: { body: \"${DUMP_TEST_BODY}\" } }\n",
    )
    .unwrap();
    let out = Command::new(weir_bin())
        .args(["config", "dump"])
        .env("WEIR_CONFIG", &path)
        .env("DUMP_TEST_PORT", "8089")
        .env("DUMP_TEST_BODY", "hello ${not a variable}")
        .output()
        .unwrap();
    let text = stdout(&out);
    for line in [
        "    address: \"127.0.0.1:8089\"\n",
        "      body: \"hello $${not a variable}\"\n",
        "  graceful_timeout: 30s\n",
        "  workers: auto\n",
        "    h2c: false\n",
        "    priority: 15\n",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    // An unset variable is the same error as for `weir check`.
    let unset = Command::new(weir_bin())
        .args(["config", "dump", "-c", path.to_str().unwrap()])
        .env_remove("DUMP_TEST_BODY")
        .output()
        .unwrap();
    assert!(!unset.status.success());
    assert!(
        String::from_utf8_lossy(&unset.stderr).contains("DUMP_TEST_BODY"),
        "{}",
        String::from_utf8_lossy(&unset.stderr)
    );
}
