// The package as a project of its own sees it: small consumers, with the
// package linked into their node_modules as `npm install <checkout>`
// links it, compiled with tsc under each moduleResolution a project may
// have. Nothing is downloaded: tsc and @types/node are this package's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, mkdir, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

/** The package's directory, from dist/test. */
const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** What a Node program imports: the Node entry, Worker included. */
const nodeProgram = `
import { Worker, createClient, type Job, type NodeClientOptions } from "@jobwatch/client";
const options: NodeClientOptions = { url: "http://127.0.0.1:8080", httpVersion: "1.1" };
const client = createClient(options);
const worker = new Worker({ url: "http://127.0.0.1:8080", handlers: { resize: (job: Job) => job.id } });
export { client, worker };
`;

/** What a page imports: the browser entry, whose createClient may take nothing (the page's origin). */
const browserProgram = `
import { createClient } from "@jobwatch/client";
export const client = createClient();
`;

/** The entries by name, which every resolution finds. */
const namedEntries = `
import { Worker } from "@jobwatch/client/node";
import { createClient } from "@jobwatch/client/browser";
export const both = [Worker, createClient()];
`;

const consumers: { name: string; compilerOptions: Record<string, unknown>; program: string }[] = [
  { name: "nodenext, a Node program", compilerOptions: { module: "nodenext", moduleResolution: "nodenext" }, program: nodeProgram },
  {
    name: 'bundler with customConditions ["node"], a Node program',
    compilerOptions: { module: "esnext", moduleResolution: "bundler", customConditions: ["node"] },
    program: nodeProgram,
  },
  { name: "bundler, a page", compilerOptions: { module: "esnext", moduleResolution: "bundler" }, program: browserProgram },
  { name: "bundler, the entries by name", compilerOptions: { module: "esnext", moduleResolution: "bundler" }, program: namedEntries },
  { name: "node10, a Node program", compilerOptions: { module: "es2022", moduleResolution: "node10" }, program: nodeProgram },
  { name: "node10, the entries by name", compilerOptions: { module: "es2022", moduleResolution: "node10" }, program: namedEntries },
];

for (const c of consumers) {
  test(`a project compiled with moduleResolution ${c.name} finds the package's types`, async () => {
    const dir = await mkdtemp(join(tmpdir(), "jobwatch-consumer-"));
    try {
      await mkdir(join(dir, "node_modules", "@jobwatch"), { recursive: true });
      await symlink(pkg, join(dir, "node_modules", "@jobwatch", "client"), "dir");
      // The project's own @types/node, as `npm install -D @types/node` gives it.
      await symlink(join(pkg, "node_modules", "@types"), join(dir, "node_modules", "@types"), "dir");
      await writeFile(join(dir, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
      await writeFile(
        join(dir, "tsconfig.json"),
        JSON.stringify({
          compilerOptions: {
            target: "es2022",
            lib: ["es2022", "dom"],
            types: ["node"],
            strict: true,
            exactOptionalPropertyTypes: true,
            skipLibCheck: true,
            noEmit: true,
            ignoreDeprecations: "5.0",
            ...c.compilerOptions,
          },
          files: ["main.ts"],
        }),
      );
      await writeFile(join(dir, "main.ts"), c.program);
      const tsc = join(pkg, "node_modules", "typescript", "bin", "tsc");
      const compiled = await promisify(execFile)(process.execPath, [tsc, "-p", dir]).catch((err: { stdout?: string; stderr?: string }) => err);
      assert.equal(`${compiled.stdout ?? ""}${compiled.stderr ?? ""}`, "", "tsc found errors");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
}
