// Copies the generated TypeScript of the API (protoc-gen-es output that
// `make generate` writes to web/src/gen from proto/) into src/gen, so this
// package compiles it with its own dependencies. src/gen is not committed:
// web/src/gen stays the one generated copy, and every build takes it as it
// is now.
import { copyFileSync, mkdirSync, readFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const name = join("jobwatch", "v1", "jobwatch_pb.ts");
const from = join(here, "..", "..", "..", "web", "src", "gen", name);
const to = join(here, "..", "src", "gen", name);

if (!existsSync(from)) {
  console.error(`copy-gen: ${from} is missing: ts/client builds only inside a whole jobwatch checkout, whose web/src/gen it copies (committed; make generate at the repository's root remakes it)`);
  process.exit(1);
}
// An unchanged copy keeps its time, so tsc and editors see no change.
if (!existsSync(to) || !readFileSync(to).equals(readFileSync(from))) {
  mkdirSync(dirname(to), { recursive: true });
  copyFileSync(from, to);
}
