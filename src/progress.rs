//! What `wavegate wait` shows while it waits (on stderr; the final verdict goes to stdout).
//!
//! On a terminal: a block with one line per check and its status, redrawn in place, headed by
//! the overall status, the elapsed and the remaining time. Anywhere else (a hook Job's log, a
//! pipe): one plain line per change, nothing redrawn, nothing timed, so a log reads as the
//! history of the wait.

use crate::health::{HealthStatus, Verdict, printable};
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// One line of the block: a check (or a waited-for object) and its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    pub status: HealthStatus,
    pub message: String,
}

/// Live redrawing only when a person watches: stdout and stderr both terminals (a redirected
/// stdout means the output is being kept), and a terminal that understands cursor movement.
pub fn is_live() -> bool {
    std::io::stdout().is_terminal()
        && std::io::stderr().is_terminal()
        && std::env::var("TERM").is_ok_and(|t| !t.is_empty() && t != "dumb")
}

// VT100/ECMA-48 controls that xterm, tmux and the Linux console share. Auto-wrap is turned off
// while the block is drawn, so a long message is clipped at the right edge instead of wrapping
// onto a line the next redraw would not move back over.
const WRAP_OFF_HIDE_CURSOR: &str = "\x1b[?7l\x1b[?25l";
const WRAP_ON_SHOW_CURSOR: &str = "\x1b[?7h\x1b[?25h";
const CLEAR_LINE: &str = "\x1b[2K";
const CLEAR_BELOW: &str = "\x1b[J";

pub struct Progress<W: Write> {
    out: W,
    live: bool,
    title: String,
    started: Instant,
    timeout: Duration,
    overall: Option<Verdict>,
    rows: Vec<Row>,
    /// Lines of the block on screen (live).
    drawn: usize,
    /// What each plain line last said.
    said: HashMap<String, (HealthStatus, String)>,
    said_overall: Option<Option<Verdict>>,
}

impl<W: Write> Progress<W> {
    pub fn new(out: W, live: bool, title: impl Into<String>, timeout: Duration) -> Self {
        Progress {
            out,
            live,
            title: title.into(),
            started: Instant::now(),
            timeout,
            overall: None,
            rows: Vec::new(),
            drawn: 0,
            said: HashMap::new(),
            said_overall: None,
        }
    }

    /// A new reading: the overall verdict (a WaveGate's health; `None` where the rows are all
    /// there is, or the gate does not exist yet) and one row per check.
    pub fn show(&mut self, overall: Option<Verdict>, rows: Vec<Row>) {
        self.overall = overall;
        self.rows = rows;
        if self.live {
            self.redraw();
        } else {
            self.say_changes();
        }
    }

    /// The clock moved: live, the times are redrawn; plain, nothing is said.
    pub fn tick(&mut self) {
        if self.live {
            self.redraw();
        }
    }

    /// The wait is over: leave the last block on screen and give the terminal back.
    pub fn finish(&mut self) {
        if self.live {
            self.redraw();
            let _ = write!(self.out, "{WRAP_ON_SHOW_CURSOR}");
            let _ = self.out.flush();
        }
    }

    #[cfg(test)]
    pub fn into_inner(self) -> W {
        self.out
    }

    fn redraw(&mut self) {
        let elapsed = self.started.elapsed();
        let lines = frame(
            &self.title,
            self.overall.as_ref(),
            &self.rows,
            elapsed,
            self.timeout.saturating_sub(elapsed),
        );
        let mut buf = String::from(WRAP_OFF_HIDE_CURSOR);
        if self.drawn > 0 {
            // Back to the first column of the block's first line.
            buf.push_str(&format!("\x1b[{}F", self.drawn));
        }
        for line in &lines {
            buf.push_str(CLEAR_LINE);
            buf.push_str(line);
            buf.push('\n');
        }
        // A shorter block than last time: the old lines below it go.
        buf.push_str(CLEAR_BELOW);
        self.drawn = lines.len();
        let _ = self.out.write_all(buf.as_bytes());
        let _ = self.out.flush();
    }

    fn say_changes(&mut self) {
        if self.said_overall.as_ref() != Some(&self.overall) {
            match &self.overall {
                Some(v) => {
                    let _ = writeln!(self.out, "{}: {}", self.title, printable(&v.to_string()));
                }
                None if self.rows.is_empty() => {
                    let _ = writeln!(self.out, "{} does not exist yet", self.title);
                }
                None => {}
            }
            self.said_overall = Some(self.overall.clone());
        }
        // Rows of a gate are its checks, named under the gate's title; bare rows (waited-for
        // objects) name themselves.
        let prefix = if self.overall.is_some() {
            format!("{} check ", self.title)
        } else {
            String::new()
        };
        for row in &self.rows {
            let now = (row.status, row.message.clone());
            if self.said.get(&row.name) != Some(&now) {
                let v = Verdict::new(row.status, row.message.clone());
                let line = printable(&format!("{prefix}{}: {v}", row.name));
                let _ = writeln!(self.out, "{line}");
                self.said.insert(row.name.clone(), now);
            }
        }
        let _ = self.out.flush();
    }
}

