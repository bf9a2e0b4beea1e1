package receiver

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/tap"
)

// runStages starts, in g, the stages an interval goes through
// (docs/DESIGN.md draws them):
//
//	per capture worker:  captureLoop -> e.match.sealed
//	per sender entry e:  e.match.run -> e.est (runWorker x estConc)
//	                                 -> e.est.runEmitter (e.emit.publishJob)
//	all entries:         r.pub.in -> r.pub.run
//
// Each stage ends when its input is closed and drained: the capture
// workers at a stop request or at the end of their files, after which
// each entry's sealed channel is closed; the match stage at a stop
// request or, when the policy stops when drained, once everything is
// final; it closes its estimate stage's input; the emitters end once it
// is drained, and the last one to end closes the publisher's input. When
// the policy stops when drained, the publisher's end then stops the gRPC
// server and returns tap.ErrDone, which ends Run's other goroutines.
func (r *Receiver) runStages(ctx context.Context, g *errgroup.Group, srv *grpc.Server, readers []*capture.Reader) {
	start := r.opt.CaptureStart
	if start == 0 {
		start = time.Now().UnixNano()
	}
	var emitters sync.WaitGroup
	for _, e := range r.entries {
		g.Go(func() error { return e.match.run(ctx, e.emit.plan, len(readers)) })
		for range e.est.workers {
			g.Go(func() error { e.est.runWorker(); return nil })
		}
		emitters.Add(1)
		g.Go(func() error {
			defer emitters.Done()
			e.est.runEmitter(e.emit.publishJob)
			e.emit.releaseHeld()
			return nil
		})
	}
	g.Go(func() error {
		emitters.Wait()
		close(r.pub.in)
		return nil
	})
	g.Go(func() error {
		r.pub.run()
		if !r.pol.stopWhenDrained {
			return nil
		}
		// Every interval is published: the run is done.
		srv.GracefulStop()
		return tap.ErrDone
	})
	var workers sync.WaitGroup
	for i, rd := range readers {
		workers.Add(1)
		g.Go(func() error { defer workers.Done(); return r.captureLoop(ctx, i, rd, start) })
	}
	g.Go(func() error {
		workers.Wait()
		for _, e := range r.entries {
			e.emit.plan.Close()
			close(e.match.sealed)
		}
		return nil
	})
}
