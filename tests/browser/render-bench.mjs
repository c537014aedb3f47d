// Chromium's own time to render a big application: the dashboard (src/api/dashboard.html) and the
// UI extension's Waves tab (argocd/extension/extension-wavegate.js in harness/), each against a real
// `wavegate serve` that knows the Applications benches/bigapps.rs created (`--keep`).
//
//   WAVEGATE_URL=http://127.0.0.1:PORT/ BIGAPPS_NS=wgbench-bigapps-… node tests/browser/render-bench.mjs
//
// Not a test: it prints one `BENCH render.<page> key=value …` line per page (what scripts/bench.sh
// reads) and a table on stderr. Per update cycle (one dashboard refresh, one poll of the tab) it
// takes the main thread's busy time from Chrome's own counter (CDP `Performance.getMetrics`
// TaskDuration: script, JSON parsing, style, layout), sampled when the cycle's first request
// leaves, so a cycle's time is all the page did for it; and the longest task the page ran
// (a `longtask` PerformanceObserver): the time a click or a key waits at worst.
//
// Knobs: BIGAPPS_APP (big) — the extension's Application; RENDER_CYCLES (8) — warm cycles
// measured after the first; RENDER_PROFILE (0; 1: where the warm cycles' time went, on stderr:
// the renderer main thread's trace events by self time, and V8's sampled JS functions by self
// time — tracing and sampling cost time themselves, so their cycles are not the ones reported);
// RENDER_PAGES (dashboard,extension) — which pages; RENDER_OPEN_CLICKS (3) — closed waves opened
// after the warm cycles, one at a time (reported apart from the cycles).
import { launch, wavegateUrl, guardNetwork, WAVEGATE_TOKEN } from './lib/common.mjs';
import { startHarness } from './lib/harness-server.mjs';

const BASE = wavegateUrl();
const NS = process.env.BIGAPPS_NS;
if (!NS) throw new Error('BIGAPPS_NS is not set: the namespace benches/bigapps.rs --keep left its Applications in');
const APP = { namespace: NS, name: process.env.BIGAPPS_APP || 'big', project: 'default' };
const CYCLES = Number(process.env.RENDER_CYCLES || 8);
const PROFILE = process.env.RENDER_PROFILE === '1';
const PAGES = (process.env.RENDER_PAGES || 'dashboard,extension').split(',');
const OPEN_CLICKS = Number(process.env.RENDER_OPEN_CLICKS || 3);

const LONG_TASKS = `
  window.__longTasks = [];
  new PerformanceObserver(list => list.getEntries().forEach(e => window.__longTasks.push({ d: e.duration, t: e.startTime })))
    .observe({ type: 'longtask', buffered: true });
`;

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length, Math.max(1, Math.ceil(p * s.length))) - 1];
};
const fmt = v => (v == null ? '' : v.toFixed(1));

// Self time per trace event name on the renderer's main thread: each complete event's duration
// less its children's (events nest on a thread), summed by name.
function traceBreakdown(buf) {
  const events = JSON.parse(buf.toString()).traceEvents || [];
  const main = new Set(events.filter(e => e.ph === 'M' && e.name === 'thread_name' && e.args && e.args.name === 'CrRendererMain')
    .map(e => e.pid + ':' + e.tid));
  const byThread = {};
  for (const e of events) {
    if (e.ph !== 'X' || !main.has(e.pid + ':' + e.tid) || !(e.dur >= 0)) continue;
    (byThread[e.pid + ':' + e.tid] ||= []).push(e);
  }
  const self = {};
  for (const list of Object.values(byThread)) {
    list.sort((a, b) => a.ts - b.ts || b.dur - a.dur);
    const stack = [];
    for (const e of list) {
      while (stack.length && stack[stack.length - 1].ts + stack[stack.length - 1].dur <= e.ts) stack.pop();
      if (stack.length) stack[stack.length - 1].kids += e.dur;
      stack.push({ ts: e.ts, dur: e.dur, kids: 0, e });
      e.__frame = stack[stack.length - 1];
    }
    for (const e of list) self[e.name] = (self[e.name] || 0) + (e.dur - e.__frame.kids) / 1000;
  }
  return Object.entries(self).sort((a, b) => b[1] - a[1]);
}

// Self time per JS function of a CDP Profiler profile.
function profileBreakdown(profile) {
  const byId = new Map(profile.nodes.map(n => [n.id, n]));
  const self = {};
  profile.samples.forEach((id, i) => {
    const f = byId.get(id).callFrame;
    const key = `${f.functionName || '(anonymous)'} ${f.url ? f.url.replace(/^.*\//, '') + ':' + (f.lineNumber + 1) : ''}`.trim();
    self[key] = (self[key] || 0) + (profile.timeDeltas[i] || 0) / 1000;
  });
  return Object.entries(self).sort((a, b) => b[1] - a[1]);
}

