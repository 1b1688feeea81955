// Tests of the page's formatting of times for people.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { aboutJob, breaksAnywhere, clockTime, jsonText, longWord } from "../src/format";

test("a moment of today shows as a clock time, one of another day with its date", () => {
  const now = new Date(2026, 11, 5, 9, 30, 0);
  const today = clockTime(new Date(2026, 11, 5, 11, 40, 31), now);
  assert.equal(today, new Date(2026, 11, 5, 11, 40, 31).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" }));
  const later = clockTime(new Date(2026, 11, 7, 11, 40, 31), now);
  assert.ok(later.endsWith(today) && later.length > today.length && later.includes("7"), `two days on: ${later}`);
  const lastYear = clockTime(new Date(2025, 11, 7, 11, 40, 31), now);
  assert.ok(lastYear.includes("2025"), `a year before: ${lastYear}`);
});

test("a server's message about a job, in a sentence that names the job, names it once", () => {
  assert.equal(aboutJob("j_06h44abc", "j_06h44abc: job not found"), "job not found");
  assert.equal(aboutJob("j_06h44abc", "this token may not read tenant acme"), "this token may not read tenant acme");
  assert.equal(aboutJob("j_06h44abc", "j_06h44xyz: job not found"), "j_06h44xyz: job not found", "another job's id was taken off");
});

test("a payload's characters that reorder a line show as escapes, and the JSON stays the value", () => {
  const value = { file: "invoice\u202egnp.exe", note: "a\u2066b\u2069\u200f\ufeff", plain: "ünïcode ✓" };
  const text = jsonText(fromJson(ValueSchema, value));
  assert.ok(!/[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ufeff]/.test(text), `an invisible character shows: ${text}`);
  assert.ok(text.includes(String.raw`"invoice\u202egnp.exe"`), text);
  assert.deepEqual(JSON.parse(text), value, "the JSON shown is not the value");
});

test("a name breaks anywhere only where a word of it is too long to keep whole", () => {
  assert.equal(breaksAnywhere("thumbnails-and-previews"), false, "a name breaks after its hyphens");
  assert.equal(breaksAnywhere("x".repeat(longWord)), false);
  assert.equal(breaksAnywhere("x".repeat(longWord + 1)), true);
  assert.equal(breaksAnywhere("q".repeat(128)), true, "the longest queue name the server takes");
  assert.equal(breaksAnywhere(`mail-${"x".repeat(longWord + 1)}-out`), true, "one long word is enough");
  assert.equal(breaksAnywhere("eu/west:mail@ops"), false);
  assert.equal(breaksAnywhere(""), false);
});
