package server

import (
	"context"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// What a WatchJobs stream holds while it sends is bounded by the send
// budget, as a WatchJobLogs stream's is (logs.go): the engine reads the
// tenant's changed jobs a page at a time, each page only once the budget
// has admitted the most a page and its messages can hold, and keeps of
// that what the page turns out to hold until its last batch is written.
// A burst of changes wakes every stream of the tenant at once; without
// the budget each would read a page of up to jobs.MaxPageSize jobs and
// hold it while its client read the batches before it, so a tenant's
// 2,500 streams and a few SubmitJobs of 1,000 held gigabytes. With it,
// the streams past the tenant's share of the budget wait before they
// read, holding nothing, and read the latest changes when their turn
// comes.
const (
	// watchJobHeldBytes is what a job read holds beside the text and
	// JSON that jobtype.Job.Size counts, until its page is sent: its
	// jobtype.Job (520 bytes, twice while the page's slice grows), its
	// strings as the store allocates them one by one, its jobwatchv1.Job
	// (360) and the Timestamps of that (six of 48 at most). A heap
	// profile of 1,000 streams put it near 2 KiB.
	watchJobHeldBytes = 2048
	// watchPageHeldBytes is the most a page read holds, and
	// watchMessageWireBytes the most one of its batches' encodings takes
	// (a job's Size is about what it takes in an answer).
	watchPageHeldBytes    = jobs.MaxPageBytes + jobs.MaxPageSize*watchJobHeldBytes
	watchMessageWireBytes = jobs.MaxPageBytes
)

// watchPages is the jobs.PageBudget of one WatchJobs stream.
type watchPages struct {
	stream *admittedStream
	took   int64 // admitted for the page being read or sent
}

func (p *watchPages) Admit(context.Context) error {
	took, err := p.stream.admitRead(watchPageHeldBytes + p.stream.encodings()*watchMessageWireBytes)
	p.took = took
	return err
}

// Read keeps of what was admitted what the page holds: its jobs, and one
// message of all of them encoded (no batch is larger).
func (p *watchPages) Read(page []jobtype.Job) {
	var held, wire int64
	for i := range page {
		size := int64(page[i].Size())
		held += size + watchJobHeldBytes
		wire += size
	}
	if need := held + p.stream.encodings()*wire; need < p.took {
		p.stream.give(p.took - need)
		p.took = need
	}
}

func (p *watchPages) Done() {
	p.stream.give(p.took)
	p.took = 0
}
