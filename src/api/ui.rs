//! The waves table and timeline model the dashboard and the Argo CD UI extension share
//! (`ui/waves.js`), and where it goes in each.
//!
//! Both keep a region between [`BEGIN`] and [`END`] for it. The dashboard's is empty in its
//! source and filled here when the page is first served. Argo CD loads an extension as one file,
//! so the extension's region holds a copy, which `tests/offline/ui.rs` holds to this file (and
//! rewrites with `WAVEGATE_UPDATE_UI=1`).

/// `ui/waves.js`, the one source of the model.
pub const MODEL: &str = include_str!("../../ui/waves.js");
pub const BEGIN: &str = "// ---- ui/waves.js: BEGIN";
pub const END: &str = "// ---- ui/waves.js: END ----";

/// `text` with its region between [`BEGIN`] and [`END`] (the marker lines kept) holding
/// [`MODEL`], each line indented as the BEGIN marker is. `None` when `text` has no such region,
/// or more than one.
pub fn with_model(text: &str) -> Option<String> {
    if text.matches(BEGIN).count() != 1 {
        return None;
    }
    let begin = text.find(BEGIN)?;
    let line_start = text[..begin].rfind('\n').map_or(0, |i| i + 1);
    let indent = &text[line_start..begin];
    let body_start = begin + text[begin..].find('\n')? + 1;
    let end = body_start + text[body_start..].find(END)?;
    let end_line = text[..end].rfind('\n').map_or(0, |i| i + 1);
    if end_line < body_start || !text[end_line..end].trim().is_empty() {
        return None;
    }
    let mut out = String::with_capacity(text.len() + MODEL.len());
    out.push_str(&text[..body_start]);
    for line in MODEL.lines() {
        if !line.is_empty() {
            out.push_str(indent);
            out.push_str(line);
        }
        out.push('\n');
    }
    out.push_str(&text[end_line..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(region: &str) -> String {
        format!("<script>\n  {BEGIN} (shared) ----\n{region}  {END}\n  draw();\n</script>\n")
    }

    #[test]
    fn the_model_replaces_whatever_the_region_held_indented_like_its_marker() {
        let filled = with_model(&page("  stale();\n")).expect("one region");
        assert!(!filled.contains("stale()"), "{filled}");
        assert!(filled.contains("\n  function timelineLayout(t) {\n"));
        assert!(filled.ends_with(&format!("  {END}\n  draw();\n</script>\n")));
        assert_eq!(with_model(&filled).as_deref(), Some(filled.as_str()));
        assert_eq!(with_model(&page("")), Some(filled));
    }

    #[test]
    fn a_page_without_one_whole_region_is_refused() {
        assert_eq!(with_model("<script>draw();</script>"), None);
        assert_eq!(with_model(&format!("  {BEGIN}\n  x();\n")), None);
        let twice = format!("{}{}", page(""), page(""));
        assert_eq!(with_model(&twice), None);
        assert_eq!(with_model(&format!("  {BEGIN} ---- {END}\n")), None);
    }
}
