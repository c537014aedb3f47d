//! The dashboard (src/api/dashboard.html) and the Argo CD UI extension
//! (argocd/extension/extension-wavegate.js) draw the wave timeline with the same code: Argo CD
//! loads the extension as one file, so the layout is written once and kept, byte for byte, in
//! both. This holds them together in every `cargo test`, with no browser and no wavegate;
//! tests/browser/timeline-layout.test.mjs runs the layout itself.

const DASHBOARD: &str = "src/api/dashboard.html";
const EXTENSION: &str = "argocd/extension/extension-wavegate.js";
const BEGIN: &str = "// ---- timeline layout: BEGIN";
const END: &str = "// ---- timeline layout: END ----";

/// The layout block of `text`, from its BEGIN marker to the end of its END marker.
fn layout_block(text: &str) -> Option<&str> {
    let start = text.find(BEGIN)?;
    let end = start + text[start..].find(END)? + END.len();
    Some(&text[start..end])
}

fn block_of(file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let block =
        layout_block(&text).unwrap_or_else(|| panic!("{file} has no timeline layout block"));
    assert_eq!(
        text.matches(BEGIN).count(),
        1,
        "{file} has one timeline layout block"
    );
    block.to_string()
}

#[test]
fn the_dashboard_and_the_extension_share_one_timeline_layout() {
    let (dashboard, extension) = (block_of(DASHBOARD), block_of(EXTENSION));
    assert!(
        dashboard.contains("function timelineLayout(t)"),
        "the block holds the layout function"
    );
    if dashboard != extension {
        let first = dashboard
            .lines()
            .zip(extension.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| dashboard.lines().count().min(extension.lines().count()));
        panic!(
            "the timeline layout differs between {DASHBOARD} and {EXTENSION} (first at line {} \
             of the block: {:?} vs {:?}); change both alike (copy the block from the one you \
             edited)",
            first + 1,
            dashboard.lines().nth(first),
            extension.lines().nth(first),
        );
    }
}

#[test]
fn the_block_is_found_between_its_markers_only() {
    let text = format!("a\n{BEGIN} x\nlayout\n{END}\nb");
    assert_eq!(
        layout_block(&text),
        Some(format!("{BEGIN} x\nlayout\n{END}").as_str())
    );
    assert_eq!(layout_block(&format!("{BEGIN} only")), None);
}
