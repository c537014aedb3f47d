//! Text from manifests, made safe to print where people, terminals and CI runners read it.
//!
//! A pull request writes the object names, file names, env var names and silencing reasons
//! lint prints. A line break followed by `::error …` is a GitHub Actions workflow command (the
//! runner trims leading white space before it looks for `::`), an escape sequence rewrites a
//! terminal or a log view, and a bidi override reorders what a reviewer sees. So these
//! characters are shown escaped (`\n`, `\u{1b}`), never written.

use std::borrow::Cow;

/// A character that does something other than show itself: a control character (C0, DEL,
/// C1), a line or paragraph separator, or a bidi mark, embedding, override or isolate.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every hidden character escaped, as one line.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_hidden(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Text lint wrote over several lines (a fix with YAML in it): its line breaks kept, every
/// other hidden character escaped. Manifest text put into it must be [`printable`] already.
pub fn printable_lines(text: &str) -> String {
    text.split('\n')
        .map(printable)
        .collect::<Vec<_>>()
        .join("\n")
}

/// JSON text with the hidden characters serde_json leaves raw (DEL, C1, separators, bidi)
/// written as `\u` escapes: the same document, safe to print. They can only occur inside
/// strings, where an escape means the same character.
pub fn json_escaped(json: String) -> String {
    if !json.chars().any(is_hidden_in_json) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_hidden_in_json(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Hidden, but not the line breaks and indentation of pretty-printed JSON (serde_json
/// escapes every C0 character inside strings).
fn is_hidden_in_json(c: char) -> bool {
    is_hidden(c) && !matches!(c, '\n' | ' ')
}
