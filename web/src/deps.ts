// What the page shows of a job's dependencies (SubmitJobRequest.after):
// the jobs it runs after, each with its state when the page has that
// job, what a dependency that fails does to it, and why a job was
// cancelled by one. web/test/deps.test.ts tests it in Node.
import { DependencyFailure, JobState, type Job } from "./gen/jobwatch/v1/jobwatch_pb";
import { stateName } from "./model";

// maxDependenciesShown bounds the links the detail draws: a job may run
// after 1,000 others (a fan-in after a batch); the rest are counted, and
// `jobwatch get` lists them all.
export const maxDependenciesShown = 50;

// dependencyFailedType is the error type of a job the server cancelled
// because a job it runs after ended other than SUCCEEDED.
export const dependencyFailedType = "DependencyFailed";

// Dependency is one job of after as the detail lists it: its id, and its
// kind and state ("" for each while the page does not have the job: it
// is older than the list, or in another batch than the one shown).
export interface Dependency {
  id: string;
  kind: string;
  state: string;
}

export interface Dependencies {
  shown: Dependency[];
  // How many more the job runs after than shown.
  more: number;
}

// dependencies are the jobs job runs after, in the order submitted, at
// most max of them, each with what lookup (the page's book) knows of it.
export function dependencies(
  job: Pick<Job, "after">,
  lookup: (id: string) => Pick<Job, "kind" | "state"> | undefined,
  max = maxDependenciesShown,
): Dependencies {
  const shown = job.after.slice(0, max).map((id) => {
    const known = lookup(id);
    return { id, kind: known?.kind ?? "", state: known === undefined ? "" : stateName(known.state) };
  });
  return { shown, more: Math.max(0, job.after.length - shown.length) };
}

// onDependencyFailureText is what a failed dependency does to the job, in
// the words of `jobwatch submit --on-dependency-failure`: "cancel" or
// "run"; "" for a job that runs after none.
export function onDependencyFailureText(f: DependencyFailure): string {
  switch (f) {
    case DependencyFailure.CANCEL:
      return "cancel";
    case DependencyFailure.RUN:
      return "run";
  }
  return "";
}

// waitingStep is the step text of a WAITING job, which no worker has
// given one yet: "after 1 job", "after 3 jobs".
export function waitingStep(job: Pick<Job, "state" | "after">): string {
  if (job.state !== JobState.WAITING || job.after.length === 0) {
    return "";
  }
  return job.after.length === 1 ? "after 1 job" : `after ${job.after.length.toLocaleString("en-US")} jobs`;
}

// dependencyFailed reports whether job was cancelled by a dependency
// that did not succeed (its error names that job and how it ended).
export function dependencyFailed(job: Pick<Job, "state" | "error">): boolean {
  return job.state === JobState.CANCELLED && job.error?.type === dependencyFailedType;
}
