package receiver

import (
	"fmt"

	"github.com/lds-net/lds/internal/jsonl"
	"github.com/lds-net/lds/internal/results"
)

// openLost opens receiver.lost_file (if set) with the results file's
// rotation, durability and error counting; the returned function closes it.
func (r *Receiver) openLost() (func(), error) {
	rc := r.cfg.Receiver
	if rc.LostFile == "" {
		return func() {}, nil
	}
	opt := jsonl.Options{Lost: true, MaxBytes: rc.ResultsMaxBytes, MaxAge: rc.ResultsMaxAge, Keep: rc.ResultsKeep, Fsync: rc.ResultsFsync,
		OnError: r.metrics.ResultsWriteError}
	if r.opt.Replay {
		opt.MaxBytes, opt.MaxAge, opt.Fsync = 0, 0, false
	}
	w, err := jsonl.Open(rc.LostFile, opt)
	if err != nil {
		return nil, fmt.Errorf("receiver.lost_file: %w", err)
	}
	r.lostW = w
	return func() {
		if err := w.Close(); err != nil {
			r.log.Error("closing the lost-packet file: its last records may be lost", "file", rc.LostFile, "err", err)
		}
	}, nil
}

// reopenLost is SIGHUP for the lost-packet file.
func (r *Receiver) reopenLost() {
	if r.lostW == nil {
		return
	}
	if err := r.lostW.Reopen(); err != nil {
		r.log.Error("reopening the lost-packet file; retried at the next interval", "err", err)
		return
	}
	r.log.Info("lost-packet file reopened", "path", r.cfg.Receiver.LostFile)
}

// publishLost writes a complete interval's lost packets and counts them,
// and sets the link's reordered ratio.
func (r *Receiver) publishLost(iv *results.Interval) {
	r.metrics.LostList(iv)
	r.metrics.Reordered(iv)
	if r.lostW != nil && len(iv.Lost) > 0 {
		if err := r.lostW.Write(iv); err != nil {
			r.log.Error("writing the lost-packet file", "err", err)
		}
	}
}
