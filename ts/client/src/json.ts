// What a payload or a result may hold: JSON that google.protobuf.Value
// carries as it was given. Two JavaScript values would be changed on the
// way without a word: JSON.stringify writes NaN and ±Infinity as null,
// and the binary encoding writes a string holding half of a UTF-16
// surrogate pair alone as U+FFFD. Both are refused instead, naming where
// they are, as the server refuses JSON text with an escaped lone half.

/**
 * loneSurrogate finds half of a UTF-16 surrogate pair without its other
 * half: a high one not followed by a low one, or a low one not preceded
 * by a high one.
 */
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * jsonText is JSON.stringify(value), or a TypeError saying where value
 * holds what JSON.stringify or the wire would change: a number that is
 * not finite, or a string or object key with a lone surrogate. root names
 * value in the message ("payload", "result"), and the place within it
 * follows as the server names fields: result.rows[3].name.
 */
export function jsonText(value: unknown, root: string): string | undefined {
  // The path of each object or array being written, for its members.
  const paths = new WeakMap<object, string>();
  return JSON.stringify(value, function (this: object, key: string, v: unknown): unknown {
    const parent = paths.get(this);
    let path = root;
    if (parent !== undefined) {
      path = Array.isArray(this) ? `${parent}[${key}]` : `${parent}.${key}`;
      if (!Array.isArray(this)) {
        refuseLone(key, path, "an object key");
      }
    }
    if (typeof v === "number" && !Number.isFinite(v)) {
      throw new TypeError(`${path}: ${String(v)} is not a number JSON can hold`);
    }
    if (typeof v === "string") {
      refuseLone(v, path, "a string");
    }
    if (typeof v === "object" && v !== null) {
      paths.set(v, path);
    }
    return v;
  });
}

function refuseLone(s: string, path: string, what: string): void {
  const at = loneSurrogate.exec(s);
  if (at !== null) {
    const unit = s.charCodeAt(at.index).toString(16).toUpperCase();
    throw new TypeError(`${path}: ${what} holds half of a UTF-16 surrogate pair (U+${unit}) without its other half, which is not text`);
  }
}
