// The timeline layout of the dashboard and the UI extension (`timelineLayout`, the block between
// "timeline layout: BEGIN" and "END" in src/api/dashboard.html and
// argocd/extension/extension-wavegate.js) as a pure function: the API's timeline in, SVG shapes
// out. No browser and no wavegate: `node --test tests/browser/timeline-layout.test.mjs`.
// tests/offline/ui.rs holds the two copies of the block to one another.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function layoutBlock(file) {
  const s = fs.readFileSync(path.join(REPO, file), 'utf8');
  const m = s.match(/\/\/ ---- timeline layout: BEGIN[\s\S]*\/\/ ---- timeline layout: END ----/);
  assert.ok(m, `${file} has the timeline layout block`);
  return m[0];
}

for (const file of ['src/api/dashboard.html', 'argocd/extension/extension-wavegate.js']) test(`${file}: the layout draws every state the API can send, and times only what has a time`, () => {
  const timelineLayout = new Function(layoutBlock(file) + '\nreturn timelineLayout;')();
  const wave = (n, o) => ({ wave: n, status: 'Healthy', applied: 'applied', appliedAt: null, appliedNote: 'note ' + n,
    healthy: 'timeUnknown', healthyAt: null, healthyNote: '', blocking: false, ...o });
  const t = {
    sync: { phase: 'Failed', startedAt: '2026-12-01T03:00:00Z', finishedAt: '2026-12-01T03:10:00Z', message: 'one or more objects failed to apply' },
    now: '2026-12-01T03:20:00Z', blockingWave: 2,
    waves: [
      wave(-1, { appliedAt: '2026-12-01T03:00:01Z', healthy: 'healthy', healthyAt: '2026-11-30T00:00:00Z' }), // healthy before it was applied
      wave(0, { applied: 'unchanged' }),
      wave(1, { applied: 'unknown', appliedNote: 'Widget w: does not exist' }),
      wave(2, { applied: 'failed', appliedNote: "Argo CD's apply failed (SyncFailed) for Job j", status: 'Degraded', healthy: 'notHealthy',
        blocking: true, reason: 'Job ns/j is Degraded: ' + 'x'.repeat(300) }),
      wave(3, { applied: 'notInSync', status: 'Progressing', healthy: 'notHealthy' }),
    ],
  };
  const l = timelineLayout(t);
  const rows = l.shapes.filter(s => s.tag === 'g');
  assert.deepEqual(rows.map(r => r.attrs['data-wave']), ['-1', '0', '1', '2', '3']);
  const kids = (r, id) => r.children.filter(c => c.attrs['data-testid'] === id);
  const words = r => kids(r, 'timeline-times')[0].text;
  assert.equal(kids(rows[0], 'timeline-bar').length, 1);
  assert.match(words(rows[0]), /already before this apply/);
  for (const i of [1, 2, 3, 4]) assert.equal(kids(rows[i], 'timeline-bar').length, 0, `no bar without an applied time (wave ${rows[i].attrs['data-wave']})`);
  assert.match(words(rows[1]), /without changes/);
  assert.match(words(rows[2]), /time unknown: Widget w: does not exist/);
  assert.match(words(rows[3]), /SyncFailed/);
  assert.match(words(rows[4]), /not part of the last sync/);
  const reason = kids(rows[3], 'timeline-reason');
  assert.equal(reason.length, 2, 'a long reason takes two lines, cut with an ellipsis');
  assert.match(reason[1].text, /…$/);
  assert.equal(reason[0].title, t.waves[3].reason, 'the whole reason is in the tooltip');
  assert.ok(l.shapes.some(s => s.attrs['data-testid'] === 'timeline-axis-end' && /sync finished/.test(s.text)));
  // No operation recorded: a sentence, no axis times.
  const none = timelineLayout({ sync: null, now: t.now, blockingWave: null, waves: [wave(0, { applied: 'unknown' })] });
  assert.match(none.shapes[0].text, /no sync operation/);
});
