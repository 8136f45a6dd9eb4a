//! `weir config dump`: the config as weir reads it (`weir_config::dump`), on stdout.

use std::process::ExitCode;

pub fn print(path: &str) -> ExitCode {
    let Some(config) = crate::load(path) else {
        return ExitCode::FAILURE;
    };
    let dumped = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|text| weir_config::dump::dump(&text, &config, &|name| std::env::var(name).ok()));
    match dumped {
        Ok(yaml) => {
            println!(
                "# {path} as weir {} reads it: variables expanded, defaults written out",
                env!("CARGO_PKG_VERSION")
            );
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("weir: {path}: {e}");
            ExitCode::FAILURE
        }
    }
}