/// The live block: a header with the overall status and the times, then the checks as a table.
pub fn frame(
    title: &str,
    overall: Option<&Verdict>,
    rows: &[Row],
    elapsed: Duration,
    remaining: Duration,
) -> Vec<String> {
    let healthy = rows
        .iter()
        .filter(|r| r.status == HealthStatus::Healthy)
        .count();
    let status = match overall {
        Some(v) => v.status.to_string(),
        None if rows.is_empty() => "does not exist yet".to_string(),
        None => {
            let verdicts: Vec<(&str, Verdict)> = rows
                .iter()
                .map(|r| (r.name.as_str(), Verdict::new(r.status, "")))
                .collect();
            crate::health::worst_of(verdicts.iter().map(|(n, v)| (*n, v)))
                .status
                .to_string()
        }
    };
    let mut lines = vec![format!(
        "{title}: {status}   {healthy}/{} healthy   elapsed {}   remaining {}",
        rows.len(),
        seconds(elapsed),
        seconds(remaining)
    )];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                printable(&r.name),
                r.status.to_string(),
                printable(&r.message),
            ]
        })
        .collect();
    if !cells.is_empty() {
        lines.extend(
            crate::table::render(&["CHECK", "STATUS", "MESSAGE"], &cells)
                .into_iter()
                .map(|l| format!("  {l}")),
        );
    }
    lines
}

/// Whole seconds, as humantime spells them ("1m 5s").
fn seconds(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use HealthStatus::*;

    fn row(name: &str, status: HealthStatus, message: &str) -> Row {
        Row {
            name: name.into(),
            status,
            message: message.into(),
        }
    }

    #[test]
    fn frame_has_one_line_per_check_under_a_header_with_the_times() {
        let lines = frame(
            "WaveGate cicd/web-up",
            Some(&Verdict::progressing("1 of 2 checks healthy")),
            &[
                row("web", Healthy, "Service cicd/web has 1 ready endpoint"),
                row("db", Progressing, "Database cicd/app: not applied yet"),
            ],
            Duration::from_millis(65_400),
            Duration::from_secs(535),
        );
        assert_eq!(
            lines,
            [
                "WaveGate cicd/web-up: Progressing   1/2 healthy   elapsed 1m 5s   remaining 8m 55s",
                "  CHECK   STATUS        MESSAGE",
                "  web     Healthy       Service cicd/web has 1 ready endpoint",
                "  db      Progressing   Database cicd/app: not applied yet",
            ]
        );
    }

    #[test]
    fn bare_rows_head_with_their_worst_status() {
        let lines = frame(
            "wavegate wait",
            None,
            &[
                row("services cicd/a", Healthy, ""),
                row("services cicd/b", Missing, ""),
            ],
            Duration::ZERO,
            Duration::from_secs(60),
        );
        assert!(
            lines[0].starts_with("wavegate wait: Missing   1/2 healthy"),
            "{lines:?}"
        );
    }

    #[test]
    fn plain_output_is_one_line_per_change_and_never_redraws() {
        let mut p = Progress::new(
            Vec::new(),
            false,
            "WaveGate cicd/web-up",
            Duration::from_secs(60),
        );
        p.show(None, vec![]);
        let checks = |s| vec![row("web", s, "Service cicd/web"), row("db", Healthy, "ok")];
        p.show(Some(Verdict::progressing("1 of 2")), checks(Progressing));
        p.tick();
        p.show(Some(Verdict::progressing("1 of 2")), checks(Progressing));
        p.show(Some(Verdict::healthy("all 2")), checks(Healthy));
        p.finish();
        let out = String::from_utf8(p.into_inner()).unwrap();
        assert_eq!(
            out,
            "WaveGate cicd/web-up does not exist yet\n\
             WaveGate cicd/web-up: Progressing: 1 of 2\n\
             WaveGate cicd/web-up check web: Progressing: Service cicd/web\n\
             WaveGate cicd/web-up check db: Healthy: ok\n\
             WaveGate cicd/web-up: Healthy: all 2\n\
             WaveGate cicd/web-up check web: Healthy: Service cicd/web\n"
        );
        assert!(!out.contains('\x1b'));
    }

    #[test]
    fn live_output_moves_back_over_the_block_it_drew() {
        let mut p = Progress::new(
            Vec::new(),
            true,
            "services cicd/web",
            Duration::from_secs(60),
        );
        p.show(None, vec![row("services cicd/web", Progressing, "0 ready")]);
        p.tick();
        p.finish();
        let out = String::from_utf8(p.into_inner()).unwrap();
        // Header + table header + one row = 3 lines, drawn then redrawn twice in place.
        assert_eq!(out.matches("\x1b[3F").count(), 2, "{out:?}");
        assert!(out.ends_with(WRAP_ON_SHOW_CURSOR), "{out:?}");
    }
}
