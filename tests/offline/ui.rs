//! The dashboard (src/api/dashboard.html) and the Argo CD UI extension
//! (argocd/extension/extension-wavegate.js) draw the waves table and the timeline from one model,
//! ui/waves.js. wavegate splices it into the dashboard when it serves the page; Argo CD loads the
//! extension as one file, so the extension carries a copy between the model's markers, held here
//! to ui/waves.js in every `cargo test`. `WAVEGATE_UPDATE_UI=1 cargo test --test offline ui`
//! writes the copy after ui/waves.js changed. tests/browser/waves-model.test.mjs runs the model.

use wavegate::api::ui::{BEGIN, END, MODEL, with_model};

const DASHBOARD: &str = "src/api/dashboard.html";
const EXTENSION: &str = "argocd/extension/extension-wavegate.js";

fn path(file: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file)
}

fn read(file: &str) -> String {
    std::fs::read_to_string(path(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// `text` without its model region (the marker lines included).
fn outside_region(text: &str) -> String {
    let begin = text.find(BEGIN).expect("a BEGIN marker");
    let end = begin + text[begin..].find(END).expect("an END marker") + END.len();
    format!("{}{}", &text[..begin], &text[end..])
}

#[test]
fn the_extension_carries_the_model_as_ui_waves_js_has_it() {
    let committed = read(EXTENSION);
    let built = with_model(&committed)
        .unwrap_or_else(|| panic!("{EXTENSION} has no one region between {BEGIN} and {END}"));
    if committed == built {
        return;
    }
    if std::env::var_os("WAVEGATE_UPDATE_UI").is_some() {
        std::fs::write(path(EXTENSION), &built).expect("the extension is writable");
        return;
    }
    let first = committed
        .lines()
        .zip(built.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| committed.lines().count().min(built.lines().count()));
    panic!(
        "{EXTENSION}'s copy of ui/waves.js differs from it (first at line {}: {:?}, ui/waves.js \
         has {:?}); edit ui/waves.js, not the copy, and run `WAVEGATE_UPDATE_UI=1 cargo test \
         --test offline ui`",
        first + 1,
        committed.lines().nth(first),
        built.lines().nth(first),
    );
}

/// The dashboard's source holds no copy to edit by mistake: its region is filled when served.
#[test]
fn the_dashboards_source_leaves_the_model_to_ui_waves_js() {
    let source = read(DASHBOARD);
    let begin = source
        .find(BEGIN)
        .expect("the dashboard has the model's region");
    let region = &source[begin..begin + source[begin..].find(END).expect("its END marker")];
    assert!(
        region
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with("//")),
        "{DASHBOARD}'s region holds code; it is filled from ui/waves.js:\n{region}"
    );
    let served = with_model(&source).expect("the region is whole");
    assert!(served.contains("  function timelineLayout(t) {\n"));
}

/// Neither UI defines again what the model defines: a second `function wavesTable` beside the
/// model's would quietly win or lose, whichever comes later in the file.
#[test]
fn no_ui_defines_a_name_of_the_model_outside_it() {
    let names: Vec<&str> = MODEL
        .lines()
        .filter_map(|l| {
            let rest = l
                .strip_prefix("function ")
                .or_else(|| l.strip_prefix("var "))?;
            rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                .next()
        })
        .collect();
    assert!(
        names.contains(&"timelineLayout") && names.contains(&"wavesTable"),
        "the scan sees the model's names: {names:?}"
    );
    for file in [DASHBOARD, EXTENSION] {
        let outside = outside_region(&read(file));
        for name in &names {
            for definition in [format!("function {name}("), format!("var {name} =")] {
                assert!(
                    !outside.contains(&definition),
                    "{file} defines `{definition}` outside the model's region; ui/waves.js has it"
                );
            }
        }
    }
}
