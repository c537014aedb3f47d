//! `wavegate lint` on a large rendered set: `--objects` (default 5,000) objects in
//! namespaces of 19 objects, each an application as Helm charts render it (Deployments that mount
//! ConfigMaps and Secrets, run as ServiceAccounts, reach Services and a CNPG Cluster by DNS and
//! use its Databases, selected by Services, behind WaveGates), in sync waves, read from YAML
//! text: parsing, ordering, the reference graph and every rule, on one thread. No cluster.
//!
//! Usage: `cargo bench --bench lint_objects -- [--objects 5000] [--runs 5]`
//! Prints `BENCH lint objects=… findings=… best_ms=… median_ms=… cpu_ms=…` for scripts/bench.sh.

use std::time::Instant;
use wavegate::lint::{self, Options, Source};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

/// One application: 19 objects.
fn app(ns: &str) -> String {
    let mut docs = vec![format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"
    )];
    docs.push(format!(
        "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata:\n  name: pg\n  namespace: {ns}\nspec:\n  instances: 3\n  storage: {{size: 10Gi}}\n"
    ));
    docs.push(format!(
        "apiVersion: postgresql.cnpg.io/v1\nkind: Database\nmetadata:\n  name: app\n  namespace: {ns}\n  annotations: {{argocd.argoproj.io/sync-wave: \"1\"}}\nspec: {{name: app, owner: app, cluster: {{name: pg}}}}\n"
    ));
    docs.push(format!(
        "apiVersion: wavegate.dev/v1alpha1\nkind: WaveGate\nmetadata:\n  name: db\n  namespace: {ns}\n  annotations: {{argocd.argoproj.io/sync-wave: \"2\"}}\nspec:\n  checks:\n    - {{name: app, cnpgDatabase: {{name: app}}}}\n"
    ));
    for c in ["api", "web", "worker"] {
        docs.push(format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {c}\n  namespace: {ns}\n"
        ));
        docs.push(format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {c}-config\n  namespace: {ns}\ndata:\n  config.yaml: |\n    upstream: http://api.{ns}.svc.cluster.local:8080\n    cache: redis:6379\n"
        ));
        docs.push(format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {c}-secret\n  namespace: {ns}\nstringData:\n  token: abc\n"
        ));
        docs.push(format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {c}\n  namespace: {ns}\n  labels: {{app.kubernetes.io/name: {c}}}\nspec:\n  selector: {{app.kubernetes.io/name: {c}, app.kubernetes.io/instance: {ns}}}\n  ports: [{{port: 8080, targetPort: http}}]\n"
        ));
        docs.push(format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {c}\n  namespace: {ns}\n  annotations: {{argocd.argoproj.io/sync-wave: \"3\"}}\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app.kubernetes.io/name: {c}, app.kubernetes.io/instance: {ns}}}\n  template:\n    metadata:\n      labels: {{app.kubernetes.io/name: {c}, app.kubernetes.io/instance: {ns}, app.kubernetes.io/version: \"1.2.3\"}}\n    spec:\n      serviceAccountName: {c}\n      volumes:\n        - name: config\n          configMap: {{name: {c}-config}}\n      containers:\n        - name: {c}\n          image: example/{c}:1.2.3\n          args: [\"--listen=:8080\", \"--config=/etc/{c}/config.yaml\"]\n          env:\n            - {{name: DATABASE_HOST, value: pg-rw.{ns}.svc.cluster.local}}\n            - {{name: DATABASE_NAME, value: app}}\n            - name: TOKEN\n              valueFrom:\n                secretKeyRef: {{name: {c}-secret, key: token}}\n          envFrom:\n            - secretRef: {{name: pg-app}}\n          ports: [{{name: http, containerPort: 8080}}]\n"
        ));
    }
    docs.join("---\n")
}

fn main() {
    let objects = arg("--objects", 5000);
    let runs = arg("--runs", 5).max(1);
    let apps = objects.div_ceil(19);
    let text: String = (0..apps)
        .map(|i| app(&format!("team-{i:04}")))
        .collect::<Vec<_>>()
        .join("---\n");
    let sources = [Source::Text {
        name: "bench.yaml".into(),
        text,
    }];
    let mut times = Vec::new();
    let mut found = (0, 0);
    let cpu0 = cpu_ms();
    for _ in 0..runs {
        let start = Instant::now();
        let report = lint::lint_sources(&sources, &Options::default()).expect("lint");
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        found = (report.objects, report.findings.len());
    }
    let cpu = (cpu_ms() - cpu0) / runs as f64;
    times.sort_by(f64::total_cmp);
    println!(
        "BENCH lint objects={} findings={} best_ms={:.1} median_ms={:.1} cpu_ms={:.1} runs={runs}",
        found.0,
        found.1,
        times[0],
        times[times.len() / 2],
        cpu
    );
}

/// This process's user + system CPU time (`/proc/self/stat`, clock ticks of 10 ms).
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, s)| s);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) * 10.0
}
