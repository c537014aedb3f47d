// Renders every registered extension the way Argo CD's application details page does.
(function () {
  'use strict';
  var h = React.createElement;
  var regs = window.__registrations;

  // Argo CD matches a resource tab's group/kind with minimatch; '*' globs are all it needs here.
  function glob(pattern, value) {
    var re = new RegExp('^' + pattern.split('*').map(function (s) { return s.replace(/[.+?^${}()|[\]\\]/g, '\\$&'); }).join('.*') + '$');
    return re.test(value || '');
  }
  function tabsFor(resource) {
    var group = (resource.apiVersion || '').indexOf('/') >= 0 ? resource.apiVersion.split('/')[0] : '';
    return regs.resourceTabs.filter(function (t) { return glob(t.group, group) && glob(t.kind, resource.kind); })
      .sort(function (a, b) { return a.title.localeCompare(b.title); });
  }
  function json(path) { return fetch(path).then(function (r) { return r.json(); }); }

  function ResourcePanel(props) {
    var tabs = tabsFor(props.resource);
    var md = props.resource.metadata;
    return h('section', { className: 'panel', 'data-testid': 'resource-panel-' + props.resource.kind },
      h('h2', null, props.resource.kind + ' ' + md.namespace + '/' + md.name + ' — extension tab' + (tabs.length === 1 ? '' : 's') + ': ' +
        tabs.map(function (t) { return '"' + t.title + '"'; }).join(', ')),
      tabs.map(function (t) {
        return h('div', { key: t.title, 'data-testid': 'tab-' + t.title },
          h(t.component, { application: props.application, resource: props.resource, tree: props.tree }));
      }));
  }

  function App(props) {
    var st = React.useState(null), flyout = st[0], setFlyout = st[1];
    var app = props.application;
    var open = regs.statusPanels.filter(function (e) { return e.id === flyout; })[0];
    return h(React.Fragment, null,
      h('section', { className: 'panel' },
        h('h2', null, 'Status panel'),
        h('div', { className: 'application-status-panel row', 'data-testid': 'status-panel' },
          h('div', { className: 'application-status-panel__item fake-item' },
            h('div', null, h('label', null, 'APP HEALTH')),
            h('div', { className: 'application-status-panel__item-value' }, app.status.health.status)),
          regs.statusPanels.map(function (ext) {
            return h(ext.component, { key: ext.title, application: app, openFlyout: function () { setFlyout(ext.id); } });
          }))),
      h(ResourcePanel, { application: app, resource: props.wavegate, tree: props.tree }),
      h(ResourcePanel, { application: app, resource: app, tree: props.tree }),
      open && open.flyout ? h('aside', { id: 'flyout', 'data-testid': 'flyout', 'aria-label': open.title },
        h('header', null, h('h1', null, open.title), h('button', { type: 'button', onClick: function () { setFlyout(null); } }, 'Close')),
        h(open.flyout, { application: app, tree: props.tree })) : null);
  }

  Promise.all([json('harness/fixtures/application.json'), json('harness/fixtures/wavegate.json'), json('harness/fixtures/tree.json')])
    .then(function (f) {
      document.getElementById('app-name').textContent = f[0].metadata.namespace + '/' + f[0].metadata.name;
      ReactDOM.createRoot(document.getElementById('root')).render(h(App, { application: f[0], wavegate: f[1], tree: f[2] }));
      window.__harnessReady = true;
    }, function (e) { document.getElementById('root').textContent = 'harness failed: ' + e; });
})();
