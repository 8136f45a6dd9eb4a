//! The `weir` command: `run` the gateway, `check` a config, `route explain` a request;
//! `version`, `config dump`, `completions` and `man` for operators and packagers.
// One measured exception, allowed where it lives: the global allocator.
#![deny(unsafe_code)]

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use weir_config::located;

/// The global allocator: mimalloc, whose per-thread size classes make a request's
/// allocations (its boxed exchange, a few small vectors) a handful of instructions where glibc's
/// malloc took hundreds. Called directly rather than through the `mimalloc` crate's wrapper,
/// which always asks for aligned memory; mimalloc's aligned path is its slow generic one for
/// blocks over 1 KiB such as the boxed exchange. Measured with bench/callgrind: 220 fewer
/// instructions per proxied request, 100 per `respond` request.
#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

struct Allocator;

/// Every mimalloc block is aligned to at least a machine word.
const WORD: usize = std::mem::size_of::<usize>();

// SAFETY: mimalloc returns blocks of at least the requested size, aligned to a word by
// `mi_malloc` / `mi_realloc` (used only when the layout asks for no more than that) and to the
// requested alignment by the `_aligned` variants; blocks are freed by `mi_free` only.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if layout.align() <= WORD {
            libmimalloc_sys::mi_malloc(layout.size()).cast()
        } else {
            libmimalloc_sys::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        libmimalloc_sys::mi_free(ptr.cast())
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= WORD {
            libmimalloc_sys::mi_realloc(ptr.cast(), new_size).cast()
        } else {
            libmimalloc_sys::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
        }
    }
}

/// Lets mimalloc return the calling thread's free pages to the system, the empty pages it
/// keeps cached included (`force`). Without it, pages freed when a worker goes quiet (the tasks
/// of connections that were parked or closed) stay resident: mimalloc purges only inside later
/// allocations. Measured (bench/run idle): 0.92 KB per parked connection unforced, 0.21 forced.
fn release_freed_pages() {
    // SAFETY: `mi_collect` takes no pointers and may be called from any thread at any time.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(true)
    }
}

/// Turns transparent huge pages off for the process. mimalloc asks for them (`MADV_HUGEPAGE`)
/// on its arenas, and the kernel's khugepaged then fills a 2 MB page around a few live 4 KB
/// ones while the process is idle: with 9,000 parked connections the RSS grew by 2 MB steps
/// long after the last request, 0.31-0.98 KB per connection where the connections use 0.09-0.14
/// (bench/README.md, "Idle connections' memory"). nginx's allocations never ask for them.
fn no_transparent_huge_pages() {
    // Refused on old kernels: the process runs as before.
    let _ = nix::sys::prctl::set_thp_disable(true);
}

#[derive(Parser)]
#[command(
    name = "weir",
    version = version::LONG,
    about = "An API gateway and reverse proxy driven by one YAML file"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the gateway.
    Run {
        /// Config file.
        #[arg(short, long, env = "WEIR_CONFIG", default_value = "./weir.yaml")]
        config: String,
        /// Reload when the config file changes.
        #[arg(long)]
        watch: bool,
        /// The least severe log level written (error, warn, info, debug), over `server.log.level`.
        #[arg(long, value_parser = log_level)]
        log_level: Option<weir_config::LogLevel>,
    },
    /// Ask the running gateway to reload its config file: through its admin API when the
    /// file configures one (and print the result), else by SIGHUP to the pid in `server.pid_file`.
    Reload {
        /// Config file.
        #[arg(short, long, env = "WEIR_CONFIG", default_value = "./weir.yaml")]
        config: String,
    },
    /// Validate a config file without starting anything.
    Check {
        /// Config file.
        #[arg(short, long, env = "WEIR_CONFIG", default_value = "./weir.yaml")]
        config: String,
    },
    /// Routing tools.
    Route {
        #[command(subcommand)]
        command: RouteCommand,
    },
    /// Config file tools.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Convert another gateway's configuration into weir's.
    Import {
        #[command(subcommand)]
        command: ImportCommand,
    },
    /// Print the version, the git commit it was built from and the target.
    Version,
    /// Shell completions from this command's definition, on stdout.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// The man page weir(1), generated from this command's definition, on stdout.
    Man {
        /// Write every page instead (weir.1 and one per subcommand, weir-run.1…) into this folder.
        #[arg(long)]
        out_dir: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the config as weir reads it, as `nginx -T` does: `${NAME}` expanded and the
    /// defaults written out, as YAML that `weir check` passes.
    Dump {
        /// Config file.
        #[arg(short, long, env = "WEIR_CONFIG", default_value = "./weir.yaml")]
        config: String,
    },
}

#[derive(Subcommand)]
enum ImportCommand {
    /// A Traefik dynamic configuration (the file provider's YAML or TOML, by extension) as
    /// weir's YAML on stdout; what could not be converted is listed on stderr, and the result
    /// checked as `weir check` would.
    Traefik {
        /// Traefik's dynamic configuration file (`.yaml`, `.yml` or `.toml`).
        file: String,
    },
}

