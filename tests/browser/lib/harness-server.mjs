// Serves the extension harness and proxies /extensions/wavegate/* to a real wavegate the way
// argocd-server's proxy extension does (Argo CD docs: developer-guide/extensions/proxy-extensions):
//   * only the configured extension name is routed, everything else under /extensions/ is 404;
//   * Argocd-Application-Name ("<namespace>:<name>") and Argocd-Project-Name are mandatory, and
//     must name the Application the user is looking at (Argo CD authorises against it);
//   * "/extensions/wavegate" is stripped, the rest of the path and the query are forwarded;
//   * Cookie and Authorization from the browser are dropped; the configured backend headers
//     (here Authorization from WAVEGATE_TOKEN, like `value: '$wavegate.token'`) are added;
//   * every other request header (the Argocd-* ones, If-None-Match) travels on to the backend,
//     and every response header (ETag, Wavegate-Now) back, but hop-by-hop ones.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { BROWSER_DIR, REPO } from './common.mjs';

const EXTENSION = 'wavegate';
// RFC 9110 §7.6.1's connection-specific headers, as Go's net/http/httputil lists them.
const HOP_BY_HOP = new Set(['connection', 'proxy-connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization',
  'te', 'trailer', 'transfer-encoding', 'upgrade']);
const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.json': 'application/json' };

// argocd-server builds /extensions.js by walking /tmp/extensions: regular files (symlinks are
// skipped) named ^extension(.*)\.js$, each preceded by a "// source:" comment.
function extensionsJs(dir) {
  const files = [];
  (function walk(d) {
    for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile() && /^extension(.*)\.js$/.test(e.name)) files.push(p);
    }
  })(dir);
  return files.map(f => `// source: ${f} \n` + fs.readFileSync(f, 'utf8')).join('\n');
}

// `fixtures` replaces harness/fixtures/<name> files by objects (another Application, say).
export async function startHarness({ backend, token = '', app, fixtures: replaced = {} }) {
  const state = { backendDown: false, proxied: [], rejected: [] };
  const staticFiles = {
    '/': path.join(BROWSER_DIR, 'harness', 'index.html'),
    '/harness/harness.js': path.join(BROWSER_DIR, 'harness', 'harness.js'),
    '/vendor/react.production.min.js': path.join(BROWSER_DIR, 'node_modules', 'react', 'umd', 'react.production.min.js'),
    '/vendor/react-dom.production.min.js': path.join(BROWSER_DIR, 'node_modules', 'react-dom', 'umd', 'react-dom.production.min.js'),
  };
  const fixtures = path.join(BROWSER_DIR, 'harness', 'fixtures');

  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://harness');
    const send = (code, body, type = 'text/plain; charset=utf-8') => { res.writeHead(code, { 'content-type': type }); res.end(body); };
    try {
      if (url.pathname === '/extensions.js') {
        return send(200, extensionsJs(path.join(REPO, 'argocd', 'extension')), TYPES['.js']);
      }
      if (staticFiles[url.pathname]) {
        const f = staticFiles[url.pathname];
        return send(200, fs.readFileSync(f), TYPES[path.extname(f)]);
      }
      const fx = url.pathname.match(/^\/harness\/fixtures\/([a-z-]+\.json)$/);
      if (fx && replaced[fx[1]]) return send(200, JSON.stringify(replaced[fx[1]]), TYPES['.json']);
      if (fx) return send(200, fs.readFileSync(path.join(fixtures, fx[1])), TYPES['.json']);

      const prefix = `/extensions/${EXTENSION}/`;
      if (url.pathname.startsWith('/extensions/')) {
        if (!url.pathname.startsWith(prefix)) return send(404, 'extension not found');
        const appHeader = req.headers['argocd-application-name'] || '';
        const project = req.headers['argocd-project-name'] || '';
        const reject = why => { state.rejected.push({ path: url.pathname, why }); return send(400, why); };
        if (!/^[^:]+:[^:]+$/.test(appHeader)) return reject('invalid Argocd-Application-Name header: ' + JSON.stringify(appHeader));
        if (!project) return reject('missing Argocd-Project-Name header');
        if (appHeader !== `${app.namespace}:${app.name}` || project !== app.project) {
          // What argocd-server answers when RBAC refuses (server/extension CallExtension): 401 with
          // this body, the same status as an expired session.
          return send(401, 'Unauthorized extension request');
        }
        if (req.method !== 'GET') return send(405, 'method not allowed');
        if (state.backendDown) return send(502, 'proxy error: backend unavailable');

        const target = new URL(url.pathname.slice(prefix.length) + url.search, backend);
        // The browser's headers travel on but for Authorization and Cookie (argo-cd
        // server/extension NewProxy's Director deletes those two, then sets the configured ones),
        // so a poll's If-None-Match reaches wavegate; hop-by-hop headers stop here, as Go's
        // httputil.ReverseProxy drops them both ways.
        const headers = {};
        for (const [k, v] of Object.entries(req.headers)) {
          if (!HOP_BY_HOP.has(k) && !['authorization', 'cookie', 'host', 'accept-encoding'].includes(k)) headers[k] = v;
        }
        if (token) headers.authorization = 'Bearer ' + token;
        const upstream = await fetch(target, { headers });
        const body = Buffer.from(await upstream.arrayBuffer());
        state.proxied.push({ path: url.pathname, target: target.href, status: upstream.status, app: appHeader, project });
        // wavegate's answer headers come back whole (ETag, Wavegate-Now, the content type): the
        // reverse proxy copies a response's headers but the hop-by-hop ones. The body is sent as
        // read, so its own length, not upstream's encoding.
        const out = {};
        upstream.headers.forEach((v, k) => {
          if (!HOP_BY_HOP.has(k) && k !== 'content-length' && k !== 'content-encoding') out[k] = v;
        });
        res.writeHead(upstream.status, out);
        return res.end(body);
      }
      return send(404, 'not found');
    } catch (e) {
      return send(502, 'harness proxy error: ' + e.message);
    }
  });
  await new Promise(r => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}/`, state,
    close: () => new Promise(r => { server.close(r); server.closeAllConnections(); }),
  };
}
