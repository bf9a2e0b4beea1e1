package receiver

import (
	"fmt"

	"github.com/lds-net/lds/internal/jsonl"
	"github.com/lds-net/lds/internal/results"
)

// openLost opens receiver.lost_file (if set) with the results file's
// rotation, durability and error counting; the returned function closes it.
func (p *publisher) openLost() (func(), error) {
	rc := p.cfg
	if rc.LostFile == "" {
		return func() {}, nil
	}
	opt := jsonl.Options{Lost: true, MaxBytes: rc.ResultsMaxBytes, MaxAge: rc.ResultsMaxAge, Keep: rc.ResultsKeep, Fsync: rc.ResultsFsync,
		OnError: p.metrics.ResultsWriteError}
	if !p.rotate {
		opt.MaxBytes, opt.MaxAge, opt.Fsync = 0, 0, false
	}
	w, err := jsonl.Open(rc.LostFile, opt)
	if err != nil {
		return nil, fmt.Errorf("receiver.lost_file: %w", err)
	}
	p.lost = w
	return func() {
		if err := w.Close(); err != nil {
			p.log.Error("closing the lost-packet file: its last records may be lost", "file", rc.LostFile, "err", err)
		}
	}, nil
}

// reopenLost is SIGHUP for the lost-packet file.
func (p *publisher) reopenLost() {
	if p.lost == nil {
		return
	}
	if err := p.lost.Reopen(); err != nil {
		p.log.Error("reopening the lost-packet file; retried at the next interval", "err", err)
		return
	}
	p.log.Info("lost-packet file reopened", "path", p.cfg.LostFile)
}

// publishLost writes a complete interval's lost packets and counts them,
// and sets the link's reordered ratio.
func (p *publisher) publishLost(iv *results.Interval) {
	p.metrics.LostList(iv)
	p.metrics.Reordered(iv)
	if p.lost != nil && len(iv.Lost) > 0 {
		if err := p.lost.Write(iv); err != nil {
			p.log.Error("writing the lost-packet file", "err", err)
		}
	}
}
