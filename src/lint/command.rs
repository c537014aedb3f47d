//! `wavegate lint [PATH|-]…`: its flags, and what it prints and exits with.

use super::{ArgocdCm, InputError, Options, Rule, Source, lint_sources, output};
use clap::Args;
use std::io::Read;
use std::path::PathBuf;

/// Exit code for findings.
pub const EXIT_FINDINGS: u8 = 1;
/// Exit code for input that cannot be linted (and bad flags).
pub const EXIT_BAD_INPUT: u8 = 2;

#[derive(Args, Debug)]
pub struct LintArgs {
    /// Rendered manifests: files, directories (read recursively: *.yaml, *.yml, *.json) or `-`
    /// for stdin (`helm template … | wavegate lint -`). None: stdin.
    pub paths: Vec<PathBuf>,
    /// Output format: `text`, `json`, `sarif` (SARIF 2.1.0, for code-scanning annotations), or
    /// `order`: no findings, the order Argo CD applies the objects in, one line per object and
    /// phase (`PHASE WAVE KIND NAMESPACE/NAME`).
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// Do not run this rule (repeatable): later-wave, same-wave, not-awaited,
    /// missing-join-service, selector-matches-nothing, gate-in-last-wave,
    /// gate-checks-later-object, gate-needs-lua, app-of-apps-without-health.
    #[arg(long = "ignore", value_name = "RULE")]
    pub ignore: Vec<String>,
    /// The argocd-cm ConfigMap Argo CD runs with: which health checks it adds
    /// (resource.customizations.health.*). Without it, only Argo CD's built-in ones count.
    #[arg(long = "argocd-cm", value_name = "FILE")]
    pub argocd_cm: Option<PathBuf>,
    /// The bundled health scripts of the Argo CD release it runs (the argo-cd module's
    /// `resource_customizations` folder, as `serve --argocd-health-scripts`): a kind with a
    /// script there has a health check. Without it, the kinds Argo CD 3.2 ships one for.
    #[arg(long = "argocd-health-scripts", value_name = "DIR")]
    pub argocd_health_scripts: Option<PathBuf>,
    /// The Application's destination namespace, for objects that name none.
    #[arg(short = 'n', long = "namespace", default_value = "")]
    pub namespace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Sarif,
    Order,
}

/// Run the lint; returns the exit code (0 clean, 1 findings, 2 bad input).
pub fn run(args: LintArgs) -> u8 {
    match report(args) {
        Ok((text, code)) => {
            print!("{text}");
            code
        }
        Err(e) => {
            // The error names files and objects a pull request wrote.
            eprintln!(
                "wavegate lint: {}",
                super::printable::printable(&e.to_string())
            );
            EXIT_BAD_INPUT
        }
    }
}

fn report(args: LintArgs) -> Result<(String, u8), InputError> {
    let mut ignore = std::collections::BTreeSet::new();
    for id in &args.ignore {
        let rule = Rule::parse(id).ok_or_else(|| InputError {
            file: "--ignore".into(),
            line: 0,
            message: format!(
                "unknown rule {id:?} (rules: {})",
                Rule::ALL.map(Rule::id).join(", ")
            ),
        })?;
        ignore.insert(rule);
    }
    let argocd_cm = match &args.argocd_cm {
        None => None,
        Some(path) => {
            let file = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| InputError {
                file: file.clone(),
                line: 0,
                message: format!("cannot read: {e}"),
            })?;
            Some(ArgocdCm::parse(&file, &text)?)
        }
    };
    let mut sources = Vec::new();
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        args.paths
    };
    for path in paths {
        if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| InputError {
                    file: "<stdin>".into(),
                    line: 0,
                    message: format!("cannot read: {e}"),
                })?;
            sources.push(Source::Text {
                name: "<stdin>".into(),
                text,
            });
        } else if !path.exists() {
            return Err(InputError {
                file: path.display().to_string(),
                line: 0,
                message: "no such file or directory".into(),
            });
        } else {
            sources.push(Source::Path(path));
        }
    }
    let bundled = match &args.argocd_health_scripts {
        None => None,
        Some(dir) => Some(std::sync::Arc::new(
            crate::argocd_lua::Bundled::load(dir).map_err(|e| InputError {
                file: dir.display().to_string(),
                line: 0,
                message: e.to_string(),
            })?,
        )),
    };
    let options = Options {
        destination: args.namespace,
        ignore,
        argocd_cm,
        bundled,
    };
    if args.output == Format::Order {
        let objects = super::manifest::read(&sources)?;
        return Ok((output::order(&objects, &options.destination), 0));
    }
    let report = lint_sources(&sources, &options)?;
    let text = match args.output {
        Format::Text => output::text(&report),
        Format::Json => output::json(&report) + "\n",
        Format::Sarif => output::sarif(&report) + "\n",
        Format::Order => String::new(),
    };
    Ok((text, report.exit_code()))
}
