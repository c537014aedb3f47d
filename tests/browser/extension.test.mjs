// argocd/extension/extension-wavegate.js in headless chromium, inside a stand-in for Argo CD's UI
// (harness/), with /extensions/wavegate/* proxied to a real `wavegate serve` at WAVEGATE_URL the
// way argocd-server does it (lib/harness-server.mjs).
//
// The harness fixtures name the seed scenario's objects: Application argocd/platform (project
// default) and WaveGate cicd/forgejo-ready. What the tables must show is read from wavegate's API
// in the same moment, so the test holds whatever state the scenario is in.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { wavegateUrl, WAVEGATE_TOKEN, launch, screenshot, guardNetwork, apiGet, eventually } from './lib/common.mjs';
import { startHarness } from './lib/harness-server.mjs';

const BASE = wavegateUrl(); // throws (fails the file) when WAVEGATE_URL is unset
const APP = { namespace: 'argocd', name: 'platform', project: 'default' };
const PROXY_HEADERS = { 'Argocd-Application-Name': `${APP.namespace}:${APP.name}`, 'Argocd-Project-Name': APP.project };

const GATE_TAB = '[data-testid="wavegate-gate-tab"]';
const WAVES_TAB = '[data-testid="wavegate-waves-tab"]';
const PANEL = '[data-testid="wavegate-status-panel"]';

async function json(rel, headers) {
  const r = await apiGet(BASE, rel, headers);
  assert.equal(r.status, 200, `wavegate GET ${rel} answered ${r.status}: ${JSON.stringify(r.body)}`);
  return r.body;
}

// What a rendered waves table says, in the API's terms.
async function readWaves(page, root) {
  return page.evaluate(root => {
    const el = document.querySelector(root + ' [data-testid="wavegate-waves"]');
    if (!el) return null;
    const blocking = el.querySelector('[data-testid="wavegate-blocking-wave"]').getAttribute('data-wave');
    const waves = [...el.querySelectorAll('tbody[data-testid^="wavegate-wave-"]')].map(tb => ({
      wave: Number(tb.getAttribute('data-testid').replace('wavegate-wave-', '')),
      status: tb.getAttribute('data-status'),
      resources: [...tb.querySelectorAll('tr[data-testid^="wavegate-resource-"]')].map(tr => ({
        name: tr.querySelector('th').textContent, status: tr.querySelector('[data-status]').getAttribute('data-status'),
      })),
    }));
    return { blocking, waves };
  }, root);
}
function expectedWaves(w) {
  return {
    blocking: w.blockingWave == null ? 'none' : String(w.blockingWave),
    waves: w.waves.map(x => ({ wave: x.wave, status: x.status, count: x.resources.length })),
  };
}
const sameWaves = (shown, w) => shown && JSON.stringify({
  blocking: shown.blocking, waves: shown.waves.map(x => ({ wave: x.wave, status: x.status, count: x.resources.length })),
}) === JSON.stringify(expectedWaves(w));