// Clicks the first closed wave's toggle: the time until the next frame is painted (with the
// first of its rows), and until every row its heading counts is drawn (null: no closed wave).
async function openWave(page) {
  return page.evaluate(async () => {
    const b = [...document.querySelectorAll('button[aria-expanded="false"]')]
      .find(x => x.hasAttribute('data-wave-toggle') || x.getAttribute('data-testid') === 'wavegate-wave-toggle');
    if (!b) return null;
    // The dashboard draws the card anew: its wave is found again by the toggle's key.
    const key = b.getAttribute('data-wave-toggle');
    const body = () => (key ? document.querySelector(`button[data-wave-toggle="${CSS.escape(key)}"]`) : b).closest('tbody');
    const count = Number((/(\d+) resources?/.exec(body().textContent) || [])[1] || 0);
    const rows = () => body().querySelectorAll('tr[data-testid^="resource-"], tr[data-testid^="wavegate-resource-"]').length;
    const frame = () => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
    const t0 = performance.now();
    b.click();
    await frame();
    const first = performance.now() - t0;
    while (rows() < count && performance.now() - t0 < 10000) await frame();
    return { frame: first, all: performance.now() - t0 };
  });
}

// Opens `url`, treating each request matching `cycleStart` as the start of an update cycle;
// waits for `rowsSelector` to show rows, then for CYCLES more cycles.
async function measure(browser, name, url, cycleStart, rowsSelector) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const foreign = await guardNetwork(context, []);
  if (WAVEGATE_TOKEN) await context.addInitScript(t => sessionStorage.setItem('wavegate.token', t), WAVEGATE_TOKEN);
  await context.addInitScript(LONG_TASKS);
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', e => errors.push(e.message));
  const cdp = await context.newCDPSession(page);
  await cdp.send('Performance.enable');
  const busy = async () => (await cdp.send('Performance.getMetrics')).metrics.find(m => m.name === 'TaskDuration').value * 1e3;
  const samples = [];
  let pending = Promise.resolve();
  page.on('request', r => {
    if (cycleStart(r.url())) pending = pending.then(async () => samples.push(await busy()));
  });
  const opened = Date.now();
  await page.goto(url);
  await page.waitForFunction(sel => document.querySelectorAll(sel).length > 0, rowsSelector, { timeout: 120000 });
  const shown = Date.now() - opened;
  // Long tasks are told apart by when they started: the observer reports a task some time after
  // it ended, so counting the entries seen so far would give the page's first drawing to the
  // warm cycles.
  const now = () => page.evaluate(() => performance.now());
  let warmFrom = await now();
  // The first cycle built the page; the next CYCLES + 1 starts close CYCLES warm cycles.
  const deadline = Date.now() + 600000;
  const until = async n => {
    while (samples.length < n && Date.now() < deadline) await new Promise(r => setTimeout(r, 200));
    await pending;
  };
  if (PROFILE) {
    await until(2);
    const from = samples.length;
    await browser.startTracing(page, { categories: ['devtools.timeline', 'disabled-by-default-devtools.timeline', 'v8', 'blink'] });
    await cdp.send('Profiler.enable');
    await cdp.send('Profiler.setSamplingInterval', { interval: 200 });
    await cdp.send('Profiler.start');
    await until(from + CYCLES);
    const { profile } = await cdp.send('Profiler.stop');
    const trace = await browser.stopTracing();
    const n = samples.length - from;
    const show = (title, rows) => {
      console.error(`${name}: ${title}, ms per cycle over ${n} cycles`);
      for (const [k, v] of rows.slice(0, 25)) console.error(`  ${(v / n).toFixed(2).padStart(8)}  ${k}`);
    };
    show('main-thread trace events by self time', traceBreakdown(trace));
    show('JS functions by self time (sampled)', profileBreakdown(profile));
    // Measured afresh from here: the first sample closes a partial cycle, dropped as the first.
    samples.length = 0;
    pending = pending.then(async () => samples.push(await busy()));
    await pending;
    warmFrom = await now();
  }
  await until(CYCLES + 2);
  const rows = await page.evaluate(sel => document.querySelectorAll(sel).length, rowsSelector);
  const cycles = samples.slice(1).map((s, i) => s - samples[i]).slice(0, CYCLES);
  const first = samples.length > 1 ? samples[1] - samples[0] : null;
  const warm = cycles.slice(1);
  const clicksFrom = await now();
  await new Promise(r => setTimeout(r, 300));
  const longTasks = await page.evaluate(() => window.__longTasks);
  const warmLong = longTasks.filter(e => e.t >= warmFrom && e.t < clicksFrom).map(e => e.d);
  // Opening a closed wave, apart from the polls: the click until the next frame is painted with
  // its first rows, until every row of the wave is drawn, the main thread's busy time from the
  // click to 300 ms later (an update may fall in it), and the longest task from the click on
  // (what the click itself cost the page). OPEN_CLICKS waves, one after the other.
  if (PROFILE) {
    await browser.startTracing(page, { categories: ['devtools.timeline', 'disabled-by-default-devtools.timeline', 'v8', 'blink'] });
    await cdp.send('Profiler.enable');
    await cdp.send('Profiler.setSamplingInterval', { interval: 100 });
    await cdp.send('Profiler.start');
    await openWave(page);
    await new Promise(r => setTimeout(r, 300));
    const { profile } = await cdp.send('Profiler.stop');
    const trace = await browser.stopTracing();
    const show = (title, rows) => {
      console.error(`${name}: ${title}, ms for the click that opens a wave (profiled)`);
      for (const [k, v] of rows.slice(0, 25)) console.error(`  ${v.toFixed(2).padStart(8)}  ${k}`);
    };
    show('main-thread trace events by self time', traceBreakdown(trace));
    show('JS functions by self time (sampled)', profileBreakdown(profile));
  }
  const clicks = [];
  for (let i = 0; i < OPEN_CLICKS; i++) {
    const from = await now();
    const busy0 = await busy();
    const opened = await openWave(page);
    if (!opened) break;
    await new Promise(r => setTimeout(r, 300)); // the longtask observer reports after the task
    const busy1 = await busy();
    const long = (await page.evaluate(() => window.__longTasks)).filter(e => e.t >= from).map(e => e.d);
    clicks.push({ ...opened, busy: busy1 - busy0, long: long.length ? Math.max(...long) : 0 });
  }
  await context.close();
  if (errors.length) throw new Error(`${name}: page errors: ${errors.join('; ')}`);
  if (foreign.length) throw new Error(`${name}: requests left the machine: ${foreign.join(', ')}`);
  if (warm.length === 0) throw new Error(`${name}: no update cycle within 10 minutes`);
  return {
    name, rows, shown_ms: shown, first_cycle_ms: first, n: warm.length,
    p50_ms: pct(warm, 0.5), p95_ms: pct(warm, 0.95), max_ms: Math.max(...warm),
    longest_task_ms: warmLong.length ? Math.max(...warmLong) : 0,
    open_waves: clicks.length,
    open_wave_ms: clicks.length ? pct(clicks.map(c => c.frame), 0.5) : null,
    open_wave_all_rows_ms: clicks.length ? pct(clicks.map(c => c.all), 0.5) : null,
    open_wave_busy_ms: clicks.length ? Math.max(...clicks.map(c => c.busy)) : null,
    open_wave_longest_task_ms: clicks.length ? Math.max(...clicks.map(c => c.long)) : null,
    first_longest_task_ms: Math.max(0, ...longTasks.filter(e => e.t < warmFrom).map(e => e.d)),
  };
}

