package interval

// NewReceiverBuilder starts a receiver builder whose windows are all max_delay:
// NewReceiverBuilderPlan without a plan, for the tests.
func NewReceiverBuilder(p Params, captureStart int64, composition bool) (*ReceiverBuilder, error) {
	return NewReceiverBuilderPlan(p, captureStart, composition, nil)
}
