// The entry point for Node: createClient over connect-node, and the Worker.
import { JobwatchClient } from "./client.js";
import { nodeTransports, type NodeClientOptions } from "./node-transport.js";

export * from "./common.js";
export { nodeTransport, type NodeClientOptions } from "./node-transport.js";
export {
  HandlerError,
  JobCancelledError,
  LeaseLostError,
  Worker,
  WorkerStoppedError,
  type Handler,
  type HandlerErrorOptions,
  type Progress,
  type WorkerLogger,
  type WorkerOptions,
} from "./worker.js";

/**
 * createClient returns a client of the server at url, over two HTTP/2
 * connection pools of its own (one for short calls, one for parked waits,
 * watches and claims), or over the transports given.
 *
 *     const client = createClient({ url: "http://127.0.0.1:8080", token });
 *     const job = await client.submitJob({ kind: "resize", payload: { w: 64 } });
 *     const done = await client.waitForJob(job.id);
 */
export function createClient(options: NodeClientOptions): JobwatchClient {
  return new JobwatchClient(nodeTransports(options), options);
}