describe('Argo CD UI extension', () => {
  let browser, harness;
  const foreign = [];
  const pageErrors = [];

  async function open() {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await guardNetwork(context, foreign);
    const page = await context.newPage();
    page.on('pageerror', e => pageErrors.push(e.message));
    await page.goto(harness.url);
    await page.waitForFunction(() => window.__harnessReady === true);
    return { context, page };
  }

  before(async () => {
    await eventually(async () => (await apiGet(BASE, 'readyz')).status === 200,
      { ms: 30000, every: 500, what: `wavegate at ${BASE} to answer /readyz with 200` });
    harness = await startHarness({ backend: BASE, token: WAVEGATE_TOKEN, app: APP });
    browser = await launch();
  });

  after(async () => {
    await browser?.close();
    await harness?.close();
  });

  test('registers a Gate tab, Waves tab, Readiness tabs, a Waves app view and a Waves status-panel item with flyout', async () => {
    const { context, page } = await open();
    const regs = await page.evaluate(() => ({
      tabs: window.__registrations.resourceTabs.map(t => [t.group, t.kind, t.title, typeof t.component]),
      panels: window.__registrations.statusPanels.map(p => [p.title, p.id, typeof p.component, typeof p.flyout]),
      views: window.__registrations.appViews.map(v => [v.title, v.icon, typeof v.component]),
    }));
    assert.deepEqual(regs.tabs, [
      ['wavegate.dev', 'WaveGate', 'Gate', 'function'],
      ['argoproj.io', 'Application', 'Waves', 'function'],
      ['', 'Service', 'Readiness', 'function'],
      ['postgresql.cnpg.io', 'Database', 'Readiness', 'function'],
      ['postgresql.cnpg.io', 'DatabaseRole', 'Readiness', 'function'],
      ['crdb.cockroachlabs.com', 'CrdbCluster', 'Readiness', 'function'],
    ]);
    assert.deepEqual(regs.panels, [['Waves', 'wavegate_waves', 'function', 'function']]);
    assert.deepEqual(regs.views, [['Waves', 'fa-layer-group', 'function']]);
    await context.close();
  });

  test('shows wavegate\'s checks, waves and blocking wave, fetched through the proxy', async () => {
    const { context, page } = await open();
    const gatePath = `api/v1/gates/cicd/forgejo-ready`;

    // Gate tab: every check of the live gate, with its status and message.
    await eventually(async () => {
      const gate = await json(gatePath);
      const rows = await page.evaluate(root => [...document.querySelectorAll(root + ' tr[data-testid^="wavegate-check-"]')].map(tr => ({
        name: tr.querySelector('th').textContent,
        status: tr.getAttribute('data-status'),
        message: tr.querySelector('[data-testid="wavegate-check-message"]').textContent,
      })), GATE_TAB);
      const source = await page.locator(`${GATE_TAB} [data-testid="wavegate-source"]`).textContent({ timeout: 1000 }).catch(() => '');
      return /Live from wavegate/.test(source)
        && JSON.stringify(rows) === JSON.stringify(gate.checks.map(c => ({ name: c.name, status: c.status, message: c.message })))
        && (await page.locator(`${GATE_TAB} [data-testid="wavegate-gate-status"]`).getAttribute('data-status')) === gate.health.status;
    }, { ms: 15000, what: 'the Gate tab to show the checks of cicd/forgejo-ready exactly as wavegate reports them' });
    assert.ok(await page.locator(`${GATE_TAB} [data-testid="wavegate-check-forgejo-http"]`).count() === 1);

    // Waves tab (by name) and status panel (by Argocd-Application-Name) agree with wavegate.
    await eventually(async () => sameWaves(await readWaves(page, WAVES_TAB), await json(`api/v1/applications/${APP.namespace}/${APP.name}/waves`)),
      { ms: 15000, what: 'the Waves tab to match wavegate\'s waves of argocd/platform' });
    await eventually(async () => {
      const w = await json('api/v1/waves', PROXY_HEADERS);
      return (await page.locator(PANEL).getAttribute('data-wave')) === (w.blockingWave == null ? 'none' : String(w.blockingWave));
    }, { ms: 15000, what: 'the status panel to show wavegate\'s blocking wave' });
    // wavegate lint on the live objects, each finding beside the wave of the object to change,
    // worded exactly as the API says (seed 001: Forgejo in its Database's wave 3).
    await eventually(async () => {
      const w = await json(`api/v1/applications/${APP.namespace}/${APP.name}/waves`);
      const key = f => JSON.stringify([f.wave, f.rule, f.message]);
      const want = ((w.lint || {}).findings || []).map(f => ({ wave: f.wave, rule: f.rule, message: f.message }));
      const shown = await page.evaluate(root => [...document.querySelectorAll(root + ' tbody[data-testid^="wavegate-wave-"] tr[data-testid^="wavegate-finding-"]')].map(tr => ({
        wave: Number(tr.closest('tbody').getAttribute('data-testid').replace('wavegate-wave-', '')),
        rule: tr.getAttribute('data-testid').replace('wavegate-finding-', ''),
        message: tr.querySelector('[data-testid="wavegate-finding-message"]').textContent,
      })), WAVES_TAB);
      return want.some(f => f.rule === 'same-wave' && f.wave === 3 && /uses database forgejo of Cluster pg/.test(f.message))
        && JSON.stringify(shown.map(key).sort()) === JSON.stringify(want.map(key).sort());
    }, { ms: 15000, what: 'the Waves tab to show wavegate lint\'s findings beside their waves, same-wave in wave 3' });
    const panelText = await page.locator(PANEL).textContent();
    assert.match(panelText, /wave \d+ is blocking|all waves truly healthy/);
    await screenshot(page, 'extension-tabs-and-status-panel');

    // Every request went through the proxy with Argo CD's headers and reached wavegate.
    const proxied = harness.state.proxied;
    assert.deepEqual(harness.state.rejected, [], 'requests the proxy refused for missing/bad Argocd-* headers');
    for (const p of ['/extensions/wavegate/api/v1/gates/cicd/forgejo-ready',
                     '/extensions/wavegate/api/v1/applications/argocd/platform/waves',
                     '/extensions/wavegate/api/v1/waves']) {
      const hits = proxied.filter(r => r.path === p);
      assert.ok(hits.length > 0, `no request for ${p}`);
      assert.equal(hits[0].status, 200, JSON.stringify(hits));
      assert.ok(hits.every(r => [200, 304].includes(r.status) && r.app === 'argocd:platform' && r.project === 'default'), JSON.stringify(hits));
    }
    // A poll of a waves answer that did not change is answered 304 through the proxy, as through
    // argocd-server, which passes If-None-Match on and ETag / Wavegate-Now back: the tab sends
    // the tag it was given, and 2,000 resources' megabyte is neither sent nor read again.
    const wavesPath = '/extensions/wavegate/api/v1/applications/argocd/platform/waves';
    await eventually(async () => proxied.some(r => r.path === wavesPath && r.status === 304),
      { ms: 15000, what: 'a poll of the unchanged waves answer through the proxy answered 304 Not Modified' });
    await eventually(async () => sameWaves(await readWaves(page, WAVES_TAB), await json(`api/v1/applications/${APP.namespace}/${APP.name}/waves`)),
      { ms: 15000, what: 'the Waves tab to still match wavegate\'s waves after a 304' });

    // The flyout, opened from the status panel with the keyboard, holds the full waves table.
    await page.getByTestId('wavegate-panel-details').focus();
    await page.keyboard.press('Enter');
    await eventually(async () => sameWaves(await readWaves(page, '[data-testid="flyout"]'), await json('api/v1/waves', PROXY_HEADERS)),
      { ms: 15000, what: 'the flyout to show the waves' });
    await screenshot(page, 'extension-flyout');
    await context.close();
  });

  test('polls: shows the stored WaveGate status and a visible error while wavegate is down, then live data', async () => {
    harness.state.backendDown = true;
    let context, page;
    try {
      ({ context, page } = await open());
      const error = page.locator(`${GATE_TAB} [data-testid="wavegate-error"]`);
      await error.waitFor({ timeout: 8000 });
      assert.match(await error.textContent(), /unreachable|502/);
      // Until wavegate answers, the tab shows what Argo CD already has: the WaveGate's own status.
      assert.match(await page.locator(`${GATE_TAB} [data-testid="wavegate-source"]`).textContent(), /status in the cluster/);
      assert.match(await page.locator(`${GATE_TAB} [data-testid="wavegate-check-forgejo-http"]`).textContent(), /stored in the WaveGate's status/);
      assert.equal(await page.locator(`${GATE_TAB} [data-testid="wavegate-check-forgejo-http"] td`).first().textContent(), 'services cicd/forgejo');
      // A generic check's target names its kind the kubectl way, never "undefined/…" (issue 9, item 9).
      assert.equal(await page.locator(`${GATE_TAB} [data-testid="wavegate-check-web-rollout"] td`).first().textContent(), 'deployments.apps cicd/web');
      await page.locator(`${WAVES_TAB} [data-testid="wavegate-error"]`).waitFor({ timeout: 8000 });
      await page.locator(`${PANEL} [data-testid="wavegate-panel-message"]`).waitFor({ timeout: 8000 });
      await screenshot(page, 'extension-wavegate-down');
    } finally {
      harness.state.backendDown = false;
    }
    // The next poll (every 5 s) picks wavegate up again without any user action.
    await eventually(async () => /Live from wavegate/.test(await page.locator(`${GATE_TAB} [data-testid="wavegate-source"]`).textContent()),
      { ms: 12000, what: 'the Gate tab to recover on its next poll' });
    assert.equal(await page.locator(`${GATE_TAB} [data-testid="wavegate-error"]`).count(), 0);
    await context.close();
  });

  test('a wave of a big application opens with all its rows, the first at the next frame', async () => {
    // Over ROWS_AT_ONCE resources only open waves have rows; a wave opened by a click is drawn a
    // slice a frame (ResourceRows). The view is made up here (three waves of 100), so this needs
    // no big application in the cluster.
    const resources = wave => Array.from({ length: 100 }, (_, i) => ({
      group: '', version: 'v1', kind: 'ConfigMap', namespace: 'shop', name: `cm-${wave}-${String(i).padStart(3, '0')}`,
      status: 'Healthy', message: `row ${i} of wave ${wave}`, judgedBy: 'wavegate',
    }));
    const view = {
      namespace: APP.namespace, name: APP.name, health: { status: 'Progressing', message: 'wave 1' },
      blockingWave: 1, message: 'made up for the test',
      waves: [0, 1, 2].map(w => ({ wave: w, status: w === 0 ? 'Healthy' : 'Progressing', resources: resources(w) })),
    };
    const { context, page } = await open();
    await page.route(`**/extensions/wavegate/api/v1/applications/${APP.namespace}/${APP.name}/waves`,
      route => route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(view) }));
    await page.reload();
    await page.waitForFunction(() => window.__harnessReady === true);
    const rowsOf = wave => page.evaluate(([root, wave]) =>
      [...document.querySelectorAll(`${root} tbody[data-testid="wavegate-wave-${wave}"] tr[data-testid^="wavegate-resource-"]`)]
        .map(tr => tr.querySelector('th').textContent), [WAVES_TAB, wave]);
    const names = wave => resources(wave).map(r => `ConfigMap shop/${r.name}`);
    await eventually(async () => JSON.stringify(await rowsOf(1)) === JSON.stringify(names(1)),
      { ms: 15000, what: 'the blocking wave 1 open with its 100 rows in order' });
    assert.deepEqual([await rowsOf(0), await rowsOf(2)], [[], []], 'the other waves are closed');

    const toggle = `${WAVES_TAB} tbody[data-testid="wavegate-wave-2"] [data-testid="wavegate-wave-toggle"]`;
    const atNextFrame = await page.evaluate(async ([sel, rows]) => {
      document.querySelector(sel).click();
      await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
      return document.querySelectorAll(rows).length;
    }, [toggle, `${WAVES_TAB} tbody[data-testid="wavegate-wave-2"] tr[data-testid^="wavegate-resource-"]`]);
    assert.ok(atNextFrame > 0, 'no row of the opened wave at the next frame');
    await eventually(async () => JSON.stringify(await rowsOf(2)) === JSON.stringify(names(2)),
      { ms: 5000, what: 'wave 2 opened with all its 100 rows in order' });
    assert.equal(await page.locator(toggle).getAttribute('aria-expanded'), 'true');
    assert.deepEqual(await rowsOf(1), names(1), 'wave 1 is left as it was');

    // Closed, and opened again: all its rows again.
    await page.locator(toggle).click();
    await eventually(async () => (await rowsOf(2)).length === 0, { ms: 5000, what: 'wave 2 closed' });
    await page.locator(toggle).click();
    await eventually(async () => JSON.stringify(await rowsOf(2)) === JSON.stringify(names(2)),
      { ms: 5000, what: 'wave 2 opened again with all its rows' });
    await context.close();
  });

  test('loads nothing from other hosts and throws no script errors', () => {
    assert.deepEqual(foreign, [], 'requests to non-local hosts');
    assert.deepEqual(pageErrors, [], 'uncaught errors in the page');
  });
});
