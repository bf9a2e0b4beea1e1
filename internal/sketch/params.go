package sketch

import (
	"errors"
	"fmt"
	"math"
)

// Limits keep a hostile or mistyped configuration (or encoded sketch) from
// asking for absurd memory; they are far beyond any sensible deployment.
const (
	MaxRows    = 64
	MaxColumns = 1 << 24
	MaxVLDA    = 4096
	MaxCells   = 1 << 26 // rows*columns
)

// Params is everything that changes a cell; it is part of the configuration
// fingerprint that sender and receiver must share.
type Params struct {
	Rows     int       // R
	Columns  int       // C
	VLDA     int       // k >= 1: cells per flow and row (virtual LDA length)
	Sampling []float64 // one rate per row, in (0,1]; nil/empty means all 1
	Bytes    bool      // keep a byte counter per cell
}

// DefaultParams is 4 x 4096, k = 1, no sampling (the defaults of the
// sketch.* keys in configs/sender.yaml and configs/receiver.yaml).
func DefaultParams() Params {
	return Params{Rows: 4, Columns: 4096, VLDA: 1, Sampling: []float64{1, 1, 1, 1}}
}

// Validate reports every problem at once; each message names the YAML key.
func (p Params) Validate() error {
	var errs []error
	if p.Rows < 1 || p.Rows > MaxRows {
		errs = append(errs, fmt.Errorf("sketch.rows = %d: must be in [1, %d]", p.Rows, MaxRows))
	}
	if p.Columns < 1 || p.Columns > MaxColumns {
		errs = append(errs, fmt.Errorf("sketch.columns = %d: must be in [1, %d]", p.Columns, MaxColumns))
	}
	if p.Rows >= 1 && p.Columns >= 1 && p.Rows*p.Columns > MaxCells {
		errs = append(errs, fmt.Errorf("sketch.rows * sketch.columns = %d: must be at most %d cells", p.Rows*p.Columns, MaxCells))
	}
	if p.VLDA < 1 || p.VLDA > MaxVLDA {
		errs = append(errs, fmt.Errorf("sketch.vlda = %d: must be in [1, %d]", p.VLDA, MaxVLDA))
	} else if p.Columns >= 1 && p.VLDA > p.Columns {
		errs = append(errs, fmt.Errorf("sketch.vlda = %d: must not exceed sketch.columns (%d)", p.VLDA, p.Columns))
	}
	if len(p.Sampling) != 0 && len(p.Sampling) != p.Rows {
		errs = append(errs, fmt.Errorf("sketch.sampling has %d rates: give one per row (sketch.rows = %d) or leave it empty for all 1", len(p.Sampling), p.Rows))
	}
	for i, r := range p.Sampling {
		// A rate below 2^-32 would sample nothing at all with a 32-bit draw.
		if math.IsNaN(r) || r <= 0 || r > 1 || samplingThreshold(r) == 0 {
			errs = append(errs, fmt.Errorf("sketch.sampling[%d] = %v: must be in (0, 1] (and at least 2^-32)", i, r))
		}
	}
	return errors.Join(errs...)
}

// normalized returns a copy whose Sampling has exactly Rows entries.
func (p Params) normalized() Params {
	s := make([]float64, p.Rows)
	for i := range s {
		s[i] = 1
		if i < len(p.Sampling) {
			s[i] = p.Sampling[i]
		}
	}
	p.Sampling = s
	return p
}

// Equal compares two parameter sets, treating empty Sampling as all 1.
func (p Params) Equal(o Params) bool {
	if p.Rows != o.Rows || p.Columns != o.Columns || p.VLDA != o.VLDA || p.Bytes != o.Bytes {
		return false
	}
	for i := 0; i < p.Rows; i++ {
		a, b := 1.0, 1.0
		if i < len(p.Sampling) {
			a = p.Sampling[i]
		}
		if i < len(o.Sampling) {
			b = o.Sampling[i]
		}
		if a != b {
			return false
		}
	}
	return true
}

// diff describes how o differs from p, for error messages.
func (p Params) diff(o Params) string {
	return fmt.Sprintf("rows %d/%d, columns %d/%d, vlda %d/%d, sampling %v/%v, bytes %v/%v",
		p.Rows, o.Rows, p.Columns, o.Columns, p.VLDA, o.VLDA, p.Sampling, o.Sampling, p.Bytes, o.Bytes)
}
