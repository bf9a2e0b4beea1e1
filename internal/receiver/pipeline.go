package receiver

import (
	"sync"
	"sync/atomic"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sample"
)

// estPipeline estimates one sender's final intervals off its match loop,
// up to conc at a time, and publishes them in the order they were final:
// the results file and the API see the same sequence as with one
// estimation at a time. The match loop keeps reading frames and sealed
// intervals while an interval is estimated, and a backlog (a replay's
// last intervals, a reconnect's resends) spreads over conc cores.
type estPipeline struct {
	sem     chan struct{}
	order   chan *estJob
	run     func(*estJob)
	stopped sync.WaitGroup
	running atomic.Int32 // estimations in flight
}

type estJob struct {
	sender string
	mt     *interval.Matched
	clk    Clock
	pieces *sample.Pieces
	iv     *results.Interval
	err    error
	done   chan struct{}
	// running is how many estimations were in flight when this one
	// started, itself included: it shares the cores with them.
	running int
}

// newEstPipeline starts the publisher; estimate runs in a goroutine per
// interval, publish in the publisher's, one interval at a time.
func newEstPipeline(conc int, estimate func(*estJob) (*results.Interval, error), publish func(*estJob)) *estPipeline {
	conc = max(1, conc)
	p := &estPipeline{sem: make(chan struct{}, conc), order: make(chan *estJob, conc)}
	p.stopped.Add(1)
	go func() {
		defer p.stopped.Done()
		for j := range p.order {
			<-j.done
			publish(j)
		}
	}()
	p.run = func(j *estJob) {
		j.running = int(p.running.Add(1))
		j.iv, j.err = estimate(j)
		p.running.Add(-1)
		<-p.sem
		close(j.done)
	}
	return p
}

// add queues a final interval; it blocks while conc estimations run.
func (p *estPipeline) add(j *estJob) {
	j.done = make(chan struct{})
	p.sem <- struct{}{}
	go p.run(j)
	p.order <- j
}

// close waits until everything added is published.
func (p *estPipeline) close() {
	close(p.order)
	p.stopped.Wait()
}
