package interval

// NewRxBuilder starts a receiver builder whose windows are all max_delay:
// NewRxBuilderPlan without a plan, for the tests.
func NewRxBuilder(p Params, captureStart int64, composition bool) (*RxBuilder, error) {
	return NewRxBuilderPlan(p, captureStart, composition, nil)
}
