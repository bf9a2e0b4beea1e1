package sketch

import (
	"errors"
	"fmt"
	"math"
)

// SizingInput describes the traffic an LDS must survive (LDS paper section 3).
type SizingInput struct {
	Flows   int     // n: flows per interval
	Epsilon float64 // target probability that a large flow suffers only large collisions (0 < ε < 1/e)
	VLDA    int     // k (0 means 1)
	// Flow sizes follow a Pareto law Pr[T > x] = (ParetoScale/x)^ParetoShape.
	ParetoShape, ParetoScale float64
	Threshold                float64 // x: a flow is "large" above x packets, a collision "small" below x/k
	// Cells, if > 0, is a memory budget in cells (all rows together). The
	// rows are then chosen to maximise q for that budget (R = 1/(e·z·k))
	// instead of from Epsilon.
	Cells int
}

// Sizing is the recommended shape and what the model predicts for it.
type Sizing struct {
	Rows      int
	Columns   int
	RowsExact float64 // before rounding: -ln(ε)/k, or 1/(e·z·k) under a budget
	Q         float64 // predicted probability of small collisions in at least one of the R·k cells
	P         float64 // Pr[T1 > x] under the Pareto law
	Z         float64 // offered load of large flows per cell, n·P/(R·C)
	Cells     int     // R·C
	Bytes     int     // memory of one sketch, 40 bytes a cell (without byte counters)
}

// Q is q(Rk, z) = 1 - (z·Rk)^Rk, the probability that a large flow has only
// small collisions in at least one of its Rk cells (paper section 3.1 with
// R rows; section 3.2 with k: 1 - (n·k·R·P/C)^(Rk)). It is not 1 - z^(Rk):
// the paper splits C cells over R rows, hence the factor Rk inside. Check:
// q(4, 0.0875) = 1 - 0.35^4 = 0.9850 and q(1, 0.0875) = 0.9125, the paper's
// "0.9850 as compared with 0.91".
func Q(rowsK int, z float64) float64 {
	if rowsK < 1 || z < 0 || math.IsNaN(z) {
		return math.NaN()
	}
	x := z * float64(rowsK)
	if x >= 1 {
		return 0
	}
	return 1 - math.Pow(x, float64(rowsK))
}

// ParetoTail is Pr[T > x] = (scale/x)^shape for x > scale, else 1.
func ParetoTail(shape, scale, x float64) float64 {
	if x <= scale {
		return 1
	}
	return math.Pow(scale/x, shape)
}

// Size dimensions an LDS (paper sections 3.1 and 3.2). Without a budget:
// R = round(max(1, -ln ε / k)) and enough columns that q(Rk, z) >= 1-ε, i.e.
// z = n·P/(R·C) <= ε^(1/Rk)/(Rk) (at the optimum this is the paper's
// z_max = -1/(e·ln ε) for k = 1, giving C per row = e·n·P·k). With a
// budget of Cells: R = round(max(1, 1/(e·z·k))), z = n·P/Cells.
func Size(in SizingInput) (Sizing, error) {
	var errs []error
	if in.Flows < 1 {
		errs = append(errs, fmt.Errorf("flows = %d: must be at least 1", in.Flows))
	}
	k := in.VLDA
	if k == 0 {
		k = 1
	}
	if k < 1 || k > MaxVLDA {
		errs = append(errs, fmt.Errorf("vlda = %d: must be in [1, %d]", in.VLDA, MaxVLDA))
	}
	if !(in.ParetoShape > 0) || !(in.ParetoScale > 0) || math.IsInf(in.ParetoShape, 0) || math.IsInf(in.ParetoScale, 0) {
		errs = append(errs, fmt.Errorf("pareto shape %v and scale %v: both must be positive and finite", in.ParetoShape, in.ParetoScale))
	}
	if !(in.Threshold > 0) || math.IsInf(in.Threshold, 0) {
		errs = append(errs, fmt.Errorf("threshold x = %v: must be positive and finite", in.Threshold))
	}
	if in.Cells < 0 {
		errs = append(errs, fmt.Errorf("cells = %d: must not be negative", in.Cells))
	}
	if in.Cells == 0 && !(in.Epsilon > 0 && in.Epsilon < 1/math.E) {
		errs = append(errs, fmt.Errorf("epsilon = %v: must be in (0, 1/e) (the multi-row regime of section 3.1)", in.Epsilon))
	}
	if err := errors.Join(errs...); err != nil {
		return Sizing{}, fmt.Errorf("size sketch: %w", err)
	}
	n := float64(in.Flows)
	kf := float64(k)
	var s Sizing
	s.P = ParetoTail(in.ParetoShape, in.ParetoScale, in.Threshold)
	if in.Cells > 0 {
		z := n * s.P / float64(in.Cells)
		s.RowsExact = math.Max(1, 1/(math.E*z*kf))
		s.Rows = min(max(1, int(math.Round(s.RowsExact))), MaxRows, in.Cells)
		s.Columns = in.Cells / s.Rows
	} else {
		s.RowsExact = math.Max(1, -math.Log(in.Epsilon)/kf)
		s.Rows = min(max(1, int(math.Round(s.RowsExact))), MaxRows)
		rk := float64(s.Rows) * kf
		zmax := math.Pow(in.Epsilon, 1/rk) / rk
		s.Columns = int(math.Ceil(n * s.P / (zmax * float64(s.Rows))))
		// Guard against the last ulp: q must really reach 1-ε.
		for Q(s.Rows*k, n*s.P/float64(s.Rows*s.Columns)) < 1-in.Epsilon {
			s.Columns++
		}
	}
	s.Columns = max(s.Columns, k)
	if s.Columns > MaxColumns || s.Rows*s.Columns > MaxCells {
		return Sizing{}, fmt.Errorf("size sketch: %d x %d cells exceeds the limit of %d cells; lower the flow count or raise the threshold", s.Rows, s.Columns, MaxCells)
	}
	s.Cells = s.Rows * s.Columns
	s.Z = n * s.P / float64(s.Cells)
	s.Q = Q(s.Rows*k, s.Z)
	s.Bytes = s.Cells * 40
	return s, nil
}
