// The waves table and the timeline of one Application as data, the one model both UIs draw: the
// dashboard (src/api/dashboard.html, DOM nodes) and the Argo CD UI extension
// (argocd/extension/extension-wavegate.js, React elements). Each UI only turns these values into
// its own nodes, so a field added to the waves view is shown alike in both.
//
// This file is the only copy. wavegate splices it into the dashboard when it serves it; Argo CD
// loads an extension as one file with no bundler, so the extension carries it between markers,
// written there by `WAVEGATE_UPDATE_UI=1 cargo test --test offline ui` (tests/offline/ui.rs fails
// while the two differ). Plain ES2018 function declarations, no DOM and no React:
// tests/browser/waves-model.test.mjs runs it in node as it is.

var STATUSES = ['Healthy', 'Progressing', 'Degraded', 'Suspended', 'Missing', 'Unknown'];

// A status word this UI does not know (from a newer wavegate) is coloured as Unknown; the word
// itself is still printed.
function statusOf(s) { return STATUSES.indexOf(s) >= 0 ? s : 'Unknown'; }

// How the tables name a resource of a waves answer: "Database.postgresql.cnpg.io ddb/forgejo".
function resourceName(r) {
  return (r.group ? r.kind + '.' + r.group : r.kind) + ' ' + (r.namespace ? r.namespace + '/' : '') + r.name;
}

// Above this many resources on a page, a wave's rows are drawn only while it is open (the
// blocking wave is, at first): 2,000 rows rebuilt and compared at every poll would keep the page
// busy for most of the interval.
var ROWS_AT_ONCE = 200;

function resourceCount(w) {
  return ((w && w.waves) || []).reduce(function (n, x) { return n + (x.resources || []).length; }, 0);
}

// The line beneath an Application's heading: the wave that holds its sync and why, or that none
// does. `message` is the waves answer's.
function blockingLine(blockingWave, message) {
  if (blockingWave == null) {
    return { wave: 'none', clear: true, title: 'No blocking wave', detail: ' \u2014 ' + (message || 'all waves truly healthy') };
  }
  return { wave: String(blockingWave), clear: false, title: 'Blocking wave: ' + blockingWave, detail: message ? ' \u2014 ' + message : '' };
}

// The waves table of a waves answer `w`: per wave in the API's order, its heading and, while it
// is open, its resources, then `wavegate lint`'s findings about the objects of that wave; after
// the waves, the findings about objects in no listed wave and why lint said nothing at this poll
// ("lint skipped: …": no findings then is not "no findings").
//
// `grouped`: too many resources to draw them all (ROWS_AT_ONCE), so only open waves have rows;
// `opened(wave)`: true or false as the user left that wave, undefined when they have not touched it.
function wavesTable(w, grouped, opened) {
  var waves = w.waves || [];
  var lint = w.lint || {};
  return {
    empty: waves.length === 0 ? 'No resources with sync waves.' : null,
    waves: waves.map(function (wave) {
      var rs = wave.resources || [];
      var chosen = grouped ? opened(wave.wave) : undefined;
      var open = !grouped || (chosen === undefined ? wave.wave === w.blockingWave : chosen);
      return {
        wave: wave.wave,
        status: wave.status,
        blocking: w.blockingWave != null && wave.wave === w.blockingWave,
        count: ' \u00b7 ' + rs.length + (rs.length === 1 ? ' resource' : ' resources'),
        open: open,
        toggle: grouped ? (open ? 'Hide resources' : 'Show resources') : null,
        resources: open ? rs.map(resourceRow) : [],
        findings: findingsOf(w, wave.wave)
      };
    }),
    findings: findingsOf(w, null),
    skipped: lint.skipped || '',
    note: lint.note ? 'lint: ' + lint.note : ''
  };
}

// One resource's row. `argo`: Argo CD's own verdict, when one of its health scripts judged the
// object and said something else than wavegate's consequence (a Degraded within the grace).
function resourceRow(r) {
  var argo = r.argoStatus && r.argoStatus.status !== r.status
    ? 'Argo CD: ' + (r.argoStatus.status || 'no status') + (r.argoStatus.message ? ' \u2014 ' + r.argoStatus.message : '')
    : '';
  return {
    key: [r.group, r.kind, r.namespace, r.name].join('/'),
    id: r.kind + '-' + (r.namespace || '') + '-' + r.name,
    name: resourceName(r),
    status: r.status,
    message: r.message || '',
    argo: argo,
    judgedBy: r.judgedBy || ''
  };
}

