// A tab's visibility the tests set by hand (see Visibility in
// src/stream.ts).
import type { Visibility } from "../src/stream";

export class FakeVisibility implements Visibility {
  private out = false;
  private gone = false;
  private readonly listeners = new Set<() => void>();

  hidden(): boolean {
    return this.out || this.gone;
  }

  left(): boolean {
    return this.gone;
  }

  onChange(f: () => void): () => void {
    this.listeners.add(f);
    return () => this.listeners.delete(f);
  }

  // set puts the tab out of sight (true) or in sight (false).
  set(hidden: boolean): void {
    this.out = hidden;
    this.tell();
  }

  // leave leaves the page (true: pagehide), or shows it again from the
  // back/forward cache (false: pageshow).
  leave(left: boolean): void {
    this.gone = left;
    this.tell();
  }

  private tell(): void {
    for (const f of [...this.listeners]) {
      f();
    }
  }
}
