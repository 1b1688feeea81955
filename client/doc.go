// Package client is the Go library for jobwatch: a Client over the
// generated Connect clients that waits for jobs (WaitForJob, and
// WaitForJobs for all or any of many) and watches them (Watch, and
// WatchJobs for a tenant's or a batch's jobs) without a poll loop,
// surviving disconnects and server restarts; SubmitJobs to create many
// jobs in one commit; and a Worker that runs handler functions for
// claimed jobs, either against a remote server or an embedded engine.
//
// Long calls (WaitJob, the WaitJobs of WaitForJobs, WatchJob, WatchJobs,
// ClaimJob) travel on their own HTTP transport with its own connection
// pool, so any number of parked waits can never hold up a Submit, Get or
// Cancel. Neither transport imposes an overall deadline: a long call ends
// when the server's cap, the caller's context or the connection does.
//
// The package must never hide a job's outcome: WaitForJob, WaitForJobs
// and Watch retry only what is transient (unavailable, a dropped
// connection) and return every answer the server gives about the jobs.
package client
