// Package client is the Go library for jobwatch: a Client over the
// generated Connect clients that waits for jobs (WaitForJob, and
// WaitForJobs for all or any of many) and watches them (Watch, and
// WatchJobs for a tenant's or a batch's jobs) without a poll loop,
// surviving disconnects and server restarts; SubmitJobs to create many
// jobs in one commit; and a Worker that runs handler functions for
// claimed jobs, either against a remote server or an embedded engine.
//
// Long calls (WaitJob, the WaitJobs of WaitForJobs, WatchJob, WatchJobs,
// WatchJobLogs, ClaimJob, and a SubmitJob that asks to wait) travel on
// their own HTTP transport with its own connection
// pool, so any number of parked waits can never hold up a Submit, Get or
// Cancel. Neither transport imposes an overall deadline: a long call ends
// when the server's cap, the caller's context or the connection does.
//
// A Client may be given several servers of one deployment (replicas on
// one PostgreSQL database) as a comma-separated list, such as
// "http://a:8080,http://b:8080". Its calls go to one address at a time
// and move to the next when a call finds that one gone: the connection
// refused, reset or lost before the answer (a parked call or a stream
// included, so a replica killed under a WaitJob ends it at once), or a
// 503. The failed call is not sent again: the retry loops (WaitForJob,
// WaitForJobs, Watch, WatchJobs, WatchLogs, and a Worker's claims,
// heartbeats, logs and reports) retry it, on the next server; any other
// call is the caller's to retry, knowing that a call whose answer was
// lost (a Submit) may have been carried out.
//
// The package must never hide a job's outcome: WaitForJob, WaitForJobs
// and Watch retry, backing off, only what is transient: unavailable, a
// dropped or reset connection, aborted, a proxy's deadline_exceeded that
// the caller's own context did not cause, and resource_exhausted, which
// a server that parks as many calls as it may answers (or, at once, its
// Jobwatch-Parked-Calls: full answer). They return every other answer
// the server gives about the jobs.
package client
