// A tab's visibility the tests set by hand (see Visibility in
// src/stream.ts).
import type { Visibility } from "../src/stream";

export class FakeVisibility implements Visibility {
  private out = false;
  private readonly listeners = new Set<() => void>();

  hidden(): boolean {
    return this.out;
  }

  onChange(f: () => void): () => void {
    this.listeners.add(f);
    return () => this.listeners.delete(f);
  }

  // set puts the tab out of sight (true) or in sight (false).
  set(hidden: boolean): void {
    this.out = hidden;
    for (const f of [...this.listeners]) {
      f();
    }
  }
}
