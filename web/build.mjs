// Builds web/dist: index.html, one JS file and one CSS file, their names
// carrying a hash of their content so the server may cache them forever.
// The output depends only on the sources and the locked packages: CI
// rebuilds it and fails if the committed dist differs.
import { build } from "esbuild";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(root, "dist");

await rm(dist, { recursive: true, force: true });
await mkdir(dist);

const result = await build({
  absWorkingDir: root,
  entryPoints: { app: "src/main.ts" },
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2022", "chrome110", "firefox115", "safari16"],
  entryNames: "[name]-[hash]",
  outdir: dist,
  legalComments: "none",
  charset: "utf8",
  metafile: true,
  logLevel: "warning",
});

const names = {};
for (const out of Object.keys(result.metafile.outputs)) {
  const base = path.basename(out);
  names[base.replace(/-[A-Z0-9]+(\.\w+)$/, "$1")] = base;
}
let html = await readFile(path.join(root, "src/index.html"), "utf8");
html = html.replace(/\{\{(app\.(?:js|css))\}\}/g, (_, name) => {
  if (!names[name]) {
    throw new Error(`build produced no ${name}`);
  }
  return names[name];
});
await writeFile(path.join(dist, "index.html"), html);
for (const [name, file] of Object.entries(names)) {
  console.log(`dist/${file}  (${name})`);
}