// `wavegate lint`'s findings on the live objects (the `lint` of a waves answer) about the objects
// of `wave`, or with `wave` null about objects in none of the listed waves.
function findingsOf(w, wave) {
  var all = (w.lint && w.lint.findings) || [];
  var waves = (w.waves || []).map(function (x) { return x.wave; });
  return all.filter(function (f) { return wave === null ? waves.indexOf(f.wave) < 0 : f.wave === wave; });
}

// Where the server's clock (`timeline.now`) is in an answer's text: [start, end) of its value,
// or null unless the key occurs exactly once and its value is a plain string. `"now":"` with
// bare quotes can only be a key (quotes inside strings are escaped), and the answer has no `now`
// key but the timeline's; the key occurring once makes sure of both.
function clockOf(text) {
  var key = '"now":"', at = text.indexOf(key);
  if (at < 0 || text.indexOf(key, at + 1) >= 0) return null;
  var start = at + key.length, end = text.indexOf('"', start);
  return end > 0 && text.slice(start, end).indexOf('\\') < 0 ? [start, end] : null;
}

// `value` with its timeline's `now` replaced; `value` itself is left as it was.
function withNow(value, now) {
  var copy = {}, timeline = {};
  for (var k in value) copy[k] = value[k];
  for (var j in value.timeline) timeline[j] = value.timeline[j];
  timeline.now = now;
  copy.timeline = timeline;
  return copy;
}

// A waves answer's text as a value, reusing `prev` (the last one read for the same path:
// { text, value, clock }) when little changed. wavegate stamps every answer with the server's
// clock (`timeline.now`), so two polls of an idle Application differ in those bytes alone; then
// the previous value is kept but for a fresh `timeline` carrying the new `now`, so a UI can tell
// by identity that `waves`, `lint` and the rest are unchanged and redraw nothing but the timeline.
function readAnswer(text, prev) {
  if (prev && text === prev.text) return prev;
  var at = clockOf(text), was = prev && prev.clock;
  var t = prev && prev.value && prev.value.timeline;
  if (at && was && t && at[0] === was[0] && t.now === prev.text.slice(was[0], was[1]) &&
      text.slice(0, at[0]) === prev.text.slice(0, was[0]) && text.slice(at[1]) === prev.text.slice(was[1])) {
    return { text: text, value: withNow(prev.value, text.slice(at[0], at[1])), clock: at };
  }
  return { text: text, value: JSON.parse(text), clock: at };
}

// The answer `prev` (readAnswer's) served again at `now`: what a 304 means. A poll sends the
// answer's ETag back (If-None-Match) and, when nothing but the time changed, wavegate answers
// 304 without a body and with the time in Wavegate-Now, so megabytes that did not change are not
// sent, read or compared again: the new text is spliced where `prev.clock` says (no search of
// the megabyte), and compared only when a later answer comes with a body. A time that is not a
// plain timestamp leaves `prev` as it was.
function answerAt(prev, now) {
  var c = prev.clock, t = prev.value && prev.value.timeline;
  if (!c || !t || !/^[0-9A-Za-z:.+-]{1,64}$/.test(now || '') || t.now !== prev.text.slice(c[0], c[1])) return prev;
  if (now === t.now) return prev;
  return {
    text: prev.text.slice(0, c[0]) + now + prev.text.slice(c[1]),
    value: withNow(prev.value, now),
    clock: [c[0], c[0] + now.length],
    etag: prev.etag
  };
}

// The timeline of a waves answer, when it has waves to draw.
function timelineOf(w) {
  var t = w && w.timeline;
  return t && (t.waves || []).length ? t : null;
}

// Beneath the timeline: Argo CD's own words about the sync, and what the two marks mean.
function timelineCaption(sync) {
  return (sync ? 'Last sync' + (sync.revision ? ' of ' + sync.revision.slice(0, 7) : '') + ': ' + sync.phase +
      (sync.message ? ' \u2014 Argo CD: \u201c' + sync.message + '\u201d' : '') : 'No sync recorded by Argo CD') +
    ' \u00b7 applied = Argo CD\u2019s managedFields time; healthy = wavegate\u2019s recorded transition (WaveGates); \u25cb applied, \u25c6 truly healthy';
}