const browser = await launch();
const results = [];
try {
  // The dashboard: every Application's card (the bench's 200 children, big, half, tenth, the
  // parents), one refresh every 2 s after the previous one finished.
  if (PAGES.includes('dashboard')) results.push(await measure(browser, 'dashboard', new URL('./', BASE).href,
    u => /\/api\/v1\/applications$/.test(new URL(u).pathname), '#apps tr[data-testid^="resource-"]'));
  // The extension's Waves tab on the big Application, polled every 5 s.
  const harness = PAGES.includes('extension') && await startHarness({
    backend: BASE, token: WAVEGATE_TOKEN, app: APP,
    fixtures: {
      'application.json': {
        apiVersion: 'argoproj.io/v1alpha1', kind: 'Application',
        metadata: { namespace: APP.namespace, name: APP.name },
        spec: { project: APP.project }, status: { health: { status: 'Healthy' } },
      },
    },
  });
  if (harness) try {
    const tab = `/applications/${APP.namespace}/${APP.name}/waves`;
    results.push(await measure(browser, 'extension', harness.url,
      u => new URL(u).pathname.endsWith(tab), '[data-testid="wavegate-waves-tab"] tr[data-testid^="wavegate-resource-"]'));
  } finally {
    await harness.close();
  }
} finally {
  await browser.close();
}

for (const r of results) {
  console.log(`BENCH render.${r.name} ` + Object.entries(r).filter(([k]) => k !== 'name')
    .map(([k, v]) => `${k}=${typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(1) : v}`).join(' '));
}
console.error('| page | rows drawn | shown after | first cycle | warm cycle p50 / p95 / max | longest task of the warm cycles | open a wave: first frame / all rows (p50) | its busy time / longest task (max) |');
console.error('| --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of results) {
  console.error(`| ${r.name} | ${r.rows} | ${r.shown_ms} ms | ${fmt(r.first_cycle_ms)} ms | ${fmt(r.p50_ms)} / ${fmt(r.p95_ms)} / ${fmt(r.max_ms)} ms (n=${r.n}) | ${fmt(r.longest_task_ms)} ms | ${fmt(r.open_wave_ms)} / ${fmt(r.open_wave_all_rows_ms)} ms | ${fmt(r.open_wave_busy_ms)} / ${fmt(r.open_wave_longest_task_ms)} ms (n=${r.open_waves}) |`);
}
