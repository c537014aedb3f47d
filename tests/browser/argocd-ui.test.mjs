// wavegate inside Argo CD's own web UI: the real argocd-server (built with the UI from its Go module,
// wavegate's extension installed from its ConfigMap) in Debian's chromium, logged in through Argo
// CD's login page. Run by tests/argocd/ui.sh, which brings seed 001 to the middle of its sync
// (gate cicd/forgejo-serving of wave 4 Progressing) and seed 000 to its held wave 3.
//
// What the UI must show is read from wavegate itself (WAVEGATE_DIRECT_URL) and from the API server
// in the same moment; this test plays the kubelet (a Forgejo pod turns Ready) and watches the page
// change without a reload.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { launch, screenshot, guardNetwork, eventually } from './lib/common.mjs';

function required(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this test through tests/argocd/ui.sh (real Argo CD)`);
  return v;
}
const ARGOCD = new URL(required('ARGOCD_URL'));
const WAVEGATE = new URL(required('WAVEGATE_DIRECT_URL'));
const USERS = { alice: required('ALICE_PASSWORD'), bob: required('BOB_PASSWORD') };
required('KUBECONFIG');

const SEED1 = 'applications/argocd/seed-001-forgejo';
const SEED0 = 'applications/argocd/seed-000-cockroachdb';

async function wavegate(rel) {
  const res = await fetch(new URL(rel, WAVEGATE), { headers: { Accept: 'application/json' } });
  assert.equal(res.status, 200, `wavegate GET ${rel} answered ${res.status}`);
  return res.json();
}
function kubectl(...args) {
  return execFileSync('kubectl', args, { encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
}
function kubectlApply(yaml) {
  return execFileSync('kubectl', ['apply', '-f', '-'], { input: yaml, encoding: 'utf8' });
}
function storedGateMessage(ns, name) {
  return JSON.parse(kubectl('-n', ns, 'get', 'wavegate', name, '-o', 'json')).status.health.message;
}

// Errors a page reports, split by where they come from: wavegate's bundle is served by argocd-server
// as /extensions.js; the browser's own "Failed to load resource" lines name the URL that failed.
function watchConsole(page, sink) {
  page.on('pageerror', e => sink.push({ kind: 'pageerror', text: e.message, where: String(e.stack || '') }));
  page.on('console', m => {
    if (m.type() !== 'error') return;
    sink.push({ kind: 'console', text: m.text(), where: (m.location() && m.location().url) || '' });
  });
}
const fromWavegate = e => /extensions\.js/.test(e.where) || /wavegate/i.test(e.text) && e.kind === 'pageerror';

// A tree node by Argo CD's own description of it (describeNode: "Kind: …\nNamespace: …\nName: …",
// the node's title; none of the kinds asked for here lists images after it).
function node(page, kind, namespace, name) {
  return page.locator(`.application-resource-tree__node[title="Kind: ${kind}\\ANamespace: ${namespace}\\AName: ${name}"]`);
}
// The node's health as Argo CD's tree draws it (HealthStatusIcon): Progressing is a spinner without
// a title, every other status an icon titled "<status>: <message>".
async function treeHealth(page, kind, namespace, name) {
  const icon = node(page, kind, namespace, name).locator('[qe-id="utils-health-status-title"]').first();
  if (!(await icon.count())) return null;
  if (await icon.evaluate(e => e.tagName.toLowerCase() === 'svg' && e.classList.contains('spin'))) return 'Progressing';
  return icon.getAttribute('title');
}
async function openNode(page, kind, namespace, name) {
  await node(page, kind, namespace, name).click();
  await page.locator('.tabs__nav-wrapper a').first().waitFor({ timeout: 20000 });
}
async function openTab(page, kind, namespace, name, tab) {
  await openNode(page, kind, namespace, name);
  const link = page.locator('.tabs__nav-wrapper a', { hasText: new RegExp(`^\\s*${tab}\\s*$`, 'i') });
  await link.first().waitFor({ timeout: 20000 });
  await link.first().click();
}
async function closePanel(page) {
  const close = page.locator('.sliding-panel__close');
  if (await close.count()) await close.first().click();
  else await page.keyboard.press('Escape');
  await page.locator('.tabs__nav-wrapper').first().waitFor({ state: 'detached', timeout: 10000 });
}

async function login(browser, user, errors) {
  const context = await browser.newContext({ viewport: { width: 1500, height: 1000 } });
  const foreign = [];
  await guardNetwork(context, foreign);
  const page = await context.newPage();
  watchConsole(page, errors);
  await page.goto(new URL('login', ARGOCD).href);
  await page.locator('input[name="username"]').fill(user);
  await page.locator('input[name="password"]').fill(USERS[user]);
  await page.locator('button[type="submit"]').click();
  await page.waitForURL(/\/applications/, { timeout: 30000 });
  return { context, page, foreign };
}

describe('wavegate in Argo CD\'s own UI', () => {
  let browser;
  const errors = [];

  before(async () => { browser = await launch(); });
  after(async () => {
    await browser?.close();
    const ours = errors.filter(fromWavegate);
    if (errors.length) console.log('console errors seen (all sources):\n' + errors.map(e => `  [${e.kind}] ${e.text} @ ${e.where}`).join('\n'));
    assert.deepEqual(ours, [], 'wavegate\'s bundle (/extensions.js) raised errors in the browser console');
  });

  test('alice: the held wave, each object\'s tab, the panel and the waves view; then the release without a reload', async () => {
    const { context, page, foreign } = await login(browser, 'alice', errors);
    await page.goto(new URL(SEED1 + '?view=tree', ARGOCD).href);
    // A marker that a reload would wipe.
    await page.evaluate(() => { window.__wavegateNoReload = true; });

    // The tree: the gate of wave 4 is Progressing, wave 5's ConfigMap not created yet.
    await eventually(async () => (await treeHealth(page, 'WaveGate', 'cicd', 'forgejo-serving')) === 'Progressing',
      { ms: 60000, what: 'the tree\'s WaveGate cicd/forgejo-serving to show Progressing' });
    assert.equal(await treeHealth(page, 'ConfigMap', 'cicd', 'next-app'), 'Missing', 'wave 5 is not Missing while the gate holds');
    await screenshot(page, 'argocd-ui-tree-held');
    // Argo CD's own notice banner (3.5, application-notice/notice-banner.tsx), which wavegate's
    // --notices writes while the sync waits for the gate: no extension involved.
    const banner = page.locator('.application-notice');
    await banner.waitFor({ timeout: 30000 });
    assert.match(await banner.getAttribute('class'), /application-notice--warning/);
    const bannerText = await banner.locator('.application-notice__content').innerText();
    assert.match(bannerText, /wavegate holds sync wave 4: WaveGate cicd\/forgejo-serving is Progressing/);
    assert.equal(await banner.locator('.application-notice__content a').getAttribute('href'),
      new URL('api/v1/applications/argocd/seed-001-forgejo/waves', WAVEGATE).href);
    await screenshot(page, 'argocd-ui-notice-held');
    // Its summary carries wavegate's message, as Argo CD read it from the WaveGate's status.
    // Compared with the stored message of the same moment: the gate may rephrase while it holds,
    // and Argo CD must follow within seconds, not at its next periodic refresh. Argo CD ignores a
    // change of status alone under the same health status (Argo CD's own first message, "waiting
    // for wavegate to evaluate generation 1", stays Progressing); wavegate's verdict stamp in
    // metadata makes it look again (src/gate/stamp.rs).
    await openNode(page, 'WaveGate', 'cicd', 'forgejo-serving');
    const seen = { summary: '', stored: '' };
    try {
      await eventually(async () => {
        seen.stored = storedGateMessage('cicd', 'forgejo-serving');
        seen.summary = await page.locator('.tabs__content').first().innerText();
        return /HEALTH DETAILS/.test(seen.summary) && seen.summary.includes(seen.stored);
      }, { ms: 15000, what: 'the WaveGate\'s summary to show HEALTH DETAILS with its stored message' });
    } catch (e) {
      await screenshot(page, 'argocd-ui-gate-summary-failed');
      throw new Error(`${e.message}\nstored message: ${seen.stored}\nsummary shown:\n${seen.summary}`);
    }
    await screenshot(page, 'argocd-ui-gate-summary');
    await closePanel(page);

    // The status panel names the held wave and why. Argo CD waits on the gate in wave 4; what
    // truly holds it is wave 3's Service, whose selector matches no pod (wavegate's view).
    const waves = await wavegate('api/v1/applications/argocd/seed-001-forgejo/waves');
    const held = waves.blockingWave;
    assert.ok(Number.isInteger(held) && held <= 4, `wavegate says wave ${held} is blocking; the sync is held at wave 4`);
    const panel = page.locator('[data-testid="wavegate-status-panel"]');
    await eventually(async () => (await panel.getAttribute('data-wave')) === String(held), { ms: 20000, what: `the status panel to name wave ${held}` });
    assert.match(await panel.locator('[data-testid="wavegate-panel-value"]').innerText(), new RegExp(`wave ${held} is blocking`));
    assert.equal(await panel.locator('[data-testid="wavegate-panel-message"]').getAttribute('title'), waves.message);

    // The Waves view beside Tree / Network / List: the table and the timeline of this sync.
    await page.locator('i[title="Waves"]').click();
    const view = page.locator('[data-testid="wavegate-waves-view"]');
    await view.locator(`[data-testid="wavegate-blocking-wave"][data-wave="${held}"]`).waitFor({ timeout: 20000 });
    await view.locator('[data-testid="timeline-svg"]').waitFor();
    assert.equal(await view.locator(`[data-testid="timeline-wave-${held}"]`).getAttribute('data-blocking'), 'true');
    assert.equal(await view.locator('[data-testid="timeline-wave-5"]').getAttribute('data-applied'), 'pending',
      'the timeline draws wave 5 as applied while the sync is held');
    assert.equal(await view.locator('[data-testid="timeline-wave-1"]').getAttribute('data-applied'), 'applied',
      'the timeline does not draw wave 1 as applied by this sync');
    await screenshot(page, 'argocd-ui-waves-view');
    await page.locator('i[title="Tree"]').click();

    // The Service and the Database: wavegate's verdict on each, and the gate checks waiting on it.
    await openTab(page, 'Service', 'cicd', 'forgejo', 'Readiness');
    const svc = await wavegate('api/v1/health/services/cicd/forgejo');
    const svcTab = page.locator('[data-testid="wavegate-readiness-tab"]');
    await eventually(async () => (await svcTab.getAttribute('data-status')) === svc.status, { what: `the Service tab to say ${svc.status}` });
    assert.equal(await svcTab.locator('[data-testid="wavegate-verdict-message"]').innerText(), svc.message);
    const svcCheck = svcTab.locator('[data-testid="wavegate-check-forgejo-http"]');
    await svcCheck.waitFor();
    assert.match(await svcCheck.innerText(), /cicd\/forgejo-serving/);
    await screenshot(page, 'argocd-ui-service-tab');
    await closePanel(page);

    await openTab(page, 'Database', 'ddb', 'forgejo', 'Readiness');
    const dbTab = page.locator('[data-testid="wavegate-readiness-tab"]');
    const db = await wavegate('api/v1/health/databases.postgresql.cnpg.io/ddb/forgejo');
    await eventually(async () => (await dbTab.getAttribute('data-status')) === db.status, { what: `the Database tab to say ${db.status}` });
    assert.equal(db.status, 'Healthy');
    assert.equal(await dbTab.locator('[data-testid="wavegate-check-forgejo-db"]').getAttribute('data-status'), 'Healthy');
    await screenshot(page, 'argocd-ui-database-tab');
    await closePanel(page);

    // The gate's own tab: one row per check, as wavegate judged it.
    await openTab(page, 'WaveGate', 'cicd', 'forgejo-serving', 'Gate');
    const gate = await wavegate('api/v1/gates/cicd/forgejo-serving');
    const row = page.locator('[data-testid="wavegate-gate-tab"] [data-testid="wavegate-check-forgejo-http"]');
    await eventually(async () => (await row.getAttribute('data-status')) === 'Progressing', { what: 'the Gate tab row forgejo-http Progressing' });
    assert.equal(await row.locator('[data-testid="wavegate-check-message"]').innerText(), gate.checks[0].message);
    await screenshot(page, 'argocd-ui-gate-tab-held');

    // Play the kubelet: a Forgejo pod turns Ready. The open tab, the tree and the panel follow.
    kubectlApply(`apiVersion: v1
kind: Pod
metadata:
  name: forgejo-0
  namespace: cicd
  labels: {app: gitea, app.kubernetes.io/name: gitea, app.kubernetes.io/instance: forgejo}
spec:
  nodeName: wavegate-node
  containers: [{name: forgejo, image: codeberg.org/forgejo/forgejo:11}]
`);
    kubectl('-n', 'cicd', 'patch', 'pod', 'forgejo-0', '--subresource=status', '--type', 'merge', '-p', JSON.stringify({
      status: {
        phase: 'Running', podIP: '10.244.0.10', podIPs: [{ ip: '10.244.0.10' }],
        conditions: [{ type: 'Ready', status: 'True' }, { type: 'ContainersReady', status: 'True' }, { type: 'PodScheduled', status: 'True' }],
      },
    }));
    await eventually(async () => (await row.getAttribute('data-status')) === 'Healthy',
      { ms: 30000, what: 'the open Gate tab to turn Healthy' });
    await screenshot(page, 'argocd-ui-gate-tab-released');
    await closePanel(page);
    await eventually(async () => (await treeHealth(page, 'WaveGate', 'cicd', 'forgejo-serving') || '').startsWith('Healthy'),
      { ms: 60000, what: 'the tree\'s WaveGate to turn Healthy' });
    await eventually(async () => {
      const n = node(page, 'ConfigMap', 'cicd', 'next-app');
      return (await n.count()) > 0 && (await n.locator('[qe-id="utils-sync-status-title"][title="Synced"]').count()) > 0;
    }, { ms: 60000, what: 'wave 5\'s ConfigMap next-app to appear in the tree, Synced' });
    await eventually(async () => (await panel.getAttribute('data-wave')) === 'none',
      { ms: 30000, what: 'the status panel to say no wave is blocking' });
    // The wave advanced and the sync ended: wavegate removed its notice, and the banner went.
    await eventually(async () => (await page.locator('.application-notice').count()) === 0,
      { ms: 30000, what: 'the notice banner to go away once the gate released the wave' });
    assert.equal(await page.evaluate(() => window.__wavegateNoReload), true, 'the page was reloaded');
    await screenshot(page, 'argocd-ui-tree-released');

    // The applications list: seed 000, still held at its wave 3, carries the notice icon;
    // seed 001 no longer does (application-notice/notice-icon.tsx).
    await page.goto(new URL('applications', ARGOCD).href);
    const tile = name => page.locator('.applications-list__entry', { hasText: name });
    await eventually(async () => (await tile('seed-000-cockroachdb').locator('.application-notice-icon--warning').count()) === 1,
      { ms: 30000, what: 'seed 000\'s tile to carry the notice icon' });
    assert.equal(await tile('seed-001-forgejo').locator('.application-notice-icon').count(), 0,
      'seed 001\'s tile still carries a notice after its sync ended');
    await screenshot(page, 'argocd-ui-notice-icon');

    // Seed 000: the CrdbCluster that the operator calls ready, held by wavegate's gate.
    await page.goto(new URL(SEED0 + '?view=tree', ARGOCD).href);
    await openTab(page, 'CrdbCluster', 'prod', 'cockroachdb', 'Readiness');
    const crdb = await wavegate('api/v1/health/crdbclusters.crdb.cockroachlabs.com/prod/cockroachdb');
    const crdbTab = page.locator('[data-testid="wavegate-readiness-tab"]');
    await eventually(async () => (await crdbTab.getAttribute('data-status')) === crdb.status, { what: `the CrdbCluster tab to say ${crdb.status}` });
    assert.notEqual(crdb.status, 'Healthy', 'no CockroachDB pod answers, yet wavegate says Healthy');
    assert.equal(await crdbTab.locator('[data-testid="wavegate-check-crdb"]').getAttribute('data-status'), 'Progressing');
    await screenshot(page, 'argocd-ui-crdbcluster-tab');

    assert.deepEqual(foreign, [], 'the UI asked hosts other than this machine');
    await context.close();
  });

  test('bob (no "extensions, invoke"): Argo CD\'s own views and a clear "not permitted" in wavegate\'s places', async () => {
    const { context, page } = await login(browser, 'bob', errors);
    const stored = JSON.parse(kubectl('-n', 'cicd', 'get', 'wavegate', 'forgejo-serving', '-o', 'json')).status.health.status;
    await page.goto(new URL(SEED1 + '?view=tree', ARGOCD).href);
    await node(page, 'WaveGate', 'cicd', 'forgejo-serving').waitFor({ timeout: 60000 });
    const panel = page.locator('[data-testid="wavegate-status-panel"] [data-testid="wavegate-panel-message"]');
    await panel.waitFor({ timeout: 20000 });
    assert.match(await panel.getAttribute('title'), /Not permitted.*extensions, invoke, wavegate/);

    await openTab(page, 'WaveGate', 'cicd', 'forgejo-serving', 'Gate');
    const tab = page.locator('[data-testid="wavegate-gate-tab"]');
    const alert = tab.locator('[data-testid="wavegate-error"]');
    await alert.waitFor({ timeout: 20000 });
    assert.match(await alert.innerText(), /Not permitted/);
    // Not a blank panel: what Argo CD itself holds (the gate's status) is still shown.
    assert.equal(await tab.locator('[data-testid="wavegate-gate"]').getAttribute('data-status'), stored);
    await screenshot(page, 'argocd-ui-bob-not-permitted');
    // Argo CD's own tabs still work for him.
    await page.locator('.tabs__nav-wrapper a', { hasText: /^\s*Summary\s*$/i }).first().click();
    await page.locator('.tabs__content').first().waitFor();
    await context.close();
  });
});
