// Package bench is the "jobwatch bench" command: it measures jobwatch
// against a floor (internal/benchfloor: connect-go handlers over an
// in-memory map, the cost of the wire alone) and, with --before, another
// jobwatch binary, and prints one table (rows: figures, columns: servers)
// or the same figures as JSON.
//
// Each server is a process of its own, started afresh for each scenario
// from the jobwatch binary Run runs in (or --binary): "serve" on a fresh
// SQLite file, or on a schema of its own in the --postgres database, and
// "bench --serve-floor ADDR" for the floor. The load comes from this
// process over the Go client; the figures are what the client sees (jobs
// completed per second, how long after the worker's CompleteJob a parked
// WaitJob, WatchJob or GetJob poll has the finished job, short-call
// latency), read with the server's /metrics (parked-call gauges,
// goroutines) and /proc (RSS and CPU, so the parked scenario needs
// Linux). throughput-inproc, and the burndown scenario's in-process runs,
// drive an engine and store inside this process instead. The usage text
// (benchUsage) and docs/BENCHMARKS.md say what each figure is.
//
// The numbers are the machine's: nothing here passes or fails on a
// timing. In a --postgres database it touches nothing but the schemas it
// creates and drops (jobwatch_bench_ and random hex).
package bench
