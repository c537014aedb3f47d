use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;
use wavegate::cli::{self, CheckArgs, LintArgs, ServeArgs, WaitArgs};

/// Truthful readiness for Argo CD sync waves.
#[derive(Parser)]
#[command(name = "wavegate", version, about)]
struct Args {
    #[command(subcommand)]
    command: Command,
    /// Log format.
    #[arg(long, env = "WAVEGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

// Parsed once at start; boxing the flags would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the sidecar: watch cache, HTTP API, gate controller, metrics.
    Serve(ServeArgs),
    /// Judge one object once and print its Argo CD health.
    ///
    /// Exit codes: 0 Healthy, 3 Progressing, 4 Degraded, 5 Missing, 6 Suspended, 7 Unknown,
    /// 1 could not evaluate (e.g. no cluster), 2 bad arguments.
    Check(CheckArgs),
    /// Block until an object or WaveGate is Healthy, for Argo CD hook Jobs and init containers.
    ///
    /// Exit codes: 0 Healthy, 4 Degraded (definite failure: stop waiting), 124 timed out,
    /// 1 could not evaluate, 2 bad arguments.
    Wait(WaitArgs),
    /// Print the WaveGate CustomResourceDefinition (YAML), as in deploy/crd/.
    Crd,
    /// Print the HTTP API's OpenAPI document (YAML), as in docs/openapi.yaml.
    Openapi,
    /// Find wrong wave order and unreachable readiness in rendered manifests, before a sync.
    ///
    /// Exit codes: 0 no findings, 1 findings, 2 bad input (invalid YAML, unknown kinds,
    /// unrendered templates, unknown rules).
    Lint(LintArgs),
}

fn main() -> ExitCode {
    fewer_malloc_arenas();
    let args = Args::parse();
    // One-shot commands print their verdict; their watch start-up chatter would only hide it.
    let quiet = !matches!(args.command, Command::Serve(_));
    init_tracing(args.log_format, quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wavegate: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async move {
        match args.command {
            Command::Serve(a) => cli::serve(a).await,
            Command::Check(a) => cli::check(a).await,
            Command::Wait(a) => cli::wait(a).await,
            Command::Lint(a) => cli::lint(a),
            Command::Openapi => match wavegate::api::openapi::openapi_yaml() {
                Ok(yaml) => {
                    print!("{yaml}");
                    0
                }
                Err(e) => {
                    eprintln!("wavegate: cannot render the OpenAPI document: {e}");
                    1
                }
            },
            Command::Crd => match wavegate::gate::crd::crd_yaml() {
                Ok(yaml) => {
                    print!("{yaml}");
                    0
                }
                Err(e) => {
                    eprintln!("wavegate: cannot render the CRD: {e}");
                    1
                }
            },
        }
    });
    // Watches and probes may still be in flight; they hold nothing worth waiting for, and
    // tearing them down would only log connection errors after the verdict.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::process::exit(i32::from(code))
}

fn init_tracing(format: LogFormat, quiet: bool) {
    let default = if quiet { "warn" } else { "info,kube=warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if format == LogFormat::Json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// glibc gives each thread that allocates while another does an arena of its own (up to eight
/// per core), and an arena keeps what was freed in it for itself. wavegate's threads take turns
/// building megabyte answers for big views, so each arena ends up holding its own high-water
/// mark. Two arenas: RSS after the big-applications bench 157 -> 120 MiB, its peak 167 -> 124
/// MiB, at no measurable cost in time (docs/benchmarks.md; a fixed 256 KiB mmap threshold on top
/// saved 4 MiB more, not kept). Called before any thread starts; `MALLOC_ARENA_MAX`, when set,
/// is the operator's and wins.
fn fewer_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a malloc parameter; no thread has started to allocate yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}
