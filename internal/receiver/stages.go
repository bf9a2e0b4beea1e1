package receiver

import (
	"context"
	"sync"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/tap"
)

// runStages starts, in g, the stages an interval goes through after
// capture and the gRPC streams (docs/DESIGN.md draws them):
//
//	per sender entry s:  matchStage -> est.work -> est.runWorker (x estConc)
//	                                -> est.order -> est.runEmitter (publishJob)
//	all entries:         r.toPublish -> publishStage
//
// Each stage ends when its input is closed and drained: the match stage
// at a stop request (after the capture workers closed s.sealed) or, in a
// replay, once everything is final; it closes its estimate stage's
// input; the emitters end once it is drained, and the last one to end
// closes r.toPublish. In a replay the publish stage then stops the gRPC
// server and returns tap.ErrDone, which ends Run's other goroutines.
func (r *Receiver) runStages(ctx context.Context, g *errgroup.Group, srv *grpc.Server, captureWorkers int) {
	r.toPublish = make(chan *results.Interval)
	var emitters sync.WaitGroup
	for _, s := range r.senders {
		est := newEstStage(r.estConc, r.estimateJob)
		g.Go(func() error { return r.matchStage(ctx, s, est, captureWorkers) })
		for range est.workers {
			g.Go(func() error { est.runWorker(); return nil })
		}
		emitters.Add(1)
		g.Go(func() error {
			defer emitters.Done()
			est.runEmitter(func(j *estJob) { r.publishJob(s, j) })
			r.releaseHeld(s)
			return nil
		})
	}
	g.Go(func() error {
		emitters.Wait()
		close(r.toPublish)
		return nil
	})
	g.Go(func() error {
		r.publishStage(r.toPublish)
		if !r.opt.Replay {
			return nil
		}
		// Every interval is published: a replay is done.
		srv.GracefulStop()
		return tap.ErrDone
	})
}