// Lays out the `timeline` of a waves answer (docs/openapi.yaml, WaveTimeline) as SVG shapes:
// one row per wave in wave order, a bar from when Argo CD applied the wave to when it became
// truly healthy (or to now while it is not), the blocking wave tinted with its reason beneath.
// Times nobody recorded are written as words, never drawn as if known.
function timelineLayout(t) {
  var W = 880, LEFT = 165, RIGHT = 24, ROW = 44, TOP = 36, FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif';
  var INK = '#1f2328', MUTED = '#57606a', RED = '#8a1712', RED_BG = '#fde0de', GREEN = '#1a7f37', BLUE = '#3b6fd8';
  var parse = function (s) { var v = s ? Date.parse(s) : NaN; return isNaN(v) ? null : v; };
  var sync = t.sync || null, waves = t.waves || [];
  var t0 = sync ? parse(sync.startedAt) : null;
  var now = parse(t.now);
  var running = !sync || !sync.finishedAt;
  var end = running ? now : parse(sync.finishedAt);
  waves.forEach(function (w) { [w.appliedAt, w.healthyAt].forEach(function (s) { var v = parse(s); if (v != null && (end == null || v > end)) end = v; }); });
  if (t0 == null || end == null || end <= t0) end = (t0 || 0) + 1000;
  // A view may name times after its `now` (a batch's part is served with the batch's `now`,
  // taken before the part was judged): the axis then ends at one of those, which is not now.
  var endsAs = running ? (end === now ? ' (now)' : '') : (end === parse(sync.finishedAt) ? ' (sync finished)' : '');
  var x = function (v) { return LEFT + (W - LEFT - RIGHT) * Math.max(0, Math.min(1, (v - t0) / (end - t0))); };
  var rel = function (v) {
    var s = Math.round((v - t0) / 1000), neg = s < 0; s = Math.abs(s);
    var m = Math.floor(s / 60), txt = m > 0 ? m + 'm' + String(s % 60).padStart(2, '0') + 's' : s + 's';
    return (neg ? '\u2212' : '+') + txt;
  };
  var text = function (xx, yy, str, more) {
    var a = { x: xx, y: yy, fontSize: 12, fontFamily: FONT, fill: INK, dominantBaseline: 'middle' };
    for (var k in more || {}) a[k] = more[k];
    return { tag: 'text', attrs: a, text: str };
  };
  var shapes = [], y = TOP;
  // Axis: the sync's start, its end (or now), and the middle.
  if (t0 != null) {
    shapes.push({ tag: 'line', attrs: { x1: LEFT, y1: TOP - 8, x2: W - RIGHT, y2: TOP - 8, stroke: '#8c959f', strokeWidth: 1 } });
    [[t0, 'start'], [t0 + (end - t0) / 2, 'middle'], [end, 'end']].forEach(function (p) {
      shapes.push({ tag: 'line', attrs: { x1: x(p[0]), y1: TOP - 12, x2: x(p[0]), y2: TOP - 4, stroke: '#8c959f', strokeWidth: 1 } });
      shapes.push(text(x(p[0]), TOP - 22, p[0] === t0 ? 'sync started ' + new Date(t0).toLocaleTimeString()
        : p[0] === end ? rel(end) + endsAs : rel(p[0]),
        { textAnchor: p[1], fill: MUTED, fontSize: 11, 'data-testid': 'timeline-axis-' + p[1] }));
    });
  } else {
    shapes.push(text(LEFT, TOP - 18, 'Argo CD has recorded no sync operation for this application', { fill: MUTED, 'data-testid': 'timeline-axis-start' }));
  }
  waves.forEach(function (w) {
    var kids = [], mid = y + 14;
    var colour = w.blocking ? RED : (w.status === 'Healthy' ? GREEN : BLUE);
    var reason = w.blocking && w.reason ? w.reason.replace(/\s+/g, ' ') : '';
    var lines = [];
    while (reason && lines.length < 2) {
      var room = lines.length === 0 ? 88 : 98; // characters of 11.5px bold in 715px, after "Blocking: "
      if (reason.length <= room) { lines.push(reason); break; }
      var cut = reason.lastIndexOf(' ', room); if (cut < 50) cut = room;
      lines.push(lines.length === 1 ? reason.slice(0, room - 1) + '\u2026' : reason.slice(0, cut));
      reason = reason.slice(cut).replace(/^ /, '');
    }
    var height = ROW + lines.length * 15;
    kids.push({ tag: 'rect', attrs: { x: 0, y: y, width: W, height: height - 4, rx: 3,
      fill: w.blocking ? RED_BG : '#f6f8fa', stroke: w.blocking ? '#cf222e' : 'none', strokeWidth: w.blocking ? 1.5 : 0, 'data-testid': 'timeline-row' } });
    kids.push(text(8, mid, 'Wave ' + w.wave, { fontWeight: 700, fill: w.blocking ? RED : INK, 'data-testid': 'timeline-label' }));
    kids.push(text(8, y + 31, (w.blocking ? 'blocking \u00b7 ' : '') + w.status, { fill: w.blocking ? RED : MUTED, fontSize: 11, fontWeight: w.blocking ? 700 : 400, 'data-testid': 'timeline-status' }));
    var ax = w.appliedAt && t0 != null ? x(parse(w.appliedAt)) : null;
    var hv = w.healthyAt ? parse(w.healthyAt) : null;
    var words;
    if (ax != null) {
      var hx = hv != null ? Math.max(x(hv), ax) : null;
      var bx = hx != null ? hx : x(end);
      var bar = { x: ax, y: mid - 6, width: Math.max(bx - ax, 2), height: 12, rx: 2, fill: colour, 'data-testid': 'timeline-bar' };
      if (w.healthy === 'timeUnknown') { bar.fill = '#d3f5dc'; bar.stroke = GREEN; bar.strokeDasharray = '4 3'; }
      kids.push({ tag: 'rect', attrs: bar, title: w.appliedNote });
      kids.push({ tag: 'circle', attrs: { cx: ax, cy: mid, r: 4.5, fill: '#fff', stroke: INK, strokeWidth: 2, 'data-testid': 'timeline-applied' },
        title: 'applied ' + w.appliedAt + ' \u2014 ' + w.appliedNote });
      words = 'applied ' + rel(parse(w.appliedAt)) + (w.applied === 'failed' ? ' \u00b7 ' + w.appliedNote : '');
      if (hx != null) {
        kids.push({ tag: 'path', attrs: { d: 'M' + hx + ' ' + (mid - 8) + ' l8 8 l-8 8 l-8 -8 z', fill: GREEN, stroke: '#fff', strokeWidth: 1, 'data-testid': 'timeline-healthy' },
          title: 'truly healthy ' + w.healthyAt + ' \u2014 ' + w.healthyNote });
        words += ' \u00b7 truly healthy ' + rel(hv) + (hv < parse(w.appliedAt) ? ' (already before this apply)' : '');
      } else if (w.healthy === 'timeUnknown') {
        words += ' \u00b7 truly healthy now (time not recorded)';
      } else {
        words += ' \u00b7 not truly healthy ' + (running ? 'for ' : 'when the sync ended, after ') + rel(end - parse(w.appliedAt) + t0).replace('+', '');
      }
    } else {
      words = ({ failed: w.appliedNote, pending: 'not applied yet \u2014 Argo CD has not reached this wave', unchanged: 'applied without changes (no time recorded)',
        unknown: 'applied, time unknown: ' + (w.appliedNote || ''), notInSync: 'not part of the last sync' })[w.applied] || w.appliedNote || '';
      if (w.healthy === 'healthy' && w.healthyAt) words += ' \u00b7 truly healthy since ' + w.healthyAt;
    }
    kids.push(text(LEFT, y + 31, words, { fontSize: 11, fill: w.blocking ? RED : MUTED, fontStyle: ax == null ? 'italic' : 'normal', 'data-testid': 'timeline-times' }));
    lines.forEach(function (line, i) {
      kids.push({ tag: 'text', attrs: { x: LEFT, y: y + ROW + 4 + i * 15, fontSize: 11.5, fontFamily: FONT, fill: RED, fontWeight: 700, dominantBaseline: 'middle', 'data-testid': 'timeline-reason' },
        text: (i === 0 ? 'Blocking: ' : '') + line, title: w.reason });
    });
    shapes.push({ tag: 'g', attrs: { 'data-testid': 'timeline-wave-' + w.wave, 'data-wave': String(w.wave), 'data-blocking': String(!!w.blocking),
      'data-applied': w.applied, 'data-healthy': w.healthy, 'data-status': w.status }, children: kids });
    y += height;
  });
  var summary = waves.map(function (w) {
    return 'wave ' + w.wave + ': ' + (w.appliedAt ? 'applied ' + w.appliedAt : w.applied) + ', ' +
      (w.healthyAt ? 'healthy ' + w.healthyAt : w.healthy === 'timeUnknown' ? 'healthy (time not recorded)' : w.status) + (w.blocking ? ', blocking: ' + w.reason : '');
  }).join('; ');
  return { width: W, height: y + 4, shapes: shapes, summary: summary };
}