#[derive(Subcommand)]
enum RouteCommand {
    /// Show which router a request would match, its rule and its action, without sending it.
    Explain {
        /// Config file.
        #[arg(short, long, env = "WEIR_CONFIG", default_value = "./weir.yaml")]
        config: String,
        /// Request method, e.g. GET.
        method: String,
        /// Request URL, e.g. http://api.example.com/v1/users?id=3
        url: String,
        /// A request header, `Name: value`; repeatable.
        #[arg(short = 'H', long = "header")]
        headers: Vec<String>,
        /// The client address the request comes from.
        #[arg(long, default_value = "127.0.0.1")]
        client_ip: std::net::IpAddr,
        /// Only this entrypoint (default: every entrypoint).
        #[arg(long)]
        entrypoint: Option<String>,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run {
            config,
            watch,
            log_level,
        } => {
            no_transparent_huge_pages();
            if let Some(level) = log_level {
                weir_proxy::errorlog::override_level(level);
            }
            let cfg = match read_config(&config) {
                Ok(cfg) => cfg,
                Err(errors) => {
                    for line in errors.lines() {
                        weir_proxy::log_error!("{line}");
                    }
                    // Started by a binary upgrade: the old process logs why, and serves on.
                    weir_proxy::upgrade::refuse(&errors.replace('\n', "; "));
                    return ExitCode::FAILURE;
                }
            };
            let options = weir_proxy::RunOptions {
                config_path: config.clone(),
                watch,
                release_memory: release_freed_pages,
                build: version::BUILD,
            };
            match weir_proxy::run(cfg, options) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    weir_proxy::log_error!("{}", located(&config, &e));
                    ExitCode::FAILURE
                }
            }
        }
        Command::Config {
            command: ConfigCommand::Dump { config },
        } => config_dump::print(&config),
        Command::Import {
            command: ImportCommand::Traefik { file },
        } => import_traefik::run(&file),
        Command::Version => {
            version::print();
            ExitCode::SUCCESS
        }
        Command::Completions { shell } => cli_docs::completions(shell),
        Command::Man { out_dir } => cli_docs::man(out_dir.as_deref()),
        Command::Reload { config } => {
            let Some(cfg) = load(&config) else {
                return ExitCode::FAILURE;
            };
            match reload::ask(&cfg) {
                Ok(message) => {
                    println!("{message}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("weir: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Check { config } => match load(&config) {
            Some(cfg) => match weir_proxy::Runtime::compile(&cfg, 1, None) {
                Ok(_) => {
                    // Warnings do not fail the check: the config runs as written.
                    for warning in weir_config::acme_warnings(&cfg) {
                        eprintln!("{}", located(&config, &warning));
                    }
                    let mut l4 = String::new();
                    if !cfg.tcp.routers.is_empty() || !cfg.udp.routers.is_empty() {
                        l4 = format!(
                            ", {} tcp routers, {} udp routers",
                            cfg.tcp.routers.len(),
                            cfg.udp.routers.len()
                        );
                    }
                    println!(
                        "{config}: ok ({} entrypoints, {} routers, {} services, {} middlewares{l4})",
                        cfg.entrypoints.len(),
                        cfg.routers.len(),
                        cfg.services.len(),
                        cfg.middlewares.len()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => check_errors::report(&config, &cfg, &e),
            },
            None => ExitCode::FAILURE,
        },
        Command::Route {
            command:
                RouteCommand::Explain {
                    config,
                    method,
                    url,
                    headers,
                    client_ip,
                    entrypoint,
                },
        } => {
            let Some(cfg) = load(&config) else {
                return ExitCode::FAILURE;
            };
            match explain::explain(
                &cfg,
                &method,
                &url,
                &headers,
                client_ip,
                entrypoint.as_deref(),
            ) {
                Ok(report) => {
                    print!("{}", report.text);
                    if report.matched {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(2)
                    }
                }
                Err(e) => {
                    eprintln!("weir: {}", located(&config, &e));
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `--log-level`'s value.
fn log_level(name: &str) -> Result<weir_config::LogLevel, String> {
    weir_config::LogLevel::parse(name)
        .ok_or_else(|| format!("expected one of: {}", weir_config::LogLevel::NAMES))
}

/// Loads a config, printing every error as `FILE:LINE:COLUMN: message`.
fn load(path: &str) -> Option<weir_config::Config> {
    match read_config(path) {
        Ok(cfg) => Some(cfg),
        Err(errors) => {
            eprintln!("{errors}");
            None
        }
    }
}

/// The config at `path`, or its errors, one a line, and their count.
fn read_config(path: &str) -> Result<weir_config::Config, String> {
    weir_config::load_file(path).map_err(|errors| {
        let mut text = String::new();
        for e in &errors {
            text.push_str(&format!("{e}\n"));
        }
        text.push_str(&format!("{path}: {} error(s)", errors.len()));
        text
    })
}

mod check_errors;
mod cli_docs;
mod config_dump;
mod explain;
mod import_traefik;
mod reload;
mod version;
