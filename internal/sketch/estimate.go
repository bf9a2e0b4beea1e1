package sketch

import (
	"fmt"
	"math"
)

// What every estimator returns, and their names. The paper's estimator is
// paper.go; decode is decode.go (its entry and the order of its stages)
// with a file per stage: decode_build.go, decode_delay.go,
// decode_variance.go, decode_identify.go, decode_loss.go and the solver
// decode_cg.go; publish.go turns either's estimates into what the receiver
// publishes.

var nan = math.NaN()

// z95 is the two-sided 95 % normal quantile.
const z95 = 1.959963984540054

// Estimator names a per-flow delay estimator (configuration key
// sketch.estimator).
type Estimator string

const (
	// EstimatorPaper is the LDS paper's Fig. 6 (EstimatePaper).
	EstimatorPaper Estimator = "paper"
	// EstimatorDecode is the receiver-side least-squares decoder
	// (EstimateDecode, docs/decode.md).
	EstimatorDecode Estimator = "decode"
)

// Validate accepts the known estimator names.
func (e Estimator) Validate() error {
	switch e {
	case EstimatorPaper, EstimatorDecode:
		return nil
	}
	return fmt.Errorf("sketch.estimator = %q: must be %q or %q", string(e), EstimatorDecode, EstimatorPaper)
}

// FlowEstimate is what the sketches say about one flow in one interval.
type FlowEstimate struct {
	Flow    uint64  // flow hash
	Delay   float64 // mean one-way delay in ns; NaN where no usable cell
	Stddev  float64 // ns; NaN where the data cannot support it
	CI95    float64 // 95% half-width of Delay, ns; NaN where undefined
	Samples float64 // effective sample size (packets of this flow, estimated, in the selected cells)
	Loss    float64 // estimated lost packets, >= 0
	// LossBound is the count-min bound on lost packets (paper section 4.3):
	// never below the truth when some row is unsampled. EstimatePaper's
	// Loss is this bound; EstimateDecode's Loss is a point estimate.
	LossBound float64
	Packets   float64 // estimated packets sent (count-min over rows, sampling undone)
	Bytes     float64 // estimated bytes (NaN if !Params.Bytes)
	Usable    int     // usable cells among the flow's R·k
	// Identified: the cells pin Delay down. EstimatePaper: a delay exists.
	// EstimateDecode: the posterior variance is at most a tenth of the
	// spread of flow means (docs/decode.md); if not, Delay is the posterior
	// mean (near the interval's mean) and CI95 is NaN.
	Identified bool
}
