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

// The page talks to the server through the TypeScript client library
// (@jobwatch/client, ts/client), bundled from its source: web/tsconfig.json
// maps the name to ts/client/src/browser.ts, so `npm ci && npm run build`
// here needs no build of ts/client first. The library's own imports
// resolve as the page's do: the generated API to src/gen (the one copy
// `make generate` writes; ts/client's build copies it to its src/gen) and
// the packages to web/node_modules, whether or not ts/client has a
// node_modules or a src/gen of its own, so the bundle holds one copy of
// each and the same bytes on every machine. A package the library's
// browser entry comes to import must be a dependency here too (and named
// in tsconfig.json's paths, for tsc).
const library = path.resolve(root, "..", "ts", "client", "src");
const within = (dir, file) => {
  const rel = path.relative(dir, file);
  return rel !== "" && !rel.startsWith("..") && !path.isAbsolute(rel);
};
const libraryAsPage = {
  name: "jobwatch-client-as-page",
  setup(b) {
    b.onResolve({ filter: /^[^./]|\/gen\// }, async (args) => {
      if (!within(library, args.importer)) {
        return undefined;
      }
      if (args.path.startsWith(".")) {
        const gen = path.join(library, "gen");
        const file = path.resolve(args.resolveDir, args.path);
        if (!within(gen, file)) {
          return undefined;
        }
        return { path: path.join(root, "src", "gen", path.relative(gen, file).replace(/\.js$/, ".ts")) };
      }
      const r = await b.resolve(args.path, { kind: args.kind, resolveDir: path.join(root, "src") });
      return r.errors.length > 0 ? { errors: r.errors } : { path: r.path, sideEffects: r.sideEffects };
    });
  },
};

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
  plugins: [libraryAsPage],
});

// What the bundle is made of comes from web/src, ts/client/src (not its
// gen) and web/node_modules, and nowhere else.
for (const input of Object.keys(result.metafile.inputs)) {
  const file = path.resolve(root, input);
  const ok =
    within(path.join(root, "src"), file) ||
    within(path.join(root, "node_modules"), file) ||
    (within(library, file) && !within(path.join(library, "gen"), file));
  if (!ok) {
    throw new Error(`build: ${input} is not the page's: the library's imports must resolve as the page's own (see libraryAsPage)`);
  }
}

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
