//! What is generated from the command's clap definition: shell completions (`weir
//! completions SHELL`) and man pages (`weir man`), so neither can drift from the options.

use crate::Cli;
use clap::CommandFactory;
use std::path::Path;
use std::process::ExitCode;

/// Writes `shell`'s completion script for `weir` on stdout.
pub fn completions(shell: clap_complete::Shell) -> ExitCode {
    clap_complete::generate(shell, &mut Cli::command(), "weir", &mut std::io::stdout());
    ExitCode::SUCCESS
}

/// Writes weir(1) on stdout, or every page (weir.1, weir-run.1, …) into `out_dir`.
pub fn man(out_dir: Option<&Path>) -> ExitCode {
    // As `generate_to` does: `help` is no page of its own.
    let command = Cli::command().disable_help_subcommand(true);
    let written = match out_dir {
        Some(dir) => clap_mangen::generate_to(command, dir),
        None => clap_mangen::Man::new(command).render(&mut std::io::stdout()),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir: cannot write the man page: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand and every option a user can type, with the path to it when one lacks
    /// help text.
    fn missing_help(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
        if command.get_about().is_none() {
            missing.push(path.to_string());
        }
        for arg in command.get_arguments() {
            if arg.get_help().is_none() {
                missing.push(format!("{path} {}", arg.get_id()));
            }
        }
        for sub in command.get_subcommands() {
            missing_help(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }

    #[test]
    fn every_subcommand_and_option_has_help_text() {
        let mut command = Cli::command();
        command.build();
        let mut missing = Vec::new();
        missing_help(&command, "weir", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
