// Small formatting helpers: ages, durations and JSON values for people.
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema, type Duration, type Value } from "@bufbuild/protobuf/wkt";
import { invisible } from "./logs";

// longWord is the most characters a word of a name (a queue's, a
// schedule's) may have and still be kept whole in a narrow column: on a
// phone the queue and schedule tables fit their panels with a word of
// that length, and a name breaks only between words (after a hyphen).
export const longWord = 16;

// breaksAnywhere reports whether name has a word (a run between spaces or
// hyphens, where a line may break) longer than longWord: kept whole, it
// would stretch its table past the window (a queue named with 128
// characters and no hyphen made a phone's table 1,273 px wide), so such
// a name breaks anywhere, as text in the details does.
export function breaksAnywhere(name: string): boolean {
  return name.split(/[\s-]+/).some((word) => word.length > longWord);
}

export function age(fromMs: number, nowMs: number): string {
  return span(Math.max(0, nowMs - fromMs) / 1000);
}

export function durationText(d: Duration | undefined): string {
  if (d === undefined) {
    return "—";
  }
  return span(Number(d.seconds) + d.nanos / 1e9);
}

// periodText writes a configured period as the configuration file would:
// "20s", "10m", "1h", "1h 30m", without the zero parts an age shows.
export function periodText(d: Duration | undefined): string {
  if (d === undefined) {
    return "—";
  }
  let rest = Math.round(Number(d.seconds) + d.nanos / 1e9);
  const parts: string[] = [];
  for (const [unit, size] of [["h", 3600], ["m", 60], ["s", 1]] as const) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)}${unit}`);
      rest %= size;
    }
  }
  return parts.length === 0 ? "0s" : parts.join(" ");
}

function span(seconds: number): string {
  if (seconds < 1) {
    return "now";
  }
  if (seconds < 60) {
    return `${Math.floor(seconds)}s`;
  }
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) {
    return `${minutes}m ${Math.floor(seconds % 60)}s`;
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 48) {
    return `${hours}h ${minutes % 60}m`;
  }
  return `${Math.floor(hours / 24)}d`;
}

// clockTime is a moment as the reader's clock shows it, with its date
// when that is not today (a job scheduled for another day, an old job's
// history).
export function clockTime(d: Date, now: Date = new Date()): string {
  const time = d.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  if (d.toDateString() === now.toDateString()) {
    return time;
  }
  const sameYear = d.getFullYear() === now.getFullYear();
  const date = d.toLocaleDateString(undefined, { month: "short", day: "numeric", ...(sameYear ? {} : { year: "numeric" }) });
  return `${date}, ${time}`;
}

// jsonText is v as indented JSON, the characters that would reorder or
// split its lines (invisible: a right-to-left override makes "exe.png"
// of "gnp.exe") written as escapes (\u202e), as JSON writes control
// characters: the text stays the value, and shows as it is.
export function jsonText(v: Value | undefined): string {
  if (v === undefined) {
    return "";
  }
  const text = JSON.stringify(toJson(ValueSchema, v), null, 2);
  let out = "";
  for (const ch of text) {
    const c = ch.codePointAt(0)!;
    out += invisible(c) ? `\\u${c.toString(16).padStart(4, "0")}` : ch;
  }
  return out;
}

// aboutJob is a server's message about job id for a sentence that names
// the job already ("Job j_…: job not found"): without the id the server
// starts it with ("j_…: job not found"), so the id is said once.
export function aboutJob(id: string, message: string): string {
  const named = `${id}: `;
  return id !== "" && message.startsWith(named) ? message.slice(named.length) : message;
}
