//go:build race

package replay

// raceDetector: this test binary runs under -race, about ten times slower.
// The accuracy tests then replay only their smallest trace: the larger
// ones measure accuracy, which the run without -race holds, and add no
// concurrency the small one does not have.
const raceDetector = true
