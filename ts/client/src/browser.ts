// The entry point for browsers: createClient over connect-web (fetch).
// Nothing reached from here may use a Node API (tsconfig.browser.json
// checks it without Node's types). The jobwatch page (web/) bundles this
// entry from its source, with web's own packages and web/src/gen (see
// web/build.mjs): a package imported from here must be a dependency of
// web/ too.
import { createConnectTransport } from "@connectrpc/connect-web";
import { checkURL, JobwatchClient, recursionLimit, type ClientOptions } from "./client.js";

export * from "./common.js";

/**
 * createClient returns a client of the server at url (by default the
 * origin that served the page) over one Connect transport on fetch, or
 * over the transports given. The browser pools the connections: over
 * HTTP/1.1 it keeps about six per origin, so a page should follow many
 * jobs with one watchJobs rather than a watchJob each.
 */
export function createClient(options: ClientOptions = {}): JobwatchClient {
  if (options.transport !== undefined) {
    return new JobwatchClient({ short: options.transport, long: options.longTransport ?? options.transport }, options);
  }
  const url = checkURL(options.url ?? globalThis.location?.origin);
  const transport = createConnectTransport({
    baseUrl: url,
    useBinaryFormat: true,
    jsonOptions: { recursionLimit },
    binaryOptions: { recursionLimit },
  });
  return new JobwatchClient({ short: transport, long: options.longTransport ?? transport }, options);
}
