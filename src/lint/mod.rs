//! `wavegate lint`: wrong wave order and unreachable readiness, found in rendered manifests
//! before anything is applied.
//!
//! manifests ([`manifest`]) → when Argo CD applies each object ([`sync_order`]) → what each
//! needs from the others ([`references`]) → [`rules`] (with [`argocd_cm`]: which kinds Argo CD
//! can judge) → findings → [`output`] (text, JSON, SARIF 2.1.0).

pub mod argocd_cm;
pub mod command;
pub mod manifest;
pub mod output;
mod printable;
pub mod references;
pub mod rules;
pub mod sync_order;
mod yaml;

pub use argocd_cm::ArgocdCm;
pub use manifest::{InputError, Object, Source};
pub use rules::{Finding, Location, Rule};

use serde::Serialize;
use std::collections::BTreeSet;

/// What to lint against.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The Application's destination namespace, for objects that name none.
    pub destination: String,
    /// Rules not to run.
    pub ignore: BTreeSet<Rule>,
    /// The argocd-cm Argo CD runs with, when known.
    pub argocd_cm: Option<ArgocdCm>,
    /// The bundled health scripts of the Argo CD release it runs, when known: a kind with one
    /// has a health check.
    pub bundled: Option<std::sync::Arc<crate::argocd_lua::Bundled>>,
}

/// The result of one lint.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Objects read.
    pub objects: usize,
    /// Findings, suppressed ones included (marked).
    pub findings: Vec<Finding>,
}

impl Report {
    /// Findings not silenced by an annotation.
    pub fn active(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.suppressed.is_none())
    }

    /// `wavegate lint`'s exit code: 0 clean, 1 findings.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.active().next().is_some())
    }
}

/// Lint objects already read.
pub fn lint(objects: &[Object], options: &Options) -> Result<Report, InputError> {
    let tasks = sync_order::sync_tasks(objects, &options.destination);
    let index = references::Index::new(objects, &options.destination);
    let refs = references::references(objects, &options.destination, &index);
    let input = rules::Input {
        objects,
        destination: &options.destination,
        tasks: &tasks,
        argocd_cm: options.argocd_cm.as_ref(),
        bundled: options.bundled.as_deref(),
    };
    let findings = rules::findings(&input, &refs, &options.ignore)?;
    Ok(Report {
        objects: objects.len(),
        findings,
    })
}

/// Read and lint.
pub fn lint_sources(sources: &[Source], options: &Options) -> Result<Report, InputError> {
    let objects = manifest::read(sources)?;
    lint(&objects, options)
}
