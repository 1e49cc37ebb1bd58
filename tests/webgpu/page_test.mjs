// Opens a bundle's index.html in headless Chromium (playwright-core, Debian's chromium,
// WebGPU on its SwiftShader adapter), lets it train, and writes what the page reports.
//   node page_test.mjs BUNDLE_DIR OUT.json SCREENSHOT.png STEPS
// The bundle is served by a static file server on 127.0.0.1 (WebGPU needs a secure
// context; localhost is one). Output: {losses, sample, sample_ids, error, about, console}.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [dir, out, shot, steps = '8'] = process.argv.slice(2);
const types = { '.html': 'text/html', '.mjs': 'text/javascript', '.json': 'application/json', '.wgsl': 'text/plain',
                '.txt': 'text/plain' };
const server = http.createServer((req, res) => {
  const file = path.join(dir, decodeURIComponent(new URL(req.url, 'http://x').pathname));
  if (!file.startsWith(path.resolve(dir)) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
    res.writeHead(404);
    res.end();
    return;
  }
  res.writeHead(200, { 'Content-Type': types[path.extname(file)] || 'application/octet-stream' });
  res.end(fs.readFileSync(file));
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
let browser;
try {
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--enable-unsafe-webgpu'] });
  const page = await browser.newPage({ viewport: { width: 900, height: 760 } });
  const logs = [];
  page.on('console', (m) => logs.push(m.text()));
  page.on('pageerror', (e) => logs.push(String(e)));
  await page.goto(`http://127.0.0.1:${server.address().port}/index.html?steps=${steps}&sample=40`);
  await page.waitForFunction(() => window.alkDone === true, null, { timeout: 240000 });
  const result = await page.evaluate(() => ({ losses: window.alkLosses, sample: window.alkSample || '',
                                              sample_ids: window.alkSampleIds || [],
                                              error: window.alkError || '', about: document.getElementById('about').textContent }));
  await page.screenshot({ path: shot, fullPage: true });
  result.console = logs;
  fs.writeFileSync(out, JSON.stringify(result));
  await browser.close();
  server.close();
  process.exit(0);
} catch (e) {
  console.error(e && e.stack ? e.stack : String(e));
  if (browser) await browser.close();
  server.close();
  process.exit(1);
}
