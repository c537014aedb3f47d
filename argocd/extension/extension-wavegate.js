// wavegate UI extension for Argo CD (https://argo-cd.readthedocs.io/en/stable/developer-guide/extensions/ui-extensions/).
//
// Argo CD concatenates /tmp/extensions/**/extension*.js into /extensions.js and runs it with a
// global `React` and `window.extensionsAPI`; there is no bundler at run time, so this file is
// plain ES2018 with hand-written React.createElement calls and hooks only (React >= 16.8, which
// every Argo CD with extensions ships).
//
// Registers:
//   * a "Gate" tab on wavegate.dev/WaveGate resources: the per-check verdicts;
//   * a "Waves" tab on argoproj.io/Application resources: every sync wave and the first one that
//     is not truly healthy, and the last sync drawn as a timeline (SVG);
//   * a "Waves" item in the application status panel, with a flyout holding the full table.
//
// Data comes from wavegate through Argo CD's proxy extension named "wavegate"
// (<argocd>/extensions/wavegate/<path> is forwarded to <wavegate>/<path>); Argo CD authorises
// each request against the Application named in Argocd-Application-Name / Argocd-Project-Name,
// which is why every request carries them. Shapes: docs/contracts.md.
(function (window) {
  'use strict';

  var React = window.React;
  var h = React.createElement;
  var EXTENSION = 'wavegate';
  var POLL_MS = 5000;
  // Dark text on a light tint (all pairs above 7:1); the status word is always printed, so colour
  // is never the only signal.
  var COLORS = {
    Healthy: ['#0a5c24', '#d3f5dc', '\u2713'],
    Progressing: ['#1e3a8a', '#dbe7fe', '\u2026'],
    Degraded: ['#8a1712', '#fde0de', '\u2715'],
    Suspended: ['#4c1d95', '#ece6fe', '\u2016'],
    Missing: ['#6b3d00', '#fdefc4', '!'],
    Unknown: ['#32383f', '#e4e7eb', '?']
  };

  // ---- talking to wavegate through Argo CD ---------------------------------------------------

  function proxyHeaders(application) {
    var md = (application && application.metadata) || {};
    var spec = (application && application.spec) || {};
    return {
      'Accept': 'application/json',
      'Argocd-Application-Name': (md.namespace || 'argocd') + ':' + md.name,
      'Argocd-Project-Name': spec.project || 'default'
    };
  }

  // Relative to the document's <base href>, so an Argo CD served under a root path
  // (server.rootpath / --basehref) reaches its own /extensions/ endpoint.
  function proxyUrl(path) {
    return 'extensions/' + EXTENSION + '/' + path;
  }

  // argocd-server answers 401 both for a session it no longer accepts ("Invalid token" / "Invalid
  // session", util/session AuthMiddlewareFunc) and for a request its RBAC refuses ("Unauthorized
  // extension request", server/extension CallExtension: no `extensions, invoke` for this
  // extension, or the application is not the user's to get). Only the body tells them apart.
  function explain(status, body, text) {
    if (body && body.error) return 'wavegate answered HTTP ' + status + ': ' + body.error;
    if (status === 401 && /Unauthorized extension request/.test(text || '')) {
      return 'Not permitted: Argo CD did not let you ask wavegate about this application. Your role needs ' +
        '"p, <role>, extensions, invoke, ' + EXTENSION + ', allow" in argocd-rbac-cm (role:admin does not include it).';
    }
    if (status === 401) return 'Argo CD answered 401: the session has expired, log in again.';
    if (status === 403) return 'Not permitted (403): grant "p, <role>, extensions, invoke, ' + EXTENSION + ', allow" in argocd-rbac-cm.';
    if (status === 404) return 'Argo CD answered 404: is the proxy extension "' + EXTENSION + '" configured in argocd-cm (extension.config) and server.enable.proxy.extension "true"?';
    if (status === 502 || status === 503 || status === 504) return 'wavegate is unreachable through Argo CD (HTTP ' + status + ').';
    return 'HTTP ' + status + ': ' + (text || '').slice(0, 200);
  }

  // `keep` (optional): { last } holding the last answer read for this path; a poll that brings it
  // again is not parsed again (readAnswer in ui/waves.js).
  function fetchJson(path, application, keep) {
    var headers = proxyHeaders(application), prev = keep && keep.last;
    if (prev && prev.etag) headers['If-None-Match'] = prev.etag;
    return fetch(proxyUrl(path), { headers: headers, credentials: 'same-origin', cache: 'no-store' })
      .then(function (res) {
        // Unchanged but for the time (answerAt in ui/waves.js).
        if (res.status === 304 && prev) {
          keep.last = answerAt(prev, res.headers.get('Wavegate-Now'));
          return keep.last.value;
        }
        return res.text().then(function (text) {
          var body = null;
          try {
            if (keep && res.ok && text) {
              keep.last = readAnswer(text, keep.last);
              keep.last.etag = res.headers.get('ETag');
              body = keep.last.value;
            }
            else body = text ? JSON.parse(text) : null;
          } catch (e) { /* an HTML or text error page */ }
          if (!res.ok) {
            var err = new Error(explain(res.status, body, text));
            // RBAC does not change by asking again: stop polling until the view is opened anew.
            err.final = res.status === 403 || (res.status === 401 && /Unauthorized extension request/.test(text || ''));
            throw err;
          }
          if (body === null) throw new Error('wavegate returned no JSON for ' + path);
          return body;
        });
      }, function (err) {
        throw new Error('Cannot reach Argo CD\u2019s proxy for wavegate: ' + (err && err.message ? err.message : err));
      });
  }

  // Polls `path` every POLL_MS while the component is mounted. The last good data stays on
  // screen when a later request fails; the error is shown next to it.
  function usePoll(path, application) {
    var appKey = JSON.stringify(proxyHeaders(application));
    var st = React.useState({ data: null, error: null, updated: null });
    var state = st[0], setState = st[1];
    React.useEffect(function () {
      var alive = true, timer = null, keep = { last: null };
      setState({ data: null, error: null, updated: null });
      if (!path) return undefined; // nothing to ask (hooks still run in the same order)
      function tick() {
        if (!alive) return;
        // A hidden browser tab does not poll.
        if (window.document && window.document.hidden) { timer = setTimeout(tick, POLL_MS); return; }
        fetchJson(path, application, keep).then(function (data) {
          if (alive) setState({ data: data, error: null, updated: new Date() });
        }, function (err) {
          if (alive) setState(function (prev) { return { data: prev.data, error: err.message, updated: prev.updated }; });
          if (err.final) alive = false;
        }).then(function () { if (alive) timer = setTimeout(tick, POLL_MS); });
      }
      tick();
      return function () { alive = false; clearTimeout(timer); };
    }, [path, appKey]);
    return state;
  }

  // ---- small presentational pieces -------------------------------------------------------------

  var S = {
    root: { padding: '1em', fontSize: '14px', lineHeight: 1.45, color: '#1f2328' },
    table: { width: '100%', borderCollapse: 'collapse', margin: '0.5em 0 1em', background: '#fff' },
    th: { textAlign: 'left', padding: '6px 8px', borderBottom: '1px solid #d0d7de', background: '#f6f8fa', color: '#4d565f', fontWeight: 600, fontSize: '12px', textTransform: 'uppercase', letterSpacing: '0.03em' },
    rowTh: { textAlign: 'left', padding: '6px 8px', borderBottom: '1px solid #d0d7de', fontFamily: 'monospace', fontWeight: 600, whiteSpace: 'nowrap', verticalAlign: 'top' },
    groupTh: { textAlign: 'left', padding: '6px 8px', borderBottom: '1px solid #d0d7de', background: '#eef1f4', fontWeight: 600 },
    td: { padding: '6px 8px', borderBottom: '1px solid #d0d7de', verticalAlign: 'top', wordBreak: 'break-word' },
    tdNoWrap: { padding: '6px 8px', borderBottom: '1px solid #d0d7de', verticalAlign: 'top', wordBreak: 'break-word', whiteSpace: 'nowrap' },
    mono: { fontFamily: 'monospace' },
    muted: { color: '#57606a', fontSize: '12px' },
    error: { color: '#8a1712', background: '#fde0de', border: '1px solid #cf222e', borderRadius: '4px', padding: '6px 10px', margin: '0.5em 0' },
    blocking: { color: '#8a1712', background: '#fde0de', borderRadius: '4px', padding: '6px 10px', margin: '0.5em 0' },
    clear: { color: '#0a5c24', background: '#d3f5dc', borderRadius: '4px', padding: '6px 10px', margin: '0.5em 0' }
  };

  function Badge(props) {
    var s = statusOf(props.status);
    var c = COLORS[s];
    return h('span', {
      'data-testid': props.testid || 'wavegate-status', 'data-status': s,
      style: { display: 'inline-block', padding: '0 8px', borderRadius: '999px', border: '1px solid ' + c[0], color: c[0], background: c[1], fontWeight: 600, fontSize: '12px', lineHeight: '20px', whiteSpace: 'nowrap' }
    }, h('span', { 'aria-hidden': 'true' }, c[2] + ' '), props.status || 'Unknown');
  }

  function ErrorLine(props) {
    return props.error ? h('div', { role: 'alert', 'data-testid': 'wavegate-error', style: S.error }, props.error) : null;
  }

  function Updated(props) {
    return h('div', { 'data-testid': 'wavegate-source', style: S.muted }, props.text,
      props.updated ? ' \u00b7 updated ' + props.updated.toLocaleTimeString() : '',
      ' \u00b7 refreshes every ' + POLL_MS / 1000 + ' s');
  }

  function Th(text) { return h('th', { scope: 'col', style: S.th }, text); }

  // ---- Gate tab (wavegate.dev/WaveGate) --------------------------------------------------------

  // The target a check points at, in the same words the HTTP API uses ("services cicd/forgejo").
  // A generic check names its kind in `resource.resource` (kubectl style, e.g. deployments.apps);
  // the CRD has no `kind` field there.
  function checkTarget(check, gateNs) {
    var kinds = {
      service: 'services', cnpgDatabase: 'databases.postgresql.cnpg.io',
      cnpgDatabaseRole: 'databaseroles.postgresql.cnpg.io',
      cockroachCluster: 'crdbclusters.crdb.cockroachlabs.com', application: 'applications.argoproj.io'
    };
    var where = function (c) { return (c.namespace || gateNs) + '/' + c.name; };
    for (var k in kinds) {
      if (check[k]) return kinds[k] + ' ' + where(check[k]);
    }
    if (check.resource && check.resource.resource) return check.resource.resource + ' ' + where(check.resource);
    return '';
  }

  // What Argo CD already holds: the WaveGate's own status, written by wavegate's controller.
  function gateFromResource(res) {
    var md = res.metadata || {}, spec = res.spec || {}, status = res.status;
    if (!status || !status.health) return null;
    var specChecks = {};
    (spec.checks || []).forEach(function (c) { specChecks[c.name] = c; });
    return {
      namespace: md.namespace, name: md.name, generation: md.generation,
      observedGeneration: status.observedGeneration, timeout: spec.timeout,
      health: status.health,
      checks: (status.checks || []).map(function (c) {
        return { name: c.name, target: specChecks[c.name] ? checkTarget(specChecks[c.name], md.namespace) : '', status: c.status, message: c.message, lastTransitionTime: c.lastTransitionTime };
      })
    };
  }

  function GateView(props) {
    var g = props.gate;
    var health = g.health || {};
    var lagging = g.generation != null && g.observedGeneration != null && g.generation !== g.observedGeneration;
    return h('div', { 'data-testid': 'wavegate-gate', 'data-status': statusOf(health.status) },
      h('h3', { style: { margin: '0 0 0.3em', fontSize: '16px' } }, 'Gate ', h('span', { style: S.mono }, g.namespace + '/' + g.name), ' ', h(Badge, { status: health.status, testid: 'wavegate-gate-status' })),
      h('p', { 'data-testid': 'wavegate-gate-message', style: { margin: '0.3em 0' } }, health.message || ''),
      lagging ? h('p', { style: S.blocking }, 'wavegate has judged generation ' + g.observedGeneration + ' but the WaveGate is at generation ' + g.generation + '; the verdict may be out of date.') : null,
      (g.checks || []).length === 0 ? h('p', { style: S.muted }, 'This gate lists no checks.') :
        h('table', { style: S.table },
          h('caption', { style: { textAlign: 'left', ...S.muted } }, 'Checks of gate ' + g.namespace + '/' + g.name),
          h('thead', null, h('tr', null, Th('Check'), Th('Target'), Th('Status'), Th('Message'), Th('Since'))),
          h('tbody', null, g.checks.map(function (c) {
            return h('tr', { key: c.name, 'data-testid': 'wavegate-check-' + c.name, 'data-status': statusOf(c.status) },
              h('th', { scope: 'row', style: S.rowTh }, c.name),
              h('td', { style: { ...S.td, ...S.mono } }, c.target || ''),
              h('td', { style: S.td }, h(Badge, { status: c.status, testid: 'wavegate-check-status' })),
              h('td', { style: S.td, 'data-testid': 'wavegate-check-message' }, c.message || ''),
              h('td', { style: { ...S.td, whiteSpace: 'nowrap' } }, c.lastTransitionTime ? h('time', { dateTime: c.lastTransitionTime, title: c.lastTransitionTime }, new Date(c.lastTransitionTime).toLocaleString()) : ''));
          }))));
  }

  function GateTab(props) {
    var res = props.resource || {};
    var md = res.metadata || {};
    var live = usePoll('api/v1/gates/' + encodeURIComponent(md.namespace) + '/' + encodeURIComponent(md.name), props.application);
    var stored = gateFromResource(res);
    var gate = live.data || stored;
    var source = live.data ? 'Live from wavegate' : stored ? 'From the WaveGate\u2019s status in the cluster (waiting for wavegate)' : '';
    return h('div', { style: S.root, 'data-testid': 'wavegate-gate-tab' },
      h(ErrorLine, { error: live.error }),
      gate ? h(GateView, { gate: gate }) :
        h('p', null, live.error ? 'No verdict to show: this WaveGate has no status yet and wavegate could not be asked.' : 'Loading the verdict from wavegate\u2026'),
      gate ? h(Updated, { text: source, updated: live.data ? live.updated : null }) : null);
  }

  // ---- Readiness tab (the kinds wavegate checks: Service, CNPG Database and DatabaseRole, CrdbCluster)

  // wavegate's own verdict on the object, and every check of this application's gates that
  // points at it, so the tab says both "what wavegate sees" and "which gate waits for it".
  var CHECKED_KINDS = [
    { group: '', kind: 'Service', resource: 'services' },
    { group: 'postgresql.cnpg.io', kind: 'Database', resource: 'databases.postgresql.cnpg.io' },
    { group: 'postgresql.cnpg.io', kind: 'DatabaseRole', resource: 'databaseroles.postgresql.cnpg.io' },
    { group: 'crdb.cockroachlabs.com', kind: 'CrdbCluster', resource: 'crdbclusters.crdb.cockroachlabs.com' }
  ];

  function ReadinessTab(props) {
    var res = props.resource || {};
    var md = res.metadata || {};
    var group = String(res.apiVersion || '').indexOf('/') > 0 ? res.apiVersion.split('/')[0] : '';
    var kind = CHECKED_KINDS.filter(function (k) { return k.kind === res.kind && k.group === group; })[0];
    var ns = md.namespace || '';
    var path = kind ? 'api/v1/health/' + kind.resource + '/' + encodeURIComponent(ns) + '/' + encodeURIComponent(md.name) : null;
    var verdict = usePoll(path, props.application);
    var gates = usePoll('api/v1/gates', props.application);
    if (!kind || !md.name) {
      return h('div', { style: S.root, 'data-testid': 'wavegate-readiness-tab' }, h('p', null, 'This object does not exist in the cluster yet.'));
    }
    var target = kind.resource + ' ' + ns + '/' + md.name;
    var rows = [];
    ((gates.data && gates.data.gates) || []).forEach(function (g) {
      (g.checks || []).forEach(function (c) {
        if (c.target === target) rows.push({ gate: g.namespace + '/' + g.name, wave: g.syncWave, check: c });
      });
    });
    var v = verdict.data;
    return h('div', { style: S.root, 'data-testid': 'wavegate-readiness-tab', 'data-status': v ? statusOf(v.status) : '' },
      h(ErrorLine, { error: verdict.error || gates.error }),
      v ? h('div', null,
        h('h3', { style: { margin: '0 0 0.3em', fontSize: '16px' } }, 'wavegate on ', h('span', { style: S.mono }, target), ' ', h(Badge, { status: v.status, testid: 'wavegate-verdict-status' })),
        h('p', { 'data-testid': 'wavegate-verdict-message', style: { margin: '0.3em 0' } }, v.message || '')) :
        h('p', null, verdict.error ? 'No verdict to show.' : 'Loading the verdict from wavegate\u2026'),
      gates.data ? (rows.length === 0
        ? h('p', { 'data-testid': 'wavegate-no-gate-checks', style: S.muted }, 'No WaveGate of this application checks this object.')
        : h('table', { style: S.table, 'data-testid': 'wavegate-gate-checks' },
          h('caption', { style: { textAlign: 'left', ...S.muted } }, 'WaveGate checks of this application that wait for this object'),
          h('thead', null, h('tr', null, Th('Gate'), Th('Wave'), Th('Check'), Th('Status'), Th('Message'))),
          h('tbody', null, rows.map(function (r) {
            return h('tr', { key: r.gate + '/' + r.check.name, 'data-testid': 'wavegate-check-' + r.check.name, 'data-status': statusOf(r.check.status) },
              h('th', { scope: 'row', style: S.rowTh }, r.gate),
              h('td', { style: S.td }, r.wave == null ? '' : String(r.wave)),
              h('td', { style: { ...S.td, ...S.mono } }, r.check.name),
              h('td', { style: S.td }, h(Badge, { status: r.check.status, testid: 'wavegate-check-status' })),
              h('td', { style: S.td, 'data-testid': 'wavegate-check-message' }, r.check.message || ''));
          })))) : null,
      v ? h(Updated, { text: 'From wavegate', updated: verdict.updated }) : null);
  }

  // ---- Waves (argoproj.io/Application tab, status panel, flyout) ------------------------------

  function BlockingLine(props) {
    var line = blockingLine(props.waves.blockingWave, props.waves.message);
    return h('p', { 'data-testid': 'wavegate-blocking-wave', 'data-wave': line.wave, style: line.clear ? S.clear : S.blocking },
      h('strong', null, line.title), line.detail);
  }

  // ---- ui/waves.js: BEGIN (a copy: edit ui/waves.js, then see tests/offline/ui.rs) ----
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
  // ---- ui/waves.js: END ----

  function svgNode(shape, key) {
    var props = { key: key };
    for (var k in shape.attrs) props[k] = shape.attrs[k];
    return h(shape.tag, props, shape.title ? h('title', null, shape.title) : null, shape.text || null,
      (shape.children || []).map(svgNode));
  }

  // The last sync as a picture (timelineLayout), with Argo CD's own words about it beneath.
  // Its elements are made anew only when the layout changed: an idle Application's answers differ
  // in the server's clock alone, which moves nothing once its sync has finished.
  function Timeline(props) {
    var t = timelineOf(props.waves);
    var l = t ? timelineLayout(t) : null;
    var id = 'wavegate-tl-' + props.waves.namespace + '-' + props.waves.name;
    var drawn = JSON.stringify([id, l, t && t.sync]);
    return React.useMemo(function () { return l ? timelineFigure(l, t.sync, id) : null; }, [drawn]);
  }

  // Drawn again only for another answer (a poll), not when a wave is opened or closed.
  var TimelineKept = React.memo(Timeline);

  function timelineFigure(l, sync, id) {
    return h('figure', { 'data-testid': 'wavegate-timeline', style: { margin: '0.5em 0 1em', overflowX: 'auto' } },
      h('svg', { viewBox: '0 0 ' + l.width + ' ' + l.height, width: l.width, height: l.height, role: 'img',
        'aria-labelledby': id + '-title ' + id + '-desc', 'data-testid': 'timeline-svg', style: { display: 'block' } },
        h('title', { id: id + '-title' }, 'Timeline of the last sync'),
        h('desc', { id: id + '-desc' }, l.summary),
        l.shapes.map(svgNode)),
      h('figcaption', { 'data-testid': 'timeline-caption', style: S.muted }, timelineCaption(sync)));
  }

  // The waves table (wavesTable in ui/waves.js) as React elements.
  function WavesView(props) {
    var w = props.waves;
    var st = React.useState({}), opened = st[0], setOpened = st[1];
    // The table is drawn from these alone; a poll that kept them (readAnswer) redraws none of its
    // rows, which React then has nothing to compare.
    var table = React.useMemo(function () {
      var t = wavesTable(w, resourceCount(w) > ROWS_AT_ONCE, function (wave) { return wave in opened ? opened[wave] : undefined; });
      return WavesTable(t, setOpened, w.waves || []);
    }, [w.waves, w.lint, w.blockingWave, opened]);
    return h('div', { 'data-testid': 'wavegate-waves', 'data-status': statusOf((w.health || {}).status) },
      h('h3', { style: { margin: '0 0 0.3em', fontSize: '16px' } }, 'Waves of ', h('span', { style: S.mono }, w.namespace + '/' + w.name), ' ', h(Badge, { status: (w.health || {}).status, testid: 'wavegate-app-status' })),
      h(BlockingLine, { waves: w }),
      h(TimelineKept, { waves: w }),
      table);
  }

  // `source`: the answer's waves, whose resources each wave's rows are made from.
  function WavesTable(t, setOpened, source) {
    function toggle(wave) { setOpened(function (o) { var n = Object.assign({}, o); n[wave.wave] = !wave.open; return n; }); }
    return t.empty ? h('p', { style: S.muted }, t.empty) :
      h('table', { style: S.table },
        h('caption', { style: { textAlign: 'left', ...S.muted } }, 'Resources by sync wave'),
        h('thead', null, h('tr', null, Th('Resource'), Th('Status'), Th('Message'), Th('Judged by'))),
        t.waves.map(function (wave, i) {
          return h('tbody', { key: 'w' + wave.wave, 'data-testid': 'wavegate-wave-' + wave.wave, 'data-status': statusOf(wave.status), 'data-open': String(wave.open) },
            h('tr', null, h('th', { scope: 'rowgroup', colSpan: 4, style: wave.blocking ? { ...S.groupTh, ...S.blocking, borderRadius: 0, margin: 0 } : S.groupTh },
              'Wave ' + wave.wave + ' ', h(Badge, { status: wave.status, testid: 'wavegate-wave-status' }), wave.blocking ? ' \u2014 blocking' : '',
              h('span', { style: { ...S.muted, fontWeight: 'normal' } }, wave.count),
              wave.toggle ? h('button', { type: 'button', 'aria-expanded': String(wave.open), 'data-testid': 'wavegate-wave-toggle', onClick: function () { toggle(wave); }, style: { marginLeft: '0.6em', fontSize: '12px' } }, wave.toggle) : null)),
            wave.resources.length ? h(ResourceRowsKept, { key: 'rows', rows: wave.resources, source: (source[i] || {}).resources }) : null,
            wave.findings.map(FindingRow));
        }),
        t.findings.length || t.skipped || t.note ? h('tbody', { key: 'lint', 'data-testid': 'wavegate-lint-other' },
          t.findings.map(FindingRow),
          t.skipped ? h('tr', { key: 'skipped' }, h('td', { colSpan: 4, style: { ...S.td, ...S.muted }, 'data-testid': 'wavegate-lint-skipped' }, t.skipped)) : null,
          t.note ? h('tr', null, h('td', { colSpan: 4, style: { ...S.td, ...S.muted }, 'data-testid': 'wavegate-lint-note' }, t.note)) : null) : null);
  }

  // A wave's rows, drawn a few at a time: the first FIRST_ROWS at once, then MORE_ROWS a frame.
  // Opening a wave of the 2,000-resource Application drew its 100 rows in one task of 81 ms
  // (React's render and commit, the table's layout and a garbage collection landing in it), over
  // the 50 ms a click may wait (issue 32); in slices each task stays small and the first rows
  // show at the next frame. Mounted when the wave opens (a closed wave has no rows), so opening
  // it again starts from the first slice; a poll that changes the rows keeps what was drawn.
  var FIRST_ROWS = 30, MORE_ROWS = 30;
  function ResourceRows(props) {
    var rows = props.rows;
    var st = React.useState(FIRST_ROWS), drawn = st[0], setDrawn = st[1];
    React.useEffect(function () {
      if (drawn >= rows.length) return undefined;
      // A frame later, so the browser paints what is drawn before the next slice; React renders
      // an update from outside an event in a task of its own (React 18 and 19 alike).
      var frame = window.requestAnimationFrame || function (f) { return window.setTimeout(f, 16); };
      var cancel = window.cancelAnimationFrame || window.clearTimeout;
      var id = frame(function () { setDrawn(function (d) { return d + MORE_ROWS; }); });
      return function () { cancel(id); };
    }, [drawn, rows.length]);
    return rows.slice(0, drawn).map(ResourceTr);
  }

  // A click that opens one wave leaves the others' rows alone: they are made from the same
  // resources of the same answer (resourceRow in ui/waves.js is a function of the resource alone).
  var ResourceRowsKept = React.memo(ResourceRows, function (was, now) {
    return was.source !== undefined && was.source === now.source && was.rows.length === now.rows.length;
  });

  function ResourceTr(r) {
    return h('tr', { key: r.key, 'data-testid': 'wavegate-resource-' + r.id },
      h('th', { scope: 'row', style: S.rowTh }, r.name),
      h('td', { style: S.td }, h(Badge, { status: r.status, testid: 'wavegate-resource-status' })),
      h('td', { style: S.td }, r.message,
        r.argo ? h('div', { style: S.muted, 'data-testid': 'wavegate-argo-status' }, r.argo) : null),
      h('td', { style: S.tdNoWrap }, r.judgedBy));
  }

  function FindingRow(f, i) {
    return h('tr', { key: 'f' + i + f.rule + f.message, 'data-testid': 'wavegate-finding-' + f.rule, 'data-level': f.level },
      h('td', { colSpan: 4, style: { ...S.td, background: '#fff8c5' } },
        h('strong', { style: { color: f.level === 'error' ? '#8a1712' : '#6b3d00' } }, 'lint ' + f.level + ' [' + f.rule + ']'), ' ',
        h('span', { 'data-testid': 'wavegate-finding-message' }, f.message),
        h('details', null, h('summary', null, 'why, and the fix'),
          h('p', { style: { margin: '0.3em 0' } }, f.why),
          h('pre', { style: { whiteSpace: 'pre-wrap', margin: '0.3em 0', fontFamily: 'monospace' } }, f.fix))));
  }

  function WavesPanel(props) {
    var live = props.live;
    return h('div', { style: S.root, 'data-testid': props.testid },
      h(ErrorLine, { error: live.error }),
      live.data ? h(WavesView, { waves: live.data }) : h('p', null, live.error ? 'No wave data.' : 'Loading waves from wavegate\u2026'),
      live.data ? h(Updated, { text: 'From wavegate', updated: live.updated }) : null);
  }

  // Resource tab on an Application node. In app-of-apps that node may be a child Application:
  // show the waves of the one clicked, while the proxy headers keep naming the Application whose
  // page this is (that is what Argo CD authorises).
  function ApplicationWavesTab(props) {
    var target = props.resource && props.resource.kind === 'Application' && props.resource.metadata ? props.resource : props.application;
    var md = (target && target.metadata) || {};
    var live = usePoll('api/v1/applications/' + encodeURIComponent(md.namespace || 'argocd') + '/' + encodeURIComponent(md.name) + '/waves', props.application);
    return h(WavesPanel, { live: live, testid: 'wavegate-waves-tab' });
  }

  // A view of its own beside Argo CD's Tree / Network / List views: the waves and the timeline.
  function WavesAppView(props) {
    var live = usePoll('api/v1/waves', props.application);
    return h(WavesPanel, { live: live, testid: 'wavegate-waves-view' });
  }

  function WavesFlyout(props) {
    var live = usePoll('api/v1/waves', props.application);
    return h(WavesPanel, { live: live, testid: 'wavegate-waves-flyout' });
  }

  // Status panel item; Argo CD renders each extension as a direct child of the panel row, so it
  // brings its own application-status-panel__item wrapper.
  function WavesStatusPanel(props) {
    var live = usePoll('api/v1/waves', props.application);
    var w = live.data;
    var label = h('div', { style: { lineHeight: '19.5px', marginBottom: '0.3em' } },
      h('label', { style: { fontSize: '12px', fontWeight: 600, color: '#495763' } }, 'WAVES'));
    var value, detail = null;
    if (w) {
      value = w.blockingWave == null
        ? h('span', null, h(Badge, { status: 'Healthy', testid: 'wavegate-panel-status' }), ' all waves truly healthy')
        : h('span', null, h(Badge, { status: (w.health || {}).status || 'Progressing', testid: 'wavegate-panel-status' }), ' wave ' + w.blockingWave + ' is blocking');
      detail = w.blockingWave == null ? null : w.message;
    } else {
      value = live.error ? h('span', null, h(Badge, { status: 'Unknown', testid: 'wavegate-panel-status' }), ' unavailable') : 'Loading\u2026';
      detail = live.error;
    }
    return h('div', { className: 'application-status-panel__item', 'data-testid': 'wavegate-status-panel', 'data-wave': w ? String(w.blockingWave == null ? 'none' : w.blockingWave) : '', style: { maxWidth: '360px' } },
      label,
      h('div', { className: 'application-status-panel__item-value', 'data-testid': 'wavegate-panel-value' }, value),
      detail ? h('div', { className: 'application-status-panel__item-name', 'data-testid': 'wavegate-panel-message', role: live.error && !w ? 'alert' : null, title: detail, style: { overflow: 'hidden', textOverflow: 'ellipsis', display: '-webkit-box', WebkitLineClamp: 2, WebkitBoxOrient: 'vertical' } }, detail) : null,
      props.openFlyout ? h('button', { type: 'button', className: 'argo-button argo-button--base-o', 'data-testid': 'wavegate-panel-details', onClick: function () { props.openFlyout(); }, style: { marginTop: '0.3em', fontSize: '12px' } }, 'Wave details') : null);
  }

  var api = window.extensionsAPI;
  if (!api) return; // not inside Argo CD's UI
  api.registerResourceExtension(GateTab, 'wavegate.dev', 'WaveGate', 'Gate', { icon: 'fa-door-open' });
  api.registerResourceExtension(ApplicationWavesTab, 'argoproj.io', 'Application', 'Waves', { icon: 'fa-layer-group' });
  CHECKED_KINDS.forEach(function (k) {
    api.registerResourceExtension(ReadinessTab, k.group, k.kind, 'Readiness', { icon: 'fa-traffic-light' });
  });
  if (typeof api.registerStatusPanelExtension === 'function') {
    api.registerStatusPanelExtension(WavesStatusPanel, 'Waves', 'wavegate_waves', WavesFlyout);
  }
  if (typeof api.registerAppViewExtension === 'function') {
    api.registerAppViewExtension(WavesAppView, 'Waves', 'fa-layer-group');
  }
})(window);
